package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/testskip"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/kafka"
)

// newEnvWithKafka is newEnv on a kfake cluster started with opts (broker
// configs, seed topics). It skips when an external broker is configured.
func newEnvWithKafka(t *testing.T, opts ...kfake.Opt) *env {
	t.Helper()
	e := newEnv(t, 30*time.Second)
	if e.kafka.Cluster == nil {
		testskip.Skip(t, "needs kfake (SLUICE_TEST_KAFKA_BROKERS is set)")
	}
	e.kafka = testenv.NewKafka(t, opts...)
	return e
}

// bigCommand is a command whose stored line is about size bytes of
// incompressible data (the producer compresses batches).
func bigCommand(aggID string, size int) envelope.Envelope {
	e := command(aggID, 0)
	b := make([]byte, size/2)
	_, _ = rand.Read(b)
	e.Data = json.RawMessage(`{"blob":"` + hex.EncodeToString(b) + `"}`)
	return e
}

// appendOne appends one envelope and returns the stored event.
func appendOne(t *testing.T, st *eventstore.Store, env envelope.Envelope) eventstore.Event {
	t.Helper()
	res, err := st.AppendOne(ctxT(t, time.Minute), env)
	if err != nil {
		t.Fatal(err)
	}
	return res.Event
}

// TestUnproducibleRecordParked: a record Kafka refuses for a reason of its
// own is parked after the bounded attempts, with its reason, and the relay
// moves on: the records after it (other aggregates and its own) are
// published and the checkpoint reaches the head. On the code before
// parking, each case retried forever and the checkpoint stayed before the
// record.
func TestUnproducibleRecordParked(t *testing.T) {
	cases := []struct {
		name   string
		kafka  func(prefix string) []kfake.Opt
		faults func(e *env)
		bad    func(e *env) envelope.Envelope
		reason string
	}{{
		name: "larger than the broker's limit",
		kafka: func(prefix string) []kfake.Opt {
			// A topic created by someone else keeps the broker's limit.
			return []kfake.Opt{kfake.BrokerConfigs(map[string]string{"message.max.bytes": "300000"}), kfake.SeedTopics(4, prefix+"small")}
		},
		bad: func(e *env) envelope.Envelope {
			b := bigCommand("big", 400_000)
			b.Metadata.SetString(envelope.MetaKafkaTopic, e.prefix+"small")
			return b
		},
		reason: ReasonTooLarge,
	}, {
		name: "topic the broker refuses",
		faults: func(e *env) {
			e.kafka.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Topic: e.prefix + "refused", Err: kerr.InvalidTopicException, Count: -1})
		},
		bad: func(e *env) envelope.Envelope {
			b := command("refused-agg", 0)
			b.Metadata.SetString(envelope.MetaKafkaTopic, e.prefix+"refused")
			return b
		},
		reason: ReasonInvalidTopic,
	}, {
		name: "topic colliding by '.' and '_'",
		kafka: func(prefix string) []kfake.Opt {
			return []kfake.Opt{kfake.SeedTopics(4, prefix+"orders_v1")}
		},
		bad: func(e *env) envelope.Envelope {
			b := command("collide-agg", 0)
			b.Metadata.SetString(envelope.MetaKafkaTopic, e.prefix+"orders.v1")
			return b
		},
		reason: ReasonTopicCollision,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := testenv.UniqueName("p") + "."
			var kopts []kfake.Opt
			if tc.kafka != nil {
				kopts = tc.kafka(prefix)
			}
			e := newEnvWithKafka(t, kopts...)
			e.prefix = prefix
			if tc.faults != nil {
				tc.faults(e)
			}
			opts := e.opts(t)
			opts.Config.ParkAfterAttempts = 3
			r, _ := runRelay(t, e, opts)

			before := appendAll(t, e.store, 4, mixedEnvelopes(30, 5, ""))
			bad := appendOne(t, e.store, tc.bad(e))
			// The same aggregate as a record before it, and others.
			after := appendAll(t, e.store, 4, mixedEnvelopes(30, 5, ""))
			head := bad.Envelope.Position + 30
			testenv.WaitFor(t, time.Minute, "checkpoint to pass the unproducible record", func() bool {
				return e.checkpoint(t).Position == head
			})

			rows, err := NewParkedStore(e.pool).List(ctxT(t, 10*time.Second), ParkedFilter{Relay: "test"})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 {
				t.Fatalf("%d parked rows, want 1: %+v", len(rows), rows)
			}
			p := rows[0]
			if p.Position != bad.Envelope.Position || p.EventID != bad.Envelope.EventID || p.Reason != tc.reason ||
				p.State != ParkedStateParked || p.Attempts < 3 || p.Topic != bad.Envelope.Metadata.KafkaTopic() || p.EnvelopeBytes != len(bad.Raw) {
				t.Errorf("parked row %+v; want position %d, event %s, reason %s, state parked, >= 3 attempts, %d envelope bytes",
					p, bad.Envelope.Position, bad.Envelope.EventID, tc.reason, len(bad.Raw))
			}
			full, err := NewParkedStore(e.pool).Get(ctxT(t, 10*time.Second), "test", p.Position)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(full.Envelope, bad.Raw) || !bytes.Equal(full.Key, envelope.KafkaKey(bad.Envelope)) {
				t.Errorf("parked record does not hold the stored line and key")
			}
			if v := value(r.m.parkedTotal.WithLabelValues(tc.reason)); v != 1 {
				t.Errorf("sluice_relay_parked_total{reason=%q} = %v, want 1", tc.reason, v)
			}
			if v := value(r.m.parked); v != 1 {
				t.Errorf("sluice_relay_parked_records = %v, want 1", v)
			}
			testenv.WaitFor(t, 10*time.Second, "readiness green after parking", func() bool { return r.Ready(context.Background()) == nil })

			for id, ev := range after {
				before[id] = ev
			}
			recs := e.consumeAll(t, e.commandsTopic(), e.eventsTopic())
			for id, c := range verifyAtLeastOnce(t, before, recs) {
				if c != 1 {
					t.Errorf("event %s published %d times", id, c)
				}
			}
			for _, rec := range recs {
				if id, _ := header(rec, "event_id"); id == bad.Envelope.EventID {
					t.Errorf("parked event %s was published to %s", id, rec.Topic)
				}
			}
		})
	}
}

