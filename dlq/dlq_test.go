package dlq_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/dlq"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/worker"
)

// fixture is a kfake cluster, an original topic and its DLQ topic, and a
// real Postgres registry.
type fixture struct {
	k           *testenv.Kafka
	cl          *kgo.Client
	reg         *registry.Registry
	orig, topic string
}

const handler = "instanceworker"

func newFixture(t *testing.T) *fixture {
	t.Helper()
	_, pool := testenv.NewMigratedDatabase(t)
	reg, err := registry.New(registry.Config{Owner: "test"}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	k := testenv.NewKafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	f := &fixture{k: k, cl: cl, reg: reg, orig: testenv.UniqueName("cmds.")}
	f.topic = f.orig + ".dlq"
	adm := kadm.NewClient(cl)
	for _, tp := range []string{f.orig, f.topic} {
		if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, tp); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) queue(t *testing.T) *dlq.Queue {
	t.Helper()
	q, err := dlq.New(dlq.Config{Topic: f.topic, Kafka: kafka.Config{Brokers: f.k.Brokers}, ReplicationFactor: 1, By: "tester"}, dlq.Deps{Registry: f.reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return q
}

func (f *fixture) produce(t *testing.T, rs ...*kgo.Record) {
	t.Helper()
	if err := f.cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// dead makes the registry row of eventID dead for the handler.
func (f *fixture) dead(t *testing.T, eventID string) {
	t.Helper()
	ctx := context.Background()
	res, err := f.reg.Claim(ctx, claim.Request{Handler: handler, EventID: eventID, AggregateID: "shop:orders:" + eventID[:8], Seq: 1, Policy: claim.SkipStale})
	if err != nil || res.Kind != claim.Claimed {
		t.Fatalf("claim: %v %v", res.Kind, err)
	}
	if _, err := f.reg.MarkFailed(ctx, res.Lease, claim.Failure{Err: errors.New("permanent: boom")}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) status(t *testing.T, eventID string) claim.Status {
	t.Helper()
	rows, err := f.reg.Get(context.Background(), eventID)
	if err != nil || len(rows) != 1 {
		t.Fatalf("registry %s: %v %v", eventID, rows, err)
	}
	return rows[0].Status
}

// letter is the dead letter of orig as the worker runtime writes it.
func (f *fixture) letter(orig *kgo.Record) *kgo.Record {
	now := time.Now()
	r, err := worker.DeadLetterRecord(f.topic, handler, orig, "permanent", "permanent: boom", 1, now, now)
	if err != nil {
		panic(err)
	}
	return r
}

// original produces an original command record and returns it with its offset.
func (f *fixture) original(t *testing.T, id string, value []byte) *kgo.Record {
	t.Helper()
	if value == nil {
		value = []byte(`{"event_id":"` + id + `","kind":"command"}`)
	}
	r := &kgo.Record{Topic: f.orig, Key: []byte("Instance:shop:orders:" + id[:8]), Value: value,
		Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(id)}, {Key: "bin", Value: []byte{0xff, 0x00}}}}
	f.produce(t, r)
	return r
}

// The operations through the Go API the CLI and the admin API share: list
// with states, show with the decoded original, a dry run that changes
// nothing, a redrive that resets the row and re-produces the original byte
// for byte exactly once, duplicates and dropped letters skipped, a missing
// letter reported as ErrNoLetter.
func TestQueueListShowRedriveDrop(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	ids := []string{uuid.NewString(), uuid.NewString()}
	origs := []*kgo.Record{f.original(t, ids[0], nil), f.original(t, ids[1], []byte{0xde, 0xad, '{'})}
	f.dead(t, ids[0])
	f.dead(t, ids[1])
	// Letters 0:0 (of original 0), 0:1 (its duplicate), 0:2 (of original 1).
	f.produce(t, f.letter(origs[0]), f.letter(origs[0]), f.letter(origs[1]))
	q := f.queue(t)

	res, err := q.List(ctx, dlq.ListOptions{})
	if err != nil || res.Total != 3 || len(res.Letters) != 3 || res.Letters[0].State != dlq.StateNew {
		t.Fatalf("list: %+v %v", res, err)
	}
	if res, err = q.List(ctx, dlq.ListOptions{Limit: 1}); err != nil || len(res.Letters) != 1 || res.More != 2 {
		t.Fatalf("list --limit 1: %+v %v", res, err)
	}
	sh, err := q.Show(ctx, dlq.Ref{Partition: -1, Offset: 2})
	if err != nil || sh.OriginalErr != nil || !bytes.Equal(sh.Original.Value, origs[1].Value) || sh.Letter.EventID() != ids[1] {
		t.Fatalf("show 0:2: %+v %v", sh, err)
	}
	if _, err := q.Show(ctx, dlq.Ref{Partition: 0, Offset: 9}); !errors.Is(err, dlq.ErrNoLetter) {
		t.Fatalf("show of a missing letter: %v, want ErrNoLetter", err)
	}

	// Dry run: one letter would be produced, nothing changes.
	dry, err := q.Redrive(ctx, dlq.RedriveOptions{Ref: &dlq.Ref{Partition: 0, Offset: 0}, DryRun: true})
	if err != nil || dry.Redriven != 1 || dry.Items[0].Outcome != dlq.OutcomeWould || !strings.Contains(dry.Items[0].Detail, "registry row dead") {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	if st := f.status(t, ids[0]); st != claim.StatusDead {
		t.Fatalf("row after the dry run: %s, want dead", st)
	}
	if n := len(testenv.ReadTopic(t, f.k.Brokers, f.orig)); n != 2 {
		t.Fatalf("dry run produced: %d records in %s, want 2", n, f.orig)
	}

	// Redrive all: 0:0 produced, 0:1 a duplicate, 0:2 produced.
	rr, err := q.Redrive(ctx, dlq.RedriveOptions{All: true})
	if err != nil || rr.Redriven != 2 || rr.Skipped != 1 || rr.Failed != 0 || rr.Items[1].Outcome != dlq.OutcomeSkipped {
		t.Fatalf("redrive --all: %+v %v", rr, err)
	}
	recs := testenv.ReadTopic(t, f.k.Brokers, f.orig)
	if len(recs) != 4 || !bytes.Equal(recs[2].Value, origs[0].Value) || !bytes.Equal(recs[3].Value, origs[1].Value) ||
		!bytes.Equal(recs[2].Key, origs[0].Key) || len(recs[2].Headers) != 2 || !bytes.Equal(recs[2].Headers[0].Value, []byte{0xff, 0x00}) {
		t.Fatalf("re-produced records: %d %+v", len(recs), recs)
	}
	for _, id := range ids {
		if st := f.status(t, id); st != claim.StatusFailed {
			t.Fatalf("row %s after redrive: %s, want failed (reset)", id, st)
		}
	}
	// A second redrive changes nothing.
	if rr, err = q.Redrive(ctx, dlq.RedriveOptions{All: true}); err != nil || rr.Redriven != 0 || rr.Skipped != 3 {
		t.Fatalf("second redrive: %+v %v", rr, err)
	}
	if n := len(testenv.ReadTopic(t, f.k.Brokers, f.orig)); n != 4 {
		t.Fatalf("second redrive produced: %d records, want 4", n)
	}
	if res, err = q.List(ctx, dlq.ListOptions{}); err != nil || len(res.Letters) != 0 || res.Handled != 3 {
		t.Fatalf("list after redrive: %+v %v", res, err)
	}

	// Drop: a dry run writes nothing; a drop hides the letter; a second
	// drop reports the first.
	id3 := uuid.NewString()
	f.dead(t, id3)
	f.produce(t, f.letter(f.original(t, id3, nil))) // letter 0:3
	dr, err := q.Drop(ctx, dlq.Ref{Partition: 0, Offset: 3}, "test data", true)
	if err != nil || dr.Dropped || dr.Already != nil {
		t.Fatalf("drop dry run: %+v %v", dr, err)
	}
	if res, _ = q.List(ctx, dlq.ListOptions{}); len(res.Letters) != 1 {
		t.Fatalf("the dry-run drop hid the letter: %+v", res)
	}
	if dr, err = q.Drop(ctx, dlq.Ref{Partition: 0, Offset: 3}, "test data", false); err != nil || !dr.Dropped {
		t.Fatalf("drop: %+v %v", dr, err)
	}
	if dr, err = q.Drop(ctx, dlq.Ref{Partition: 0, Offset: 3}, "", false); err != nil || dr.Already == nil || dr.Already.Action != dlq.StateDropped {
		t.Fatalf("second drop: %+v %v", dr, err)
	}
	if sh, err = q.Show(ctx, dlq.Ref{Partition: 0, Offset: 3}); err != nil || sh.State != dlq.StateDropped || sh.Marker.By != "tester" || sh.Marker.Note != "test data" {
		t.Fatalf("show of the dropped letter: %+v %v", sh, err)
	}
	if rr, err = q.Redrive(ctx, dlq.RedriveOptions{Ref: &dlq.Ref{Partition: 0, Offset: 3}}); err != nil || rr.Skipped != 1 {
		t.Fatalf("redrive of a dropped letter: %+v %v", rr, err)
	}
	if st := f.status(t, id3); st != claim.StatusDead {
		t.Fatalf("dropped letter's row: %s, want dead", st)
	}
}

// A letter whose value is not a dead-letter record is listed with Bad set
// and fails its redrive without stopping the others.
func TestQueueBadLetter(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.produce(t, &kgo.Record{Topic: f.topic, Value: []byte("not json")})
	q := f.queue(t)
	res, err := q.List(ctx, dlq.ListOptions{})
	if err != nil || len(res.Letters) != 1 || res.Letters[0].Bad == nil {
		t.Fatalf("list: %+v %v", res, err)
	}
	rr, err := q.Redrive(ctx, dlq.RedriveOptions{All: true})
	if err != nil || rr.Failed != 1 || rr.Items[0].Outcome != dlq.OutcomeFailed {
		t.Fatalf("redrive: %+v %v", rr, err)
	}
	if _, err := q.Redrive(ctx, dlq.RedriveOptions{}); err == nil {
		t.Fatal("redrive without a letter or All: no error")
	}
}
