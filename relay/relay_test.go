package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/eventstoretest"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/testskip"
	"github.com/sluicehq/sluice/shared/envelope"
)

// cleanRunEvents is the event count of the clean-run test
// (SLUICE_RELAY_TEST_EVENTS overrides; -short uses 2,000).
func cleanRunEvents(t *testing.T) int {
	if v := os.Getenv("SLUICE_RELAY_TEST_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if testing.Short() {
		return 2000
	}
	return 10000
}

// mixedEnvelopes returns n envelopes over aggs aggregates: commands, every
// 10th a direct domain event, some with trace context, some with a
// principal, one routed by
// metadata.kafka_topic (unless customTopic is empty).
func mixedEnvelopes(n, aggs int, customTopic string) []envelope.Envelope {
	out := make([]envelope.Envelope, n)
	for i := range out {
		e := command("agg-"+strconv.Itoa(i%aggs), i)
		if i%10 == 3 {
			e.Kind, e.EventType = envelope.KindDomain, "SOMETHING_DONE"
		}
		if i%7 == 0 {
			e.Metadata.SetString(envelope.MetaTraceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			e.Metadata.SetString(envelope.MetaTracestate, "vendor=x")
		}
		if i%5 == 1 {
			e.Metadata.SetString(envelope.MetaPrincipal, "team-"+strconv.Itoa(i%3))
		}
		if i == n/2 && customTopic != "" {
			e.Metadata.SetString(envelope.MetaKafkaTopic, customTopic)
		}
		out[i] = e
	}
	return out
}

// verify checks that every stored event is on Kafka, with key, value and
// headers as specified, and per aggregate in sequence order; it returns
// how many times each event id was seen.
func verify(t *testing.T, e *env, stored map[string]eventstore.Event, recs []*kgo.Record, customTopic string) map[string]int {
	t.Helper()
	seen := map[string]int{}
	lastSeq := map[string]int64{} // topic|partition|aggregate → last sequence
	for _, r := range recs {
		id, _ := header(r, "event_id")
		seen[id]++
		ev, ok := stored[id]
		if !ok {
			t.Fatalf("record %s/%d@%d carries unknown event_id %q", r.Topic, r.Partition, r.Offset, id)
		}
		env := ev.Envelope
		if !bytes.Equal(r.Value, ev.Raw) {
			t.Fatalf("event %s: value differs from the segment line:\n%s\n%s", id, r.Value, ev.Raw)
		}
		if !bytes.Equal(r.Key, envelope.KafkaKey(env)) {
			t.Fatalf("event %s: key %q, want %q", id, r.Key, envelope.KafkaKey(env))
		}
		wantTopic := e.commandsTopic()
		switch {
		case env.Metadata.KafkaTopic() != "":
			wantTopic = customTopic
		case env.Kind == envelope.KindDomain:
			wantTopic = e.eventsTopic()
		}
		if r.Topic != wantTopic {
			t.Fatalf("event %s (kind %s) on topic %s, want %s", id, env.Kind, r.Topic, wantTopic)
		}
		want := map[string]string{
			"event_id": env.EventID, "event_type": env.EventType, "kind": string(env.Kind),
			"aggregate_type": env.AggregateType, "aggregate_id": env.AggregateID,
			"sequence_number": strconv.FormatInt(env.SequenceNumber, 10), "position": strconv.FormatInt(env.Position, 10),
			"content-type": "application/json",
		}
		if tp := env.Metadata.Traceparent(); tp != "" {
			want["traceparent"], want["tracestate"] = tp, env.Metadata.Tracestate()
		}
		if p, _ := env.Metadata.String(envelope.MetaPrincipal); p != "" {
			want["principal"] = p
		} else if _, ok := header(r, "principal"); ok {
			t.Fatalf("event %s: principal header without a principal", id)
		}
		for k, v := range want {
			if got, ok := header(r, k); !ok || got != v {
				t.Fatalf("event %s: header %s = %q (present %v), want %q", id, k, got, ok, v)
			}
		}
		if _, ok := header(r, "traceparent"); ok && env.Metadata.Traceparent() == "" {
			t.Fatalf("event %s: traceparent header without trace context", id)
		}
		k := fmt.Sprintf("%s|%d|%s", r.Topic, r.Partition, env.AggregateID)
		if seen[id] == 1 {
			if env.SequenceNumber <= lastSeq[k] {
				t.Fatalf("aggregate %s on %s/%d: sequence %d after %d", env.AggregateID, r.Topic, r.Partition, env.SequenceNumber, lastSeq[k])
			}
			lastSeq[k] = env.SequenceNumber
		}
	}
	for id, ev := range stored {
		if seen[id] == 0 {
			t.Fatalf("event %s (position %d) was never published", id, ev.Envelope.Position)
		}
	}
	return seen
}

func TestCleanRunExactlyOnceInOrder(t *testing.T) {
	n := cleanRunEvents(t)
	e := newEnv(t, 30*time.Second)
	custom := e.prefix + "custom"
	opts := e.opts(t)
	r, stop := runRelay(t, e, opts)
	start := time.Now()
	stored := appendAll(t, e.store, 64, mixedEnvelopes(n, 100, custom))
	t.Logf("appended %d events in %s", len(stored), time.Since(start).Round(time.Millisecond))
	testenv.WaitFor(t, 2*time.Minute, "checkpoint to reach the head", func() bool {
		return e.checkpoint(t).Position == int64(n)
	})
	t.Logf("published %d events %s after the first append", n, time.Since(start).Round(time.Millisecond))
	if err := r.Ready(context.Background()); err != nil {
		t.Errorf("caught up relay not ready: %v", err)
	}
	stop()
	recs := e.consumeAll(t, e.commandsTopic(), e.eventsTopic(), custom)
	seen := verify(t, e, stored, recs, custom)
	for id, c := range seen {
		if c != 1 {
			t.Errorf("event %s published %d times in a clean run", id, c)
		}
	}
	if len(recs) != n {
		t.Errorf("%d records for %d events", len(recs), n)
	}
	cp := e.checkpoint(t)
	if cp.Position != int64(n) || len(cp.PendingGaps) != 0 || len(cp.RecentEventIDs) != 2000 || cp.RelayEpoch != 1 {
		t.Errorf("final checkpoint position %d gaps %v recent %d epoch %d", cp.Position, cp.PendingGaps, len(cp.RecentEventIDs), cp.RelayEpoch)
	}
	if got := sumVec(r.m.published); got != float64(n) {
		t.Errorf("sluice_relay_published_total %v, want %d", got, n)
	}
}

// TestCrashRestart crashes a relay process at each crash point, restarts
// it and checks that nothing is missing and that the only duplicates are
// records produced after the last durable checkpoint: at most
// CheckpointMaxRecords of them, all right after the checkpoint's position
// (docs/relay.md, "Pipeline and the crash bound").
func TestCrashRestart(t *testing.T) {
	const n, batch, maxRecords = 1500, 100, 300
	cases := []struct {
		point string
		// atCrashZero: no checkpoint write after the claim can have
		// happened before the crash.
		atCrashZero bool
	}{
		{"after_produce", true},     // the first batch acknowledged, nothing written
		{"before_checkpoint", true}, // the first write about to start
		// A write in flight (it may or may not have landed) and a later
		// batch already acknowledged: the bound's worst case.
		{"checkpoint_in_flight", false},
	}
	for _, c := range cases {
		t.Run(c.point, func(t *testing.T) {
			e := newEnv(t, 30*time.Second)
			stored := appendAll(t, e.store, 16, mixedEnvelopes(n, 20, e.prefix+"custom"))
			marker := t.TempDir()
			extra := []string{"SLUICE_CRASH_POINT=relay:" + c.point, "SLUICE_CRASH_MARKER_DIR=" + marker,
				"EVENT_PUBLISHER_BATCH_SIZE=" + strconv.Itoa(batch), "EVENT_PUBLISHER_KAFKA_FLUSH_BATCH_SIZE=" + strconv.Itoa(batch),
				"RELAY_TEST_CHECKPOINT_MAX_RECORDS=" + strconv.Itoa(maxRecords),
				// The bound holds for one leadership until the crash. With
				// the helpers' 2 s lease a renewal waits at most 667 ms for
				// Postgres; on a loaded machine two slow renewals ended the
				// first relay's leadership, it led again from its last
				// durable checkpoint and re-published on its own, past the
				// bound. A 10 s lease tolerates stalls of seconds; the
				// restart waits for it to expire (the crash releases
				// nothing), within the catch-up's hang guard.
				"EVENT_PUBLISHER_LEADER_LEASE_SECONDS=10"}
			p1 := e.startHelper(t, "first", extra...)
			if code := p1.wait(t, time.Minute); code != 42 {
				t.Fatalf("relay exited with %d, want the crash code 42", code)
			}
			atCrash := e.checkpoint(t)
			if atCrash.RelayEpoch != 1 {
				t.Fatalf("checkpoint at crash has epoch %d: the first relay lost its lease and led again before the crash point (a precondition of the bound, not the bound)", atCrash.RelayEpoch)
			}
			if c.atCrashZero && atCrash.Position != 0 {
				t.Fatalf("checkpoint at crash %d, want 0 (nothing was saved)", atCrash.Position)
			}
			if atCrash.Position >= n-maxRecords {
				t.Fatalf("checkpoint at crash %d: the crash point was hit too late to test anything", atCrash.Position)
			}
			p2 := e.startHelper(t, "second", extra...)
			testenv.WaitFor(t, time.Minute, "restarted relay to catch up", func() bool { return e.checkpoint(t).Position == n })
			if code := p2.stop(t); code != 0 {
				t.Fatalf("restarted relay exited with %d", code)
			}
			recs := e.consumeAll(t, e.commandsTopic(), e.eventsTopic(), e.prefix+"custom")
			seen := verifyAtLeastOnce(t, stored, recs)
			dups := 0
			for id, cnt := range seen {
				if cnt > 1 {
					dups += cnt - 1
					if p := stored[id].Envelope.Position; p <= atCrash.Position || p > atCrash.Position+maxRecords || cnt > 2 {
						t.Errorf("event at position %d seen %d times: outside the bound (%d, %d]", p, cnt, atCrash.Position, atCrash.Position+maxRecords)
					}
				}
			}
			if dups == 0 || dups > maxRecords {
				t.Errorf("%d duplicates, want 1..%d (acknowledged after the last durable checkpoint)", dups, maxRecords)
			}
			t.Logf("checkpoint at crash %d, %d duplicates (bound %d)", atCrash.Position, dups, maxRecords)
			if cp := e.checkpoint(t); cp.RelayEpoch != 2 {
				t.Errorf("checkpoint epoch %d after one takeover, want 2", cp.RelayEpoch)
			}
		})
	}
}

// verifyAtLeastOnce checks every stored event is on Kafka with its line as
// value; it returns the count per event id.
func verifyAtLeastOnce(t *testing.T, stored map[string]eventstore.Event, recs []*kgo.Record) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for _, r := range recs {
		id, _ := header(r, "event_id")
		ev, ok := stored[id]
		if !ok {
			t.Fatalf("unknown event id %q on Kafka", id)
		}
		if !bytes.Equal(r.Value, ev.Raw) {
			t.Fatalf("event %s: value differs from its line", id)
		}
		seen[id]++
	}
	for id, ev := range stored {
		if seen[id] == 0 {
			t.Errorf("event %s at position %d missing from Kafka", id, ev.Envelope.Position)
		}
	}
	return seen
}