// TestEnvelopeAboveDefaultBatchSizePublished: an envelope larger than
// franz-go's default batch limit (1,000,012 bytes) but within
// EVENT_STORE_MAX_ENVELOPE_BYTES (1 MiB) is published: the producer and the
// topics share the size budget derived from the envelope limit. Before the
// budget, the producer refused it with MESSAGE_TOO_LARGE forever.
func TestEnvelopeAboveDefaultBatchSizePublished(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	r, _ := runRelay(t, e, e.opts(t))
	big := appendOne(t, e.store, bigCommand("big", 1_010_000))
	if len(big.Raw) <= 1_000_012 {
		t.Fatalf("stored line of %d bytes is not above the default batch limit", len(big.Raw))
	}
	rest := appendAll(t, e.store, 4, mixedEnvelopes(20, 5, ""))
	head := big.Envelope.Position + 20
	testenv.WaitFor(t, time.Minute, "checkpoint to pass the large record", func() bool { return e.checkpoint(t).Position >= head })
	rest[big.Envelope.EventID] = big
	verifyAtLeastOnce(t, rest, e.consumeAll(t, e.commandsTopic(), e.eventsTopic()))
	if v := sumVec(r.m.parkedTotal); v != 0 {
		t.Errorf("sluice_relay_parked_total = %v, want nothing parked", v)
	}
}

// TestParkedPositionNotRepublished: a position parked by a relay that
// crashed before its checkpoint passed it is neither produced nor parked
// again by the next leader (parking is idempotent by position), and the
// checkpoint passes it.
func TestParkedPositionNotRepublished(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	stored := appendAll(t, e.store, 1, mixedEnvelopes(20, 5, ""))
	var victim eventstore.Event
	for _, ev := range stored {
		if ev.Envelope.Position == 7 {
			victim = ev
		}
	}
	ps := NewParkedStore(e.pool)
	rec := NewRouter(e.commandsTopic(), e.eventsTopic(), nil).Record(victim, "")
	p := ParkedRecord{Relay: "test", Position: 7, EventID: victim.Envelope.EventID, Topic: rec.Topic, Key: rec.Key, Headers: rec.Headers,
		Envelope: rec.Value, Reason: ReasonTooLarge, Error: "MESSAGE_TOO_LARGE", Attempts: 3}
	for i, want := range []bool{true, false} {
		ins, err := ps.Park(ctxT(t, 10*time.Second), p)
		if err != nil || ins != want {
			t.Fatalf("park #%d: inserted %v, err %v; want %v", i+1, ins, err, want)
		}
	}
	r, _ := runRelay(t, e, e.opts(t))
	testenv.WaitFor(t, 30*time.Second, "checkpoint to pass the parked position", func() bool { return e.checkpoint(t).Position == 20 })
	delete(stored, victim.Envelope.EventID)
	recs := e.consumeAll(t, e.commandsTopic(), e.eventsTopic())
	verifyAtLeastOnce(t, stored, recs)
	for _, rec := range recs {
		if id, _ := header(rec, "event_id"); id == victim.Envelope.EventID {
			t.Fatalf("parked position 7 was produced again")
		}
	}
	if v := sumVec(r.m.parkedTotal); v != 0 {
		t.Errorf("sluice_relay_parked_total = %v: the position was parked again", v)
	}
	if n, err := ps.Count(ctxT(t, 10*time.Second), "test"); err != nil || n != 1 {
		t.Errorf("parked rows %d (err %v), want 1", n, err)
	}
}

