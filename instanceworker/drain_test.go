package instanceworker_test

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/registry/registrytest"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
)

// rowsWithStatus returns the event ids of the instance worker's registry
// rows in the given status.
func (e *env) rowsWithStatus(st claim.Status) map[string]bool {
	e.t.Helper()
	rows, err := registrytest.Rows(ctxT(e.t), e.pool, instanceworker.HandlerName)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, r := range rows {
		if r.Status == st {
			out[r.EventID] = true
		}
	}
	return out
}

// committedByPartition returns the group's committed offset per partition
// of the commands topic (absent: nothing committed).
func (e *env) committedByPartition() map[int32]int64 {
	e.t.Helper()
	offs, err := kadm.NewClient(e.producer()).FetchOffsets(ctxT(e.t), e.config(nil).Kafka.Group(instanceworker.GroupName))
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == e.topic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// topicRecords reads every record of the commands topic, per partition in
// offset order.
func (e *env) topicRecords() map[int32][]*kgo.Record {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Brokers...), kgo.ConsumeTopics(e.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctxT(e.t), e.topic)
	if err != nil {
		e.t.Fatal(err)
	}
	var total, n int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	out := map[int32][]*kgo.Record{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for n < total && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out[r.Partition] = append(out[r.Partition], r); n++ })
	}
	if n != total {
		e.t.Fatalf("read %d of %d topic records", n, total)
	}
	return out
}