// TestTwoReplicas runs two relay processes: exactly one publishes; killing
// it (no lease release) makes the other take over within seconds.
func TestTwoReplicas(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	a := e.startHelper(t, "replica-a")
	b := e.startHelper(t, "replica-b")
	procs := map[string]*helperProc{"replica-a": a, "replica-b": b}
	first := appendAll(t, e.store, 16, mixedEnvelopes(600, 30, e.prefix+"custom"))
	testenv.WaitFor(t, time.Minute, "first batch published", func() bool { return e.checkpoint(t).Position == 600 })
	lease := NewLease(e.pool, "test", "", time.Second)
	info, found, err := lease.Info(ctxT(t, 10*time.Second))
	if err != nil || !found {
		t.Fatalf("lease: %v found %v", err, found)
	}
	recs := e.consumeAll(t, e.commandsTopic(), e.eventsTopic(), e.prefix+"custom")
	for id, c := range verifyAtLeastOnce(t, first, recs) {
		if c != 1 {
			t.Fatalf("event %s published %d times by two replicas", id, c)
		}
	}
	cp := e.checkpoint(t)
	if cp.Holder != info.Holder || cp.RelayEpoch != info.Epoch {
		t.Fatalf("checkpoint written by %s/%d, lease held by %s/%d", cp.Holder, cp.RelayEpoch, info.Holder, info.Epoch)
	}
	// Kill the leader: no release, the lease must expire.
	leader := procs[info.Holder]
	if err := leader.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	leader.wait(t, 10*time.Second)
	second := appendAll(t, e.store, 16, mixedEnvelopes(400, 30, e.prefix+"custom"))
	// The wait is a hang guard, not the assertion: the takeover is proved
	// by the lease (the other replica holds the next epoch) and by the
	// checkpoint written under that epoch, whatever the machine's speed.
	testenv.WaitFor(t, 2*time.Minute, "standby to take over", func() bool { return e.checkpoint(t).Position == 1000 })
	after, found, err := lease.Info(ctxT(t, 10*time.Second))
	if err != nil || !found {
		t.Fatalf("lease after takeover: %v found %v", err, found)
	}
	if after.Epoch != info.Epoch+1 || after.Holder == info.Holder || procs[after.Holder] == nil {
		t.Errorf("after takeover the lease is %s/%d, want the other replica at epoch %d", after.Holder, after.Epoch, info.Epoch+1)
	}
	cp = e.checkpoint(t)
	if cp.RelayEpoch != info.Epoch+1 || cp.Holder == info.Holder {
		t.Errorf("after takeover checkpoint epoch %d holder %s, want epoch %d by the other replica", cp.RelayEpoch, cp.Holder, info.Epoch+1)
	}
	for id, ev := range second {
		first[id] = ev
	}
	recs = e.consumeAll(t, e.commandsTopic(), e.eventsTopic(), e.prefix+"custom")
	for id, c := range verifyAtLeastOnce(t, first, recs) {
		if c != 1 {
			t.Errorf("event %s published %d times (the killed leader had saved everything)", id, c)
		}
	}
}