// TestRepublishAndDropParked: the Go API behind `sluice relay parked`.
// Republishing a record that still cannot be produced is refused with
// Kafka's error and leaves it parked; with a topic that takes it, the exact
// bytes are produced and the row is marked republished; drop marks
// dropped; a dry run changes nothing; a resolved row is refused.
func TestRepublishAndDropParked(t *testing.T) {
	prefix := testenv.UniqueName("p") + "."
	e := newEnvWithKafka(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "300000"}), kfake.SeedTopics(4, prefix+"small"))
	e.prefix = prefix
	opts := e.opts(t)
	runRelay(t, e, opts)
	var bad []eventstore.Event
	for i := range 2 {
		b := bigCommand("big-"+strconv.Itoa(i), 400_000)
		b.Metadata.SetString(envelope.MetaKafkaTopic, prefix+"small")
		bad = append(bad, appendOne(t, e.store, b))
	}
	testenv.WaitFor(t, time.Minute, "both parked", func() bool { return e.checkpoint(t).Position == 2 })

	ctx := ctxT(t, time.Minute)
	ps := NewParkedStore(e.pool)
	cl, err := kafka.NewClient(kafka.Config{Brokers: e.kafka.Brokers, MaxMessageBytes: opts.Deps.Kafka.MaxMessageBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	spec := kafka.Spec{Partitions: 4, Replication: 1, MaxMessageBytes: kafka.MessageBudget(envelope.DefaultLimits().MaxEnvelopeBytes, envelope.DefaultLimits().MaxMetadataBytes)}

	// Still refused by its topic: an error, the row stays parked.
	_, err = RepublishParked(ctx, ps, cl, "test", 1, ResolveOptions{Spec: spec})
	if !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("republish to the small topic: %v, want MESSAGE_TOO_LARGE", err)
	}
	// Dry runs change nothing.
	if _, err := RepublishParked(ctx, ps, cl, "test", 1, ResolveOptions{Topic: prefix + "large", Spec: spec, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := DropParked(ctx, ps, "test", 2, ResolveOptions{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	for _, pos := range []int64{1, 2} {
		if p, err := ps.Get(ctx, "test", pos); err != nil || p.State != ParkedStateParked {
			t.Fatalf("position %d after a refused republish and dry runs: state %q, err %v", pos, p.State, err)
		}
	}
	// A topic created with the budget takes it.
	if _, err := RepublishParked(ctx, ps, cl, "test", 1, ResolveOptions{Topic: prefix + "large", Spec: spec}); err != nil {
		t.Fatal(err)
	}
	if _, err := DropParked(ctx, ps, "test", 2, ResolveOptions{}); err != nil {
		t.Fatal(err)
	}
	p1, _ := ps.Get(ctx, "test", 1)
	p2, _ := ps.Get(ctx, "test", 2)
	if p1.State != ParkedStateRepublished || p1.ResolvedTopic != prefix+"large" || p1.ResolvedAt.IsZero() || p2.State != ParkedStateDropped {
		t.Errorf("after republish and drop: %s/%s at %v, %s", p1.State, p1.ResolvedTopic, p1.ResolvedAt, p2.State)
	}
	recs := e.consumeAll(t, prefix+"large")
	if len(recs) != 1 || !bytes.Equal(recs[0].Value, bad[0].Raw) || !bytes.Equal(recs[0].Key, envelope.KafkaKey(bad[0].Envelope)) {
		t.Fatalf("republished %d records; want the parked record byte for byte", len(recs))
	}
	if id, _ := header(recs[0], "event_id"); id != bad[0].Envelope.EventID {
		t.Errorf("republished record carries event_id %q, want %q", id, bad[0].Envelope.EventID)
	}
	for _, pos := range []int64{1, 2} {
		if _, err := DropParked(ctx, ps, "test", pos, ResolveOptions{}); !errors.Is(err, ErrNotParked) {
			t.Errorf("drop of resolved position %d: %v, want ErrNotParked", pos, err)
		}
	}
	if _, err := DropParked(ctx, ps, "test", 99, ResolveOptions{}); !errors.Is(err, ErrParkedNotFound) {
		t.Errorf("drop of position 99: %v, want ErrParkedNotFound", err)
	}
	if n, err := ps.Count(ctx, "test"); err != nil || n != 0 {
		t.Errorf("parked count %d (err %v), want 0", n, err)
	}
}

// TestCrashAfterPark: a relay process that crashes after a record's park
// row is written but before its checkpoint passes the position loses
// nothing and parks nothing twice: the next leader passes the position
// with the one row unchanged, publishes everything else, and never
// produces the parked record.
func TestCrashAfterPark(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	if e.kafka.Cluster == nil {
		testskip.Skip(t, "needs kfake fault injection")
	}
	refused := e.prefix + "refused"
	e.kafka.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Topic: refused, Err: kerr.InvalidTopicException, Count: -1})
	stored := appendAll(t, e.store, 1, mixedEnvelopes(10, 3, ""))
	b := command("refused-agg", 0)
	b.Metadata.SetString(envelope.MetaKafkaTopic, refused)
	bad := appendOne(t, e.store, b)
	for id, ev := range appendAll(t, e.store, 1, mixedEnvelopes(10, 3, "")) {
		stored[id] = ev
	}
	extra := []string{"SLUICE_CRASH_POINT=relay:after_park", "SLUICE_CRASH_MARKER_DIR=" + t.TempDir(), "EVENT_PUBLISHER_PARK_AFTER_ATTEMPTS=2"}
	if code := e.startHelper(t, "first", extra...).wait(t, time.Minute); code != 42 {
		t.Fatalf("relay exited with %d, want the crash code 42 after the park", code)
	}
	ps := NewParkedStore(e.pool)
	ctx := ctxT(t, time.Minute)
	first, err := ps.Get(ctx, "test", bad.Envelope.Position)
	if err != nil {
		t.Fatalf("no parked row after the crash: %v", err)
	}
	if cp := e.checkpoint(t); cp.Position >= bad.Envelope.Position {
		t.Fatalf("checkpoint %d passed the parked position %d before the crash point", cp.Position, bad.Envelope.Position)
	}
	p2 := e.startHelper(t, "second", extra...)
	testenv.WaitFor(t, time.Minute, "the restarted relay to pass the parked position", func() bool { return e.checkpoint(t).Position == 21 })
	if code := p2.stop(t); code != 0 {
		t.Fatalf("restarted relay exited with %d", code)
	}
	rows, err := ps.List(ctx, ParkedFilter{Relay: "test", State: ""})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].State != ParkedStateParked || !rows[0].ParkedAt.Equal(first.ParkedAt) || rows[0].Attempts != first.Attempts {
		t.Fatalf("parked rows after the restart: %+v; want the one row of the first process unchanged (%+v)", rows, first)
	}
	recs := e.consumeAll(t, e.commandsTopic(), e.eventsTopic())
	verifyAtLeastOnce(t, stored, recs)
	for _, rec := range recs {
		if id, _ := header(rec, "event_id"); id == bad.Envelope.EventID {
			t.Fatalf("the parked record was produced")
		}
	}
}

// TestRefusedBatchNeighboursNotParked: when the broker refuses a whole
// produce request with MESSAGE_TOO_LARGE (a partition batch over its
// limit), every record of it fails, though only one may be too large. Each
// is retried alone before it can be parked, even with
// EVENT_PUBLISHER_PARK_AFTER_ATTEMPTS=1, so records that fit are published
// and none is parked.
func TestRefusedBatchNeighboursNotParked(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	if e.kafka.Cluster == nil {
		testskip.Skip(t, "needs kfake fault injection")
	}
	opts := e.opts(t)
	opts.Config.ParkAfterAttempts = 1
	r, _ := runRelay(t, e, opts)
	first := appendAll(t, e.store, 4, mixedEnvelopes(10, 5, ""))
	testenv.WaitFor(t, 30*time.Second, "first events", func() bool { return e.checkpoint(t).Position == 10 })
	e.kafka.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.commandsTopic(), Err: kerr.MessageTooLarge, Count: 1})
	for id, ev := range appendAll(t, e.store, 4, mixedEnvelopes(50, 5, "")) {
		first[id] = ev
	}
	testenv.WaitFor(t, 30*time.Second, "all published", func() bool { return e.checkpoint(t).Position == 60 })
	if v := value(r.m.produceErrs); v < 1 {
		t.Fatalf("sluice_relay_produce_errors_total = %v: the injected refusal did not happen", v)
	}
	if v := sumVec(r.m.parkedTotal); v != 0 {
		t.Errorf("sluice_relay_parked_total = %v: a record refused only with its batch was parked", v)
	}
	if n, err := NewParkedStore(e.pool).Count(ctxT(t, 10*time.Second), "test"); err != nil || n != 0 {
		t.Errorf("%d parked rows (err %v), want none", n, err)
	}
	verifyAtLeastOnce(t, first, e.consumeAll(t, e.commandsTopic(), e.eventsTopic()))
}
