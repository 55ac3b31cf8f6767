package acceptance

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// shuffled returns recs in a deterministic shuffled order in which, for
// every aggregate, its lowest sequence number is not delivered first.
func shuffled(recs []storeRecord, seed uint64) []storeRecord {
	out := append([]storeRecord(nil), recs...)
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	// Move each aggregate's highest sequence number to the front of its
	// own deliveries, so every aggregate is out of order.
	first := map[string]int{}
	for i, rec := range out {
		f, ok := first[rec.AggregateID]
		if !ok {
			first[rec.AggregateID] = i
			continue
		}
		if rec.Seq > out[f].Seq {
			out[f], out[i] = out[i], out[f]
		}
	}
	return out
}

// TestOutOfOrderEventsStaleIgnored is scenario 4: commands and domain
// events are delivered with shuffled sequence numbers (records copied from
// the event store with `sluice store cat` and produced out of order onto
// the topics, before the relay ever runs). The instance worker waits for
// predecessors and applies every command in slot order. On the events
// topic two projections see the shuffle: a second projection worker builds
// the instances read model from the events under its own index prefix
// (skip-stale: events older than what it applied are acknowledged without a
// write and counted; its final documents are the state of the highest
// sequence number), and history (unguarded) gets exactly one document per
// event however late it arrives. The relay's later in-order publication
// changes nothing.
func TestOutOfOrderEventsStaleIgnored(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, setup{})
	p.startDefault("relay")
	shadow := p.add("projection-worker-instances", kindProjection,
		map[string]string{"SLUICE_PROJECTIONS": "instances", "ELASTICSEARCH_INDEX_PREFIX": shadowPrefix})
	shadow.start()
	shadow.waitReady(90 * time.Second)
	const db, class, steps = "ooo", "items", 5
	ids := []string{"a", "b", "c", "d"}
	for _, id := range ids {
		p.create(db, class, id, map[string]any{"step": 0, "f0": 0})
		for k := 1; k < steps; k++ {
			p.patch(db, class, id, map[string]any{"step": k, fmt.Sprintf("f%d", k): k})
		}
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(p.kafka.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	inject := func(topic string, recs []storeRecord) {
		var krs []*kgo.Record
		for _, r := range recs {
			krs = append(krs, &kgo.Record{Topic: topic, Key: r.Key, Value: r.Raw})
		}
		p.produce(prod, krs...)
	}

	t.Run("shuffled commands applied in slot order", func(t *testing.T) {
		cmds := p.storeCat("--from", "1")
		if len(cmds) != len(ids)*steps {
			t.Fatalf("store holds %d commands, want %d", len(cmds), len(ids)*steps)
		}
		inject(commandsTopic, shuffled(cmds, 1))
		waitFor(t, 120*time.Second, "every shuffled command finished", func() bool {
			n, err := p.unfinished("command", instanceHandler)
			return err == nil && n == 0
		})
		for _, id := range ids {
			doms := p.storeCat("--aggregate-type", "Instance", "--aggregate-id", db+":"+class+":"+id, "--kind", "domain")
			if len(doms) != steps {
				t.Fatalf("%s: %d domain events, want %d", id, len(doms), steps)
			}
			for _, d := range doms {
				// slot k holds the state after command k: step k-1.
				if d.Data["step"] != float64(d.Seq-1) {
					t.Errorf("%s slot %d: state %v, want step %d (commands applied out of order)", id, d.Seq, d.Data, d.Seq-1)
				}
			}
		}
		for _, r := range p.registry(instanceHandler, db+":") {
			if r.Status != "done" || r.Result != "applied" {
				t.Errorf("command %s #%d: %s %s", r.AggregateID, r.Seq, r.Status, r.Result)
			}
		}
	})

	var stale, fresh int
	var domIDs []string
	t.Run("shuffled events: stale skipped by instances, every event in history", func(t *testing.T) {
		var doms []storeRecord
		for _, r := range p.storeCat("--from", "1") {
			if r.Kind == "domain" {
				doms = append(doms, r)
				domIDs = append(domIDs, r.EventID)
			}
		}
		order := shuffled(doms, 2)
		// skip-stale: an event is stale when its aggregate already had a
		// higher or equal sequence number delivered before it.
		seen := map[string]int64{}
		for _, r := range order {
			if r.Seq <= seen[r.AggregateID] {
				stale++
				continue
			}
			seen[r.AggregateID] = r.Seq
			fresh++
		}
		if stale == 0 {
			t.Fatal("the shuffle produced no stale event")
		}
		inject(eventsTopic, order)
		waitFor(t, 90*time.Second, "every shuffled event finished by both projections", func() bool {
			h, err := p.unfinished("domain", historyHandler)
			if err != nil || h > 0 {
				return false
			}
			i, err := p.unfinished("domain", shadowHandler)
			return err == nil && i == 0 && p.caughtUp(historyGroup, eventsTopic) && p.caughtUp(shadowGroup, eventsTopic)
		})
		// instances (skip-stale): the stale events finished without a write.
		counts := map[string]int{}
		for _, r := range p.registry(shadowHandler, db+":") {
			counts[r.Status]++
		}
		if counts["skipped_stale"] != stale || counts["done"] != fresh {
			t.Errorf("instances registry %v, want %d done and %d skipped_stale", counts, fresh, stale)
		}
		if n := shadow.metric("sluice_worker_records_total", `outcome="stale"`); int(n) != stale {
			t.Errorf("instances projection counted %v stale records, want %d", n, stale)
		}
		for _, id := range ids {
			if seen[db+":"+class+":"+id] != steps {
				t.Errorf("%s: highest delivered event %d, want %d", id, seen[db+":"+class+":"+id], steps)
			}
			doc := p.docAt(shadowPrefix, db, class, id)
			if doc.Version != steps || doc.Source["step"] != float64(steps-1) {
				t.Errorf("%s: shadow document _version %d state %v, want the state of slot %d", id, doc.Version, doc.Source, steps)
			}
		}
		// history (unguarded): every event done, one document each.
		counts = map[string]int{}
		for _, r := range p.registry(historyHandler, db+":") {
			counts[r.Status]++
		}
		if counts["done"] != len(doms) || len(counts) != 1 {
			t.Errorf("history registry %v, want %d done", counts, len(doms))
		}
		if n := p.service("projection-worker").metric("sluice_worker_records_total", `outcome="stale"`); n != 0 {
			t.Errorf("history counted %v stale records, want 0", n)
		}
		p.checkHistory(db) // one document per domain event, both ways
	})

	t.Run("in-order republication changes nothing", func(t *testing.T) {
		acks := p.writes.acknowledged(indexPrefix)
		p.service("relay").start()
		waitFor(t, 60*time.Second, "the relay published the log", func() bool {
			return p.records(commandsTopic) >= int64(2*len(ids)*steps) && p.records(eventsTopic) >= int64(2*len(ids)*steps)
		})
		p.waitDrained(90 * time.Second)
		p.verify(db, class, len(ids))
		for _, id := range ids {
			doc := p.instanceDoc(db, class, id)
			if doc.Version != steps || doc.Source["step"] != float64(steps-1) || doc.Source[fmt.Sprintf("f%d", steps-1)] != float64(steps-1) {
				t.Errorf("%s: document _version %d state %v, want the state of slot %d", id, doc.Version, doc.Source, steps)
			}
		}
		waitFor(t, 60*time.Second, "the instances projection caught up", func() bool { return p.caughtUp(shadowGroup, eventsTopic) })
		counts := map[string]int{}
		for _, r := range p.registry(shadowHandler, db+":") {
			counts[r.Status]++
		}
		if counts["skipped_stale"] != stale || counts["done"] != fresh {
			t.Errorf("after republication instances registry %v, want %d done and %d skipped_stale", counts, fresh, stale)
		}
		p.checkHistory(db)
		if n := len(p.storeEvents("domain", db+":")); n != len(ids)*steps {
			t.Errorf("%d domain events, want %d", n, len(ids)*steps)
		}
		if n := p.writes.acknowledged(indexPrefix); n != acks {
			t.Errorf("republication made %d Elasticsearch writes", n-acks)
		}
		p.checkNoDuplicateWrites()
		p.checkConflicts(true) // stale events are skipped by the registry, never sent
		if n := p.records(commandsDLQ) + p.records(eventsDLQ); n != 0 {
			t.Errorf("DLQs hold %d records", n)
		}
	})
}