// TestFencedByNewerEpoch: a leader whose lease and checkpoint were taken
// over by a newer epoch stops publishing.
func TestFencedByNewerEpoch(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	opts := e.opts(t)
	opts.Config.Holder = "old"
	var logs testenv.Buffer
	opts.Deps.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t, "log"}), &slog.HandlerOptions{Level: slog.LevelInfo}))
	r, _ := runRelay(t, e, opts)
	appendAll(t, e.store, 4, mixedEnvelopes(50, 5, e.prefix+"custom"))
	testenv.WaitFor(t, 30*time.Second, "first events published", func() bool { return e.checkpoint(t).Position == 50 })
	standbys := logs.Count("relay: standing by")
	ctx := ctxT(t, 30*time.Second)
	// A newer leader takes lease and checkpoint (as after a partition).
	if _, err := e.pool.Exec(ctx, `UPDATE sluice.relay_leases SET holder = 'new', epoch = epoch + 1, expires_at = now() + interval '1 hour' WHERE name = 'test'`); err != nil {
		t.Fatal(err)
	}
	cps := NewCheckpointStore(e.bucket, "checkpoints/test.json")
	cp, etag, _, err := cps.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	staleTag := etag
	cp.RelayEpoch, cp.Holder = cp.RelayEpoch+1, "new"
	if _, err := cps.Save(ctx, cp, etag); err != nil {
		t.Fatal(err)
	}
	// The stale relay's conditional write fails.
	if _, err := cps.Save(ctx, Checkpoint{Position: 999, RelayEpoch: 1}, staleTag); err == nil {
		t.Fatal("a write over a stale ETag succeeded")
	}
	appendAll(t, e.store, 4, mixedEnvelopes(50, 5, e.prefix+"custom"))
	// Positive evidence before the negative checks below: the fenced
	// counter moves only after the leadership's loop returned (its
	// checkpoint writes joined), and the standby line is logged when the
	// relay, back in its lease loop, found the newer holder's lease and
	// did not take it. Nothing the stale relay does after that can touch
	// the checkpoint unless it leads again, which Leader() reports.
	// (The deadlines are hang guards.)
	testenv.WaitFor(t, 30*time.Second, "old leader fenced", func() bool { return value(r.m.fenced) >= 1 })
	testenv.WaitFor(t, 30*time.Second, "fenced relay back in its lease loop, standing by", func() bool {
		return logs.Count("relay: standing by") > standbys
	})
	if got := e.checkpoint(t); got.Position != 50 || got.RelayEpoch != 2 || got.Holder != "new" {
		t.Errorf("checkpoint after fencing: position %d epoch %d holder %s, want 50/2/new (untouched by the stale relay)", got.Position, got.RelayEpoch, got.Holder)
	}
	if r.Leader() {
		t.Error("fenced relay leads again while the newer lease is valid")
	}
	if v := value(r.m.fenced); v < 1 {
		t.Errorf("sluice_relay_fenced_total %v", v)
	}
}

