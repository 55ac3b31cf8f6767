package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/worker"
)

// dlq show and redrive understand a dead letter in pointer form (the
// worker left the original out because it was too large, issue 21.3):
// show prints the pointer and the original read back from Kafka, redrive
// re-produces that original byte for byte; a pointer to an offset that is
// gone is reported as failed with the way out (republish from the store).
func TestDLQPointerForm(t *testing.T) {
	ctx := context.Background()
	_, reg := envRegistry(t, "test")
	k := newKafkaFixture(t)
	orig, dlq := k.dlqTopics(t, 1)
	const handler = "instanceworker"
	id := uuid.NewString()
	res, err := reg.Claim(ctx, claim.Request{Handler: handler, EventID: id, AggregateID: "shop:orders:1", Seq: 1, Policy: claim.SkipStale})
	if err != nil || res.Kind != claim.Claimed {
		t.Fatalf("claim: %v %v", res.Kind, err)
	}
	if _, err := reg.MarkFailed(ctx, res.Lease, claim.Failure{Err: errors.New("permanent: boom")}); err != nil {
		t.Fatal(err)
	}
	original := &kgo.Record{Topic: orig, Key: []byte("Instance:shop:orders:1"),
		Value:   []byte(`{"event_id":"` + id + `","note":"` + strings.Repeat(`<\u0001`, 100) + `"}`),
		Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(id)}, {Key: "position", Value: []byte("77")}}}
	k.produce(t, original) // offset 0
	pointer := func(offset int64) *kgo.Record {
		d := worker.DLQRecord{OriginalTopic: orig, OriginalOffset: offset, OriginalKey: string(original.Key),
			OriginalHeaders: map[string]string{}, Error: "permanent: too big", ErrorClass: "permanent", AttemptCount: 1,
			Handler: handler, FirstFailedAt: time.Now().UTC(), FailedAt: time.Now().UTC(),
			OriginalTruncated: true, TruncatedReason: "size", OriginalSize: len(original.Value), OriginalEventID: id, OriginalPosition: 77}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: dlq, Key: original.Key, Value: b}
	}
	k.produce(t, pointer(0), pointer(5)) // letters 0:0 (original present) and 0:1 (no record at offset 5)

	out, _, err := runOps(t, "dlq", "show", "--topic", dlq, "--offset", "0")
	if err != nil || !strings.Contains(out, "pointer form") || !opHasLine(out, "event_id", id) || !strings.Contains(out, `\u0001`) {
		t.Fatalf("show of a pointer letter: %v\n%s", err, out)
	}
	out, _, err = runOps(t, "dlq", "redrive", "--topic", dlq, "--offset", "0")
	if err != nil || !strings.Contains(out, "1 redriven") {
		t.Fatalf("redrive of a pointer letter: %v\n%s", err, out)
	}
	recs := k.records(t, orig)
	if len(recs) != 2 {
		t.Fatalf("%d records in %s after the redrive, want 2", len(recs), orig)
	}
	sameRecord(t, recs[1], original)
	if rows, err := reg.Get(ctx, id); err != nil || len(rows) != 1 || rows[0].Status != claim.StatusFailed {
		t.Fatalf("registry row after the redrive: %+v %v, want failed (reset)", rows, err)
	}
	out, _, err = runOps(t, "dlq", "redrive", "--topic", dlq, "--offset", "1")
	if err == nil || !strings.Contains(out, "no record at that offset") || !strings.Contains(out, "republish") {
		t.Fatalf("redrive of a pointer to a missing offset: %v\n%s", err, out)
	}
}
