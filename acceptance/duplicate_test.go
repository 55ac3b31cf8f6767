package acceptance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shared/crashpoint"
)

// TestDuplicatePublishSideEffectsOnce is scenario 1: the relay publishes
// the same events again — it crashes after producing and before moving its
// checkpoint, and an operator moves the checkpoint back to 0 — and the
// workers' side effects still happen once: one domain event per command,
// one registry row per (handler, event_id) with one attempt, each document
// version written once, one history document per event, empty DLQs.
func TestDuplicatePublishSideEffectsOnce(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, setup{})
	p.startDefault("relay")
	relay := p.service("relay")
	markers := t.TempDir()
	exp := expectation{db: "dup", class: "orders", faultFree: true}
	load := func(round int) {
		for i := range 4 {
			id := fmt.Sprintf("r%d-%d", round, i)
			p.create(exp.db, exp.class, id, map[string]any{"n": 0, "round": round})
			p.patch(exp.db, exp.class, id, map[string]any{"n": 1})
			p.patch(exp.db, exp.class, id, map[string]any{"tag": "x" + id})
			exp.instances++
			exp.applied += 3
			if i == 0 {
				p.del(exp.db, exp.class, id)
				exp.applied++
			}
		}
	}
	checkOnce := func(t *testing.T) {
		for _, h := range []string{instanceHandler, historyHandler} {
			for _, r := range p.registry(h, exp.db+":") {
				if r.Attempts != 1 {
					t.Errorf("%s: %s (%s #%d) took %d attempts, want 1 (a duplicate was processed again)", h, r.EventID, r.AggregateID, r.Seq, r.Attempts)
				}
			}
		}
	}

	for round, point := range []string{"after_produce", "before_checkpoint"} {
		t.Run("relay crash "+point, func(t *testing.T) {
			relay.restart(map[string]string{"SLUICE_CRASH_POINT": "relay:" + point, "SLUICE_CRASH_MARKER_DIR": markers})
			crashes := relay.exitCount(crashpoint.ExitCode)
			published := p.records(commandsTopic) + p.records(eventsTopic)
			stored := len(p.storeEvents("command", "")) + len(p.storeEvents("domain", ""))
			load(round + 1)
			waitFor(t, 60*time.Second, "relay crash at "+point, func() bool { return relay.exitCount(crashpoint.ExitCode) == crashes+1 })
			// The successor (the relay restarted after the crash, leading
			// once the crashed one's lease expired) has published up to the
			// head before the topics are counted. The drain alone does not
			// show that: the crashed relay may have published all of the
			// load before it crashed (its first checkpoint write comes
			// EVENT_PUBLISHER_CHECKPOINT_INTERVAL after its claim), and then
			// the workers have nothing left to wait for. The successor's
			// checkpoint position (in memory, past acknowledged records
			// only) at the head says it has.
			waitFor(t, 90*time.Second, "the successor relay's checkpoint at the head", func() bool {
				head, err := p.storeHead()
				cp, serr := relay.scrape("sluice_relay_checkpoint_position")
				return err == nil && serr == nil && head > 0 && int64(cp) >= head
			})
			p.waitDrained(90 * time.Second)
			// The crashed relay's last batch was published again by its
			// successor: the topics hold more records than new events.
			dups := (p.records(commandsTopic) + p.records(eventsTopic) - published) -
				int64(len(p.storeEvents("command", ""))+len(p.storeEvents("domain", ""))-stored)
			if dups <= 0 {
				t.Errorf("the relay crash at %s re-published nothing (%d duplicates): the scenario did not happen", point, dups)
			}
			t.Logf("relay crash at %s: %d records published twice", point, dups)
			p.checkEndState(exp)
			checkOnce(t)
		})
	}

	t.Run("checkpoint rollback to 0", func(t *testing.T) {
		relay.stop()
		cmds, doms := len(p.storeEvents("command", "")), len(p.storeEvents("domain", ""))
		before := map[string]int64{commandsTopic: p.records(commandsTopic), eventsTopic: p.records(eventsTopic)}
		acks := p.writes.acknowledged(indexPrefix)
		out, errOut, code := p.cli("relay", "checkpoint", "set", "--position", "0", "--yes")
		if code != 0 || !strings.Contains(out, "moved back") {
			t.Fatalf("relay checkpoint set --position 0: exit %d %s %s", code, out, errOut)
		}
		relay.setEnv(map[string]string{"SLUICE_CRASH_POINT": "", "SLUICE_CRASH_MARKER_DIR": ""})
		relay.start()
		relay.waitReady(90 * time.Second)
		waitFor(t, 90*time.Second, "every event published again", func() bool {
			return p.records(commandsTopic) >= before[commandsTopic]+int64(cmds) && p.records(eventsTopic) >= before[eventsTopic]+int64(doms)
		})
		p.waitDrained(90 * time.Second)
		p.checkEndState(exp)
		checkOnce(t)
		if n := p.writes.acknowledged(indexPrefix); n != acks {
			t.Errorf("Elasticsearch acknowledged %d writes after the replay, %d before: the replay made side effects", n, acks)
		}
		if n := len(p.storeEvents("domain", "")); n != doms {
			t.Errorf("%d domain events after the replay, %d before", n, doms)
		}
	})
}