// reserveCrashed inserts a reservation for env as a writer that died right
// after reserving would leave it (no segment), returning its position.
func reserveCrashed(t *testing.T, e *env, env envelope.Envelope) int64 {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	p, err := envelope.Prepare(env, envelope.DefaultLimits(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	h, err := envelope.CanonicalHash(p)
	if err != nil {
		t.Fatal(err)
	}
	pos, _, err := eventstoretest.Forge(ctx, e.pool, eventstoretest.Forged{EventID: p.EventID, Kind: p.Kind, AggregateType: p.AggregateType,
		AggregateID: p.AggregateID, State: eventstore.StateReserved, CanonicalHash: h[:], OccurredAt: p.OccurredAt.Time()})
	if err != nil {
		t.Fatal(err)
	}
	return pos
}

// TestCrashedWriterGap: a reservation whose writer died holds back only its
// aggregate; after the append timeout it is abandoned and passed; when the
// event is committed later (a retry) it is published late and counted.
func TestCrashedWriterGap(t *testing.T) {
	const appendTO = 3 * time.Second
	e := newEnv(t, appendTO)
	r, _ := runRelay(t, e, e.opts(t))
	before := appendAll(t, e.store, 1, []envelope.Envelope{command("X", 0), command("Y", 0)})
	testenv.WaitFor(t, 20*time.Second, "first events", func() bool { return e.checkpoint(t).Position == 2 })

	crashed := command("X", 1)
	gapPos := reserveCrashed(t, e, crashed)
	after := appendAll(t, e.store, 1, []envelope.Envelope{command("Y", 1), command("X", 2), command("Z", 1)})
	var heldID string
	for id, ev := range after {
		if ev.Envelope.AggregateID == "X" {
			heldID = id
		}
	}
	// Unrelated aggregates flow at once; X waits; the checkpoint waits.
	testenv.WaitFor(t, 10*time.Second, "unrelated aggregates published past the young gap", func() bool {
		return sumVec(r.m.published) == 4
	})
	recs := e.consumeAll(t, e.commandsTopic())
	for _, rec := range recs {
		if id, _ := header(rec, "event_id"); id == heldID {
			t.Fatal("the event of the gap's aggregate was published before the gap resolved")
		}
	}
	if cp := e.checkpoint(t); cp.Position != gapPos-1 {
		t.Fatalf("checkpoint %d passed the young gap at %d", cp.Position, gapPos)
	}
	// After the append timeout: abandoned, passed, X's event published.
	// A hang guard, not the assertion: the resolution is checked below by
	// its mechanism (the gap recorded as pending, resolved once as
	// abandoned by the relay's repair).
	testenv.WaitFor(t, 2*time.Minute, "gap to be abandoned and passed", func() bool { return e.checkpoint(t).Position == gapPos+3 })
	cp := e.checkpoint(t)
	if len(cp.PendingGaps) != 1 || cp.PendingGaps[0].First != gapPos || cp.PendingGaps[0].Last != gapPos {
		t.Fatalf("pending gaps %+v, want [%d,%d]", cp.PendingGaps, gapPos, gapPos)
	}
	if v := value(r.m.gaps.WithLabelValues("abandoned")); v != 1 {
		t.Errorf("abandoned resolutions %v, want 1", v)
	}
	// The writer's retry: abandoned is final (docs/eventstore.md), so the
	// event is stored again at a fresh position after the head and
	// published in order, never acknowledged at the position the relay
	// has passed.
	res, err := e.store.AppendOne(ctxT(t, 10*time.Second), crashed)
	if err != nil {
		t.Fatal(err)
	}
	if res.Event.Envelope.Position <= gapPos+3 {
		t.Fatalf("retry stored at %d, want a fresh position after %d", res.Event.Envelope.Position, gapPos+3)
	}
	testenv.WaitFor(t, 20*time.Second, "the retry published in order", func() bool {
		return e.checkpoint(t).Position >= res.Event.Envelope.Position
	})
	testenv.WaitFor(t, 10*time.Second, "gap to leave the checkpoint", func() bool { return len(e.checkpoint(t).PendingGaps) == 0 })
	stored := map[string]eventstore.Event{crashed.EventID: res.Event}
	for id, ev := range before {
		stored[id] = ev
	}
	for id, ev := range after {
		stored[id] = ev
	}
	for id, c := range verifyAtLeastOnce(t, stored, e.consumeAll(t, e.commandsTopic())) {
		if c != 1 {
			t.Errorf("event %s published %d times", id, c)
		}
	}
}

// TestRolledBackReservation: a reservation rolled back leaves no hole and
// never stalls anything.
func TestRolledBackReservation(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	ctx := ctxT(t, 30*time.Second)
	if err := eventstoretest.RolledBackReservation(ctx, e.pool, 5); err != nil {
		t.Fatal(err)
	}
	r, _ := runRelay(t, e, e.opts(t))
	appendAll(t, e.store, 4, mixedEnvelopes(20, 4, e.prefix+"custom"))
	testenv.WaitFor(t, 10*time.Second, "all published", func() bool { return e.checkpoint(t).Position == 20 })
	if cp := e.checkpoint(t); len(cp.PendingGaps) != 0 || sumVec(r.m.gaps) != 0 {
		t.Errorf("gaps after a rolled-back reservation: %+v, resolutions %v", cp.PendingGaps, sumVec(r.m.gaps))
	}
}

// TestKafkaOutage: produce requests fail with a retriable error; the relay
// pauses with readiness red and the checkpoint still, then resumes without
// loss or duplicates.
func TestKafkaOutage(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	if e.kafka.Cluster == nil {
		testskip.Skip(t, "fault injection needs kfake (SLUICE_TEST_KAFKA_BROKERS is set)")
	}
	opts := e.opts(t)
	opts.Config.KafkaFlushTimeout = 500 * time.Millisecond
	r, _ := runRelay(t, e, opts)
	first := appendAll(t, e.store, 4, mixedEnvelopes(100, 10, e.prefix+"custom"))
	testenv.WaitFor(t, 20*time.Second, "first events", func() bool { return e.checkpoint(t).Position == 100 })

	fault := e.kafka.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: -1})
	second := appendAll(t, e.store, 4, mixedEnvelopes(100, 10, e.prefix+"custom"))
	testenv.WaitFor(t, 20*time.Second, "readiness to turn red", func() bool { return r.Ready(context.Background()) != nil })
	t.Logf("readiness during the outage: %v", r.Ready(context.Background()))
	if cp := e.checkpoint(t); cp.Position != 100 {
		t.Fatalf("checkpoint moved to %d during the outage", cp.Position)
	}
	fault.Remove()
	testenv.WaitFor(t, 30*time.Second, "resume", func() bool { return e.checkpoint(t).Position == 200 })
	testenv.WaitFor(t, 10*time.Second, "readiness green", func() bool { return r.Ready(context.Background()) == nil })
	for id, ev := range second {
		first[id] = ev
	}
	recs := e.consumeAll(t, e.commandsTopic(), e.eventsTopic(), e.prefix+"custom")
	for id, c := range verifyAtLeastOnce(t, first, recs) {
		if c != 1 {
			t.Errorf("event %s published %d times", id, c)
		}
	}
}