// TestDrain runs the worker as a real process, slows the Elasticsearch
// document writes so that handlers are in flight, and sends SIGTERM (docs/worker-runtime.md#shutdown-sigterm):
//
//   - finish: the writes take less than SHUTDOWN_TIMEOUT, so the in-flight
//     commands are finished and marked done during the drain;
//   - deadline: the writes outlast SHUTDOWN_TIMEOUT, so the handlers are
//     cancelled at the deadline and their claims released.
//
// Either way the process exits 0, no registry row is left
// processing, the committed offset of every partition is exactly the done
// prefix (every record below it is done, the record at it is not), and a
// restart applies every command exactly once.
func TestDrain(t *testing.T) {
	cases := []struct {
		name            string
		delay, shutdown time.Duration
		slow            string // the document writes slowed down
		inFlightDone    bool   // in-flight commands are done at exit
	}{
		// The worker writes a round's documents with one _bulk: slowing the
		// bulk keeps every handler of the round in flight.
		{name: "finish", delay: 1500 * time.Millisecond, shutdown: 8 * time.Second, slow: "/_bulk", inFlightDone: true},
		// The round's bulk hangs past the deadline: its handlers are
		// cancelled and their claims released, so none of them is done at
		// exit. (The hung bulk is answered 5 s later — with version 1,
		// which the re-run's versions make harmless.)
		{name: "deadline", delay: 5 * time.Second, shutdown: 2 * time.Second, slow: "/_bulk"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2)
			ids := []string{"d0", "d1", "d2", "d3"}
			var all []cmd
			for _, id := range ids {
				all = append(all, e.appendCmd(instanceworker.CreateInstance, "drain", "things", id, create("drain", "things", strp(id), map[string]any{"v": 0})))
			}
			for _, id := range ids {
				all = append(all, e.appendCmd(instanceworker.UpdateInstance, "drain", "things", id, map[string]any{"data": map[string]any{"v": 1}}))
			}
			for _, id := range ids {
				all = append(all, e.appendCmd(instanceworker.UpdateInstance, "drain", "things", id, map[string]any{"data": map[string]any{"w": 2}}))
			}
			e.publish(all...)

			removeFault := e.es.InjectFault(esserver.Fault{Match: esserver.MatchPath(http.MethodPost, tc.slow), Delay: tc.delay})
			p := e.startProcess(map[string]string{"SHUTDOWN_TIMEOUT": fmt.Sprint(tc.shutdown)})
			var inFlight map[string]bool
			testenv.WaitFor(t, 30*time.Second, "handlers in flight", func() bool {
				inFlight = e.rowsWithStatus(claim.StatusProcessing)
				if !tc.inFlightDone {
					// deadline: the first round's bulk hangs.
					return len(inFlight) > 0
				}
				// finish: mid-run, with some commands already done.
				return len(inFlight) > 0 && len(e.rowsWithStatus(claim.StatusDone)) > 0
			})
			if err := p.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			// A hang guard, not the assertion: whether the drain kept to
			// SHUTDOWN_TIMEOUT is read from the registry below.
			code := p.ExitCode(t, 2*time.Minute)
			t.Logf("SIGTERM with %d handlers in flight: exit %d", len(inFlight), code)
			if code != 0 {
				t.Fatalf("exit code %d after SIGTERM, want 0", code)
			}

			// Right after the exit: nothing left processing; in-flight
			// commands finished (finish) or handed back (deadline).
			if left := e.rowsWithStatus(claim.StatusProcessing); len(left) > 0 {
				t.Errorf("%d registry rows still processing after the drain", len(left))
			}
			done := e.rowsWithStatus(claim.StatusDone)
			for id := range inFlight {
				if tc.inFlightDone && !done[id] {
					t.Errorf("command %s was in flight at SIGTERM and is not done after the drain", id)
				}
				// deadline: the hung bulk is answered only after the
				// delay, which outlasts SHUTDOWN_TIMEOUT. A drain that
				// kept to the timeout cancelled its handlers and released
				// their claims; one that waited for the bulk marked them
				// done.
				if !tc.inFlightDone && done[id] {
					t.Errorf("command %s was in flight at SIGTERM and is done after the drain: the drain waited for the hung write (%s) past SHUTDOWN_TIMEOUT %s", id, tc.delay, tc.shutdown)
				}
			}
			// The committed offsets are exactly the done prefix.
			committed := e.committedByPartition()
			recs := e.topicRecords()
			var below int
			for part, rs := range recs {
				at, ok := committed[part]
				if !ok {
					at = 0
				}
				for _, r := range rs {
					env, err := envelope.Parse(r.Value, envelope.Limits{})
					if err != nil {
						t.Fatal(err)
					}
					switch {
					case r.Offset < at && !done[env.EventID]:
						t.Errorf("partition %d: committed offset %d passes record %d (slot %d of %s), which is not done",
							part, at, r.Offset, env.SequenceNumber, env.AggregateID)
					case r.Offset < at:
						below++
					case r.Offset == at && done[env.EventID]:
						t.Errorf("partition %d: record %d is done but the committed offset stayed at %d", part, r.Offset, at)
					}
				}
			}
			t.Logf("committed after the drain %v (%d records below, %d done)", committed, below, len(done))
			if tc.inFlightDone && below == 0 {
				t.Error("nothing committed by the drain, want the done prefix")
			}

			// Restart without the slow writes: every command exactly once.
			removeFault()
			p = e.startProcess(nil)
			testenv.WaitFor(t, 40*time.Second, "all commands done after restart", func() bool { return e.allDone(all...) })
			testenv.WaitFor(t, 20*time.Second, "offsets committed", func() bool { c, end := e.committed(); return c == end })
			if code := p.Term(t); code != 0 {
				t.Errorf("second run: SIGTERM exit code %d, want 0", code)
			}
			for _, c := range all {
				if o := e.outcome(c); o != claim.Applied() {
					t.Errorf("slot %d of %s: outcome %+v, want applied", c.ev.Envelope.SequenceNumber, c.ev.Envelope.AggregateID, o)
				}
			}
			rows, err := registrytest.Rows(ctxT(t), e.pool, instanceworker.HandlerName)
			if err != nil {
				t.Fatal(err)
			}
			attempts := 0
			for _, r := range rows {
				attempts = max(attempts, r.Attempts)
			}
			if attempts != 1 {
				t.Errorf("max attempt_count %d, want 1 (a released claim counts no attempt)", attempts)
			}
			events := e.domainEvents()
			for _, id := range ids {
				agg := "drain:things:" + id
				if got := events[agg]; !reflect.DeepEqual(got, []string{"1×1", "2×1", "3×1"}) {
					t.Errorf("%s: domain events %v, want one per slot 1–3", agg, got)
				}
				if v, src, _ := e.doc("drain", "things", id); v != 3 || src["v"] != float64(1) || src["w"] != float64(2) {
					t.Errorf("%s: version %d doc %v, want version 3 {v:1, w:2}", agg, v, src)
				}
			}
			if n := len(e.dlqRecords()); n != 0 {
				t.Errorf("DLQ holds %d records, want 0", n)
			}
		})
	}
}