// TestProduceErrorRetried: a non-retriable produce error fails records;
// the relay produces them again and never passes them.
func TestProduceErrorRetried(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	if e.kafka.Cluster == nil {
		testskip.Skip(t, "fault injection needs kfake")
	}
	e.kafka.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.InvalidRecord, Count: 1})
	r, _ := runRelay(t, e, e.opts(t))
	stored := appendAll(t, e.store, 4, mixedEnvelopes(100, 10, e.prefix+"custom"))
	testenv.WaitFor(t, 30*time.Second, "all published", func() bool { return e.checkpoint(t).Position == 100 })
	if v := value(r.m.produceErrs); v < 1 {
		t.Errorf("sluice_relay_produce_errors_total %v, want the injected failure counted", v)
	}
	recs := e.consumeAll(t, e.commandsTopic(), e.eventsTopic(), e.prefix+"custom")
	verifyAtLeastOnce(t, stored, recs)
}

// TestCheckpointMovedBack: an operator moves the checkpoint back while the
// relay runs; the range is published again and nothing is lost.
func TestCheckpointMovedBack(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	r, _ := runRelay(t, e, e.opts(t))
	stored := appendAll(t, e.store, 4, mixedEnvelopes(300, 10, e.prefix+"custom"))
	testenv.WaitFor(t, 30*time.Second, "all published", func() bool { return e.checkpoint(t).Position == 300 })
	old, cur, err := SetCheckpoint(ctxT(t, 10*time.Second), NewCheckpointStore(e.bucket, "checkpoints/test.json"), 100)
	if err != nil {
		t.Fatal(err)
	}
	if old.Position != 300 || cur.Position != 100 || len(cur.RecentEventIDs) != 0 {
		t.Fatalf("set: old %d new %d recent %d", old.Position, cur.Position, len(cur.RecentEventIDs))
	}
	r.poke()
	testenv.WaitFor(t, 30*time.Second, "replay", func() bool { return sumVec(r.m.published) == 500 })
	testenv.WaitFor(t, 10*time.Second, "checkpoint back at the head", func() bool { return e.checkpoint(t).Position == 300 })
	seen := verifyAtLeastOnce(t, stored, e.consumeAll(t, e.commandsTopic(), e.eventsTopic(), e.prefix+"custom"))
	for id, c := range seen {
		want := 1
		if stored[id].Envelope.Position > 100 {
			want = 2
		}
		if c != want {
			t.Errorf("event at position %d published %d times, want %d", stored[id].Envelope.Position, c, want)
		}
	}
}

// TestStartPosition: a new checkpoint starts where configured; without
// configuration at the beginning.
func TestStartPosition(t *testing.T) {
	cases := []struct {
		name      string
		position  int64
		timestamp bool
		want      int
	}{
		{"beginning", 0, false, 30},
		{"position", 20, false, 10},
		{"timestamp", 0, true, 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 30*time.Second)
			appendAll(t, e.store, 1, mixedEnvelopes(20, 3, e.prefix+"custom"))
			time.Sleep(50 * time.Millisecond)
			mid := time.Now()
			time.Sleep(50 * time.Millisecond)
			appendAll(t, e.store, 1, mixedEnvelopes(10, 3, e.prefix+"custom"))
			opts := e.opts(t)
			opts.Config.StartPosition = c.position
			if c.timestamp {
				opts.Config.StartTimestamp = mid.UTC().Format(time.RFC3339Nano)
			}
			r, _ := runRelay(t, e, opts)
			testenv.WaitFor(t, 60*time.Second, "caught up", func() bool { return e.checkpoint(t).Position == 30 })
			if got := sumVec(r.m.published); got != float64(c.want) {
				t.Errorf("published %v, want %d", got, c.want)
			}
		})
	}
}

// TestIndexPlan: a relay close behind the head reads the committed segments
// by the index's keys without a LIST (the index plan), publishes them
// exactly once in order, and a wake-up with nothing new past the checkpoint
// lists nothing until a poll interval has passed; appends made while it
// runs (one writer: the window is always committed) go the same way.
func TestIndexPlan(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	custom := e.prefix + "custom"
	opts := e.opts(t)
	opts.Config.PollInterval = time.Hour // every listing after the first is the plan's choice
	first := appendAll(t, e.store, 4, mixedEnvelopes(60, 6, custom))
	r, stop := runRelay(t, e, opts)
	testenv.WaitFor(t, 20*time.Second, "first window published", func() bool { return e.checkpoint(t).Position == 60 })
	if v := value(r.m.plans.WithLabelValues("index")); v < 1 {
		t.Errorf("index plans %v, want ≥ 1 (60 committed positions, batch 200)", v)
	}
	// That first cycle also probed the in-flight reservations (none), so
	// no cycle lists or probes for a poll interval (an hour) from here on.
	lists := value(r.m.plans.WithLabelValues("list"))
	// Wake-ups with nothing committed past the checkpoint: no LIST.
	// Each wake-up is waited for by its idle cycle (the evidence that it
	// was planned, and planned without a LIST).
	for range 5 {
		idle := value(r.m.plans.WithLabelValues("idle"))
		r.poke()
		testenv.WaitFor(t, 20*time.Second, "an idle cycle for the wake-up", func() bool { return value(r.m.plans.WithLabelValues("idle")) > idle })
	}
	more := appendAll(t, e.store, 1, mixedEnvelopes(40, 4, custom))
	testenv.WaitFor(t, 20*time.Second, "second window published", func() bool { return e.checkpoint(t).Position == 100 })
	if v := value(r.m.plans.WithLabelValues("list")); v != lists {
		t.Errorf("%v LIST cycles after the catch-up, want none (index or idle plans only)", v-lists)
	}
	if v := value(r.m.plans.WithLabelValues("idle")); v < 1 {
		t.Errorf("idle plans %v, want ≥ 1", v)
	}
	stop()
	maps.Copy(first, more)
	recs := e.consumeAll(t, e.commandsTopic(), e.eventsTopic(), custom)
	for id, c := range verify(t, e, first, recs, custom) {
		if c != 1 {
			t.Errorf("event %s published %d times", id, c)
		}
	}
}

// TestIndexPlanInFlight: a window holding a position still in flight (a
// group committing after a later one) is planned from the index too, not
// listed: the other aggregates' events are published at once, the
// in-flight position's aggregate waits, the checkpoint stops before it.
func TestIndexPlanInFlight(t *testing.T) {
	e := newEnv(t, 30*time.Second) // the reservation stays young
	opts := e.opts(t)
	opts.Config.PollInterval = time.Hour // every listing after the first is the plan's choice
	r, stop := runRelay(t, e, opts)
	defer stop()
	// The first cycle probes (nothing committed yet: an idle plan), so the
	// last probe is less than a poll interval old from here on and the
	// in-flight window below is planned from the index alone.
	testenv.WaitFor(t, 20*time.Second, "the first cycle", func() bool { return value(r.m.plans.WithLabelValues("idle")) >= 1 })
	appendAll(t, e.store, 1, []envelope.Envelope{command("X", 0), command("Y", 0)})
	testenv.WaitFor(t, 20*time.Second, "first events", func() bool { return e.checkpoint(t).Position == 2 })
	lists, indexes := value(r.m.plans.WithLabelValues("list")), value(r.m.plans.WithLabelValues("index"))

	gapPos := reserveCrashed(t, e, command("X", 1))
	after := appendAll(t, e.store, 1, []envelope.Envelope{command("Y", 1), command("X", 2), command("Z", 1)})
	testenv.WaitFor(t, 10*time.Second, "unrelated aggregates published past the in-flight position", func() bool {
		return sumVec(r.m.published) == 4
	})
	for _, rec := range e.consumeAll(t, e.commandsTopic()) {
		if agg, _ := header(rec, "aggregate_id"); agg == "X" {
			if pos, _ := header(rec, "position"); pos != "1" {
				t.Errorf("X's event at position %s published while X's position %d is in flight", pos, gapPos)
			}
		}
	}
	if v := value(r.m.plans.WithLabelValues("list")); v != lists {
		t.Errorf("%v LIST cycles with an in-flight position in the window, want none", v-lists)
	}
	if v := value(r.m.plans.WithLabelValues("index")); v <= indexes {
		t.Errorf("no index plan for the window with an in-flight position")
	}
	if len(after) != 3 {
		t.Fatalf("%d appended", len(after))
	}
	// The in-flight position commits (its writer's segment exists; Repair
	// commits it and notifies): X's events follow in order, the
	// checkpoint passes everything.
	writeSegmentOf(t, e, gapPos)
	if _, err := e.store.Repair(ctxT(t, 10*time.Second), 0); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the checkpoint past the committed position", func() bool { return e.checkpoint(t).Position == gapPos+3 })
	var xs []string
	for _, rec := range e.consumeAll(t, e.commandsTopic()) {
		if agg, _ := header(rec, "aggregate_id"); agg == "X" {
			pos, _ := header(rec, "position")
			xs = append(xs, pos)
		}
	}
	if want := []string{"1", strconv.FormatInt(gapPos, 10), strconv.FormatInt(gapPos+2, 10)}; !slices.Equal(xs, want) {
		t.Errorf("X's events published at positions %v, want %v (each once, in order)", xs, want)
	}
}

// TestIndexPlanShortBacklog: a relay a few batches behind a committed head
// catches up from the index, one batch of positions per cycle, without a
// LIST (on the file backend a LIST walks every segment of the store, so a
// relay that fell behind got slower the further behind it was); a backlog
// longer than indexPlanBacklog batches is listed, for the LIST plan's
// look-ahead. Every event is published once, in order.
func TestIndexPlanShortBacklog(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events int
		lists  bool
	}{
		{"3.5 batches behind: index plans only", 35, false},
		{"more than indexPlanBacklog batches behind: listed", 10*indexPlanBacklog + 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 30*time.Second)
			custom := e.prefix + "custom"
			opts := e.opts(t)
			opts.Config.BatchSize, opts.Config.KafkaFlushBatchSize = 10, 10
			opts.Config.PollInterval = time.Hour // no LIST for the poll's sake
			stored := appendAll(t, e.store, 1, mixedEnvelopes(tc.events, 5, custom))
			r, stop := runRelay(t, e, opts)
			testenv.WaitFor(t, 30*time.Second, "caught up", func() bool { return e.checkpoint(t).Position == int64(tc.events) })
			lists, indexes := value(r.m.plans.WithLabelValues("list")), value(r.m.plans.WithLabelValues("index"))
			stop()
			if tc.lists && lists == 0 {
				t.Errorf("no LIST for a backlog of %d positions (batch 10)", tc.events)
			}
			if !tc.lists {
				// One LIST may follow the catch-up: the first of the relay's
				// life, once nothing is committed past the checkpoint
				// (TestIndexPlan); the backlog itself lists nothing.
				if lists > 1 {
					t.Errorf("%v LIST cycles for a backlog of %d positions, want at most the one after catching up (index plans, batch 10)", lists, tc.events)
				}
				if want := float64(tc.events / 10); indexes < want {
					t.Errorf("%v index plans, want ≥ %v (one batch of positions per cycle)", indexes, want)
				}
			}
			recs := e.consumeAll(t, e.commandsTopic(), e.eventsTopic(), custom)
			for id, c := range verify(t, e, stored, recs, custom) {
				if c != 1 {
					t.Errorf("event %s published %d times", id, c)
				}
			}
		})
	}
}

// TestUncommittedSegmentListed: while positions are in flight the relay
// still looks for their segments once per poll interval (the probe of
// planFromIndex, by key), so a segment whose writer died between PUT and
// commit is published then, not after the append timeout.
func TestUncommittedSegmentListed(t *testing.T) {
	// The append timeout is an hour: the reservation stays young for the
	// whole test, so the event can only get out by a probe that reads the
	// uncommitted segment — never by what happens after the timeout (the
	// repair, or the LIST that the index plan falls back to for a
	// reservation past it).
	e := newEnv(t, time.Hour)
	opts := e.opts(t)
	opts.Config.PollInterval = 300 * time.Millisecond
	r, stop := runRelay(t, e, opts)
	defer stop()
	appendAll(t, e.store, 1, []envelope.Envelope{command("X", 0)})
	testenv.WaitFor(t, 20*time.Second, "first event", func() bool { return e.checkpoint(t).Position == 1 })
	gapPos := reserveCrashed(t, e, command("W", 1))
	writeSegmentOf(t, e, gapPos) // PUT done, commit never came
	appendAll(t, e.store, 1, []envelope.Envelope{command("Y", 1)})
	// A hang guard, not a timed assertion: a relay that lists only after
	// the append timeout (an hour) never publishes it.
	testenv.WaitFor(t, 60*time.Second, "the uncommitted segment's event published while its reservation is young", func() bool { return sumVec(r.m.published) == 3 })
	// Published from the listed segment, not by the repair that runs once
	// the reservation is older than the append timeout: no gap was
	// resolved by the timeout (repaired or abandoned).
	for _, how := range []string{"repaired_committed", "abandoned"} {
		if v := value(r.m.gaps.WithLabelValues(how)); v != 0 {
			t.Errorf("gap resolutions %q = %v before the append timeout, want 0: the event waited for the timeout instead of being read from its listed segment", how, v)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "checkpoint past it", func() bool { return e.checkpoint(t).Position == gapPos+1 })
}

// writeSegmentOf writes the one-envelope segment that the reservation at
// pos (made by reserveCrashed) expects, as its writer would have.
func writeSegmentOf(t *testing.T, e *env, pos int64) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	rows, err := e.store.Index(ctx, eventstore.IndexQuery{FromPosition: pos, ToPosition: pos, Limit: 1})
	if err != nil || len(rows) != 1 {
		t.Fatalf("index row %d: %v %v", pos, rows, err)
	}
	env := envelope.Envelope{
		EventID: rows[0].EventID, EventType: "DO_SOMETHING", Kind: envelope.KindCommand,
		AggregateType: rows[0].AggregateType, AggregateID: rows[0].AggregateID, Data: json.RawMessage(`{"n":1}`),
		OccurredAt:     envelope.NewTimestamp(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)),
		SequenceNumber: rows[0].SequenceNumber, Position: pos,
	}
	p, err := envelope.Prepare(env, envelope.DefaultLimits(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	line, err := envelope.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.bucket.Create(ctx, rows[0].SegmentKey, append(line, '\n')); err != nil {
		t.Fatal(err)
	}
}

// TestCommitHints: commit notifications that continue the checkpoint are
// published from the hinted segments without the head and index queries
// (hint cycles), with the same guarantees: every event once, in order per
// aggregate, the checkpoint at the head. Appends come one group at a time
// from a few writers, as at a steady low rate.
func TestCommitHints(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	opts := e.opts(t)
	opts.Config.PollInterval = time.Minute // full cycles only when a hint cannot serve
	r, stop := runRelay(t, e, opts)
	defer stop()
	testenv.WaitFor(t, 20*time.Second, "relay leader", func() bool { return r.Leader() })
	stored := map[string]eventstore.Event{}
	envs := mixedEnvelopes(300, 7, "")
	for i := 0; i < len(envs); i += 3 {
		maps.Copy(stored, appendAll(t, e.store, 3, envs[i:min(i+3, len(envs))]))
		time.Sleep(2 * time.Millisecond)
	}
	testenv.WaitFor(t, 30*time.Second, "checkpoint at the head", func() bool { return e.checkpoint(t).Position == int64(len(envs)) })
	stop()
	recs := e.consumeAll(t, e.commandsTopic(), e.eventsTopic())
	for id, c := range verify(t, e, stored, recs, "") {
		if c != 1 {
			t.Errorf("event %s published %d times", id, c)
		}
	}
	if len(recs) != len(envs) {
		t.Errorf("%d records for %d events", len(recs), len(envs))
	}
	if v := value(r.m.plans.WithLabelValues("hint")); v == 0 {
		t.Error("no cycle was planned from commit hints")
	} else {
		t.Logf("cycles: hint %v, index %v, list %v, idle %v", v, value(r.m.plans.WithLabelValues("index")),
			value(r.m.plans.WithLabelValues("list")), value(r.m.plans.WithLabelValues("idle")))
	}
}

// TestBogusCommitHints: a notification naming a block whose segment does
// not exist, or naming more or fewer positions than its segment holds,
// costs a GET and changes nothing: the cycle plans as usual, every event is
// published once and no cycle fails.
func TestBogusCommitHints(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	opts := e.opts(t)
	opts.Config.PollInterval = time.Minute
	var logs testenv.Buffer
	opts.Deps.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, stop := runRelay(t, e, opts)
	defer stop()
	testenv.WaitFor(t, 20*time.Second, "relay leader", func() bool { return r.Leader() })
	notify := func(payload string) {
		t.Helper()
		if _, err := e.pool.Exec(ctxT(t, 5*time.Second), `SELECT pg_notify($1, $2)`, eventstore.NotifyChannel, payload); err != nil {
			t.Fatal(err)
		}
	}
	// Before the block exists: positions 1..2 are not written yet.
	notify("committed 3 x")
	// Evidence, not a pause: a cycle tried the hint before the block
	// exists. The hint is sent again until then (the relay may not listen
	// yet when it leads).
	testenv.WaitForEvery(t, 20*time.Second, 250*time.Millisecond, "the hint of 1..2 tried", func() bool {
		if logs.Count("hinted segment not readable") >= 1 {
			return true
		}
		notify("committed 1 2")
		return false
	})
	tried := logs.Count("hinted segment not readable")
	stored := appendAll(t, e.store, 1, []envelope.Envelope{command("A", 0), command("B", 0)})
	testenv.WaitFor(t, 20*time.Second, "first events", func() bool { return e.checkpoint(t).Position == int64(len(stored)) })
	// A hint wider than the segment that follows (3..5 when 3..3 is written).
	notify("committed 3 5")
	testenv.WaitFor(t, 20*time.Second, "the hint of 3..5 tried", func() bool { return logs.Count("hinted segment not readable") > tried })
	maps.Copy(stored, appendAll(t, e.store, 1, []envelope.Envelope{command("A", 1)}))
	maps.Copy(stored, appendAll(t, e.store, 1, []envelope.Envelope{command("B", 1)}))
	testenv.WaitFor(t, 20*time.Second, "all events", func() bool { return e.checkpoint(t).Position == int64(len(stored)) })
	stop()
	recs := e.consumeAll(t, e.commandsTopic(), e.eventsTopic())
	for id, c := range verify(t, e, stored, recs, "") {
		if c != 1 {
			t.Errorf("event %s published %d times", id, c)
		}
	}
	if len(recs) != len(stored) {
		t.Errorf("%d records for %d events", len(recs), len(stored))
	}
	out := logs.String()
	if strings.Contains(out, "cycle failed") {
		t.Errorf("a cycle failed on a bogus hint:\n%s", out)
	}
	if !strings.Contains(out, "hinted segment not readable") {
		t.Errorf("no hinted segment was found unreadable (the hints were not tried):\n%s", out)
	}
}

// TestHeldBehindInFlight: X's event at 3 waits behind X's in-flight
// position 2 and follows at once — not a poll interval later (here a
// minute) — when 2 commits. Two ways in:
//   - the relay starts after 3 committed, so 3 has no hint: the hint cycle
//     that publishes 2 must be followed at once by a full cycle (it waited
//     for the poll before);
//   - the relay leads when 2 is reserved and 3 commits: 3's hint does not
//     continue the checkpoint and must not publish X past 2.
func TestHeldBehindInFlight(t *testing.T) {
	for _, leading := range []bool{false, true} {
		t.Run(fmt.Sprintf("relay leading=%v", leading), func(t *testing.T) {
			e := newEnv(t, 30*time.Second)
			opts := e.opts(t)
			opts.Config.PollInterval = time.Minute
			var r *Relay
			start := func() {
				var stop func()
				r, stop = runRelay(t, e, opts)
				t.Cleanup(stop)
				testenv.WaitFor(t, 20*time.Second, "relay leader", func() bool { return r.Leader() })
			}
			if leading {
				start()
			}
			appendAll(t, e.store, 1, []envelope.Envelope{command("X", 0)}) // 1
			if leading {
				testenv.WaitFor(t, 20*time.Second, "first event", func() bool { return sumVec(r.m.published) == 1 })
			}
			gap := reserveCrashed(t, e, command("X", 1))                   // 2, in flight
			appendAll(t, e.store, 1, []envelope.Envelope{command("X", 2)}) // 3, held behind 2
			if !leading {
				start()
				testenv.WaitFor(t, 20*time.Second, "first event", func() bool { return sumVec(r.m.published) == 1 })
			}
			// Evidence instead of a pause: a cycle saw X's event at 3 and
			// held it behind 2.
			testenv.WaitFor(t, 20*time.Second, "X's event held behind its position in flight", func() bool { return value(r.m.held) >= 1 })
			if n := sumVec(r.m.published); n != 1 {
				t.Fatalf("%v published while X's position %d is in flight", n, gap)
			}
			writeSegmentOf(t, e, gap)
			if _, err := e.store.Repair(ctxT(t, 10*time.Second), 0); err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, 10*time.Second, "the held event after its gap committed", func() bool { return sumVec(r.m.published) == 3 })
			testenv.WaitFor(t, 10*time.Second, "checkpoint 3", func() bool { return e.checkpoint(t).Position == 3 })
		})
	}
}

// TestHintsPruned: hints the checkpoint passed are dropped after any cycle
// (not only after a hint cycle), so they never fill the map and turn fresh
// hints away; a hint at or below the checkpoint (a repair's or revival's
// notification) is not taken; a hint replaces a failed one at the same
// first position.
func TestHintsPruned(t *testing.T) {
	r := &Relay{gets: make(chan struct{})} // no free GET slot: no store access
	end := r.hints.lead(context.Background())
	defer end()
	for p := int64(1); p <= maxHints; p++ {
		r.addHint(p, p)
	}
	r.addHint(maxHints+1, maxHints+1)
	if r.hints.byFirst[maxHints+1] != nil {
		t.Fatalf("hint %d taken beyond the bound of %d", maxHints+1, maxHints)
	}
	// A full cycle (planFromIndex) takes the hinted fetches and the
	// checkpoint passes them; the cycle ends with a prune.
	for p := int64(1); p <= maxHints; p++ {
		_ = r.hints.fetchFor(r.hints.byFirst[p].f.seg)
	}
	r.hints.prune(maxHints)
	if n := len(r.hints.byFirst); n != 0 {
		t.Fatalf("%d hints held after the checkpoint passed them all", n)
	}
	r.addHint(maxHints+1, maxHints+1)
	if r.hints.byFirst[maxHints+1] == nil {
		t.Fatal("fresh hint dropped after the prune")
	}
	r.addHint(3, 3)
	if r.hints.byFirst[3] != nil {
		t.Error("a hint below the checkpoint was taken")
	}
	// A failed GET at first 20 gives way to a new notification there.
	r.addHint(20, 21)
	old := r.hints.byFirst[20].f
	old.err = errors.New("gone")
	close(old.done)
	r.addHint(20, 22)
	if x := r.hints.byFirst[20]; x == nil || x.last != 22 {
		t.Errorf("hint after a failed one at the same position: %+v", x)
	}
}
