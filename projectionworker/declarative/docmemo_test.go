package declarative

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/worker"
)

// A document is decoded at most once per round: the events of a round
// change the decoded value in place (projectionworker.DocState keeps it
// with the bytes it stands for). These tests run the real worker on a
// model Elasticsearch (directTransport) and check that keeping the value
// changes nothing an event sees or writes.

const memoYAML = `name: tally
version: 1
scope: m
event_types: [READING]
key: event.data.site
updates:
  - increment: count
  - append: seen
    value: event.data.n
  - set: a
    value: event.data.obj
    when: has(event.data.obj)
  - set: b
    value: event.data.obj
    when: has(event.data.obj)
  - merge: a
    value: event.data.patch
    when: has(event.data.patch)
  - set: before
    value: 'has(doc.count) ? doc.count : 0'
  - increment: total
    by: event.data.amount
    when: event.data.counted
`

// memoWorld is a worker on a model Elasticsearch.
type memoWorld struct {
	tr *directTransport
	wk *projectionworker.Worker
}

func newMemoWorld(t *testing.T, p *Projection) *memoWorld {
	t.Helper()
	tr := &directTransport{store: modelStore{docs: map[string]storedDoc{}}}
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{"http://model"}, Transport: tr, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	wk, err := projectionworker.NewWorker(modelConfig(), projectionworker.Deps{ES: es, Logger: slog.New(slog.DiscardHandler), Metrics: prometheus.NewRegistry()},
		projectionworker.Spec{Projection: p, Version: 1}, projectionworker.NewBulker(es, projectionworker.BulkOptions{Linger: time.Microsecond}))
	if err != nil {
		t.Fatal(err)
	}
	return &memoWorld{tr: tr, wk: wk}
}

// doc returns the stored document id of the tally projection.
func (m *memoWorld) doc(t *testing.T, id string) map[string]any {
	t.Helper()
	d, ok := m.tr.store.docs["model_m_tally_v1/"+id]
	if !ok {
		t.Fatalf("document %s not stored", id)
	}
	var v map[string]any
	if err := json.Unmarshal(d.source, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// memoRec is an event of aggregate Device/device (sequence 1).
func memoRec(n int, device, data string) *worker.Record {
	return &worker.Record{Offset: int64(n), Envelope: envelope.Envelope{EventID: fmt.Sprintf("00000000-0000-4000-8000-%012d", n),
		EventType: "READING", Kind: envelope.KindDomain, AggregateType: "Device", AggregateID: device, SequenceNumber: 1,
		Position: int64(n), Data: []byte(data), OccurredAt: envelope.NewTimestamp(mustTime(t0))}}
}

// An event that fails in the middle of a round, after some of its updates
// changed the document (a by: that fails, a when: that is not a bool),
// leaves no trace in what the round's later events see or in what is
// written: the round writes what the events processed one per round
// write, and the expected document. Two updates setting the same value
// hold copies of their own: a later merge into one leaves the other as it
// was (in the round as across rounds).
func TestDecodedDocumentFailedEventLeavesNoTrace(t *testing.T) {
	p := compileOneYAML(t, memoYAML)
	recs := memoFailingRecs
	failing := map[int]bool{1: true, 4: true, 6: true}
	want := map[string]any{
		"count": 3.0, "seen": []any{1.0, 3.0, 5.0}, "total": 6.0, "before": 2.0, "deleted": false,
		"a": map[string]any{"q": map[string]any{"r": 1.0, "s": 2.0}}, "b": map[string]any{"q": map[string]any{"r": 1.0}},
	}
	wantAfter4 := map[string]any{ // after event 4 (d3): a merged, b as set by d1
		"a": map[string]any{"x": map[string]any{"y": 1.0, "z": 2.0}}, "b": map[string]any{"x": map[string]any{"y": 1.0}},
	}
	check := func(t *testing.T, i int, r worker.BatchResult) {
		t.Helper()
		if failing[i] {
			if r.Err == nil || worker.Classify(r.Err) != worker.ClassPermanent {
				t.Fatalf("event %d: %v, want a permanent failure", i+1, r.Err)
			}
		} else if r.Err != nil {
			t.Fatalf("event %d: %v", i+1, r.Err)
		}
	}
	body := func(d map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range d {
			if k != "sluice" {
				out[k] = v
			}
		}
		return out
	}
	var perRound map[string]any
	t.Run("one event per round", func(t *testing.T) {
		m := newMemoWorld(t, p)
		for i, r := range recs() {
			check(t, i, m.wk.HandleBatch(context.Background(), []*worker.Record{r})[0])
			if i == 3 {
				d := m.doc(t, "s")
				if !reflect.DeepEqual(d["a"], wantAfter4["a"]) || !reflect.DeepEqual(d["b"], wantAfter4["b"]) {
					t.Fatalf("after event 4: a %v, b %v, want %v", d["a"], d["b"], wantAfter4)
				}
			}
		}
		perRound = m.doc(t, "s")
		if got := body(perRound); !reflect.DeepEqual(got, want) {
			t.Fatalf("document\n got %v\nwant %v", got, want)
		}
	})
	t.Run("one round", func(t *testing.T) {
		if perRound == nil {
			t.Fatal("no document of one event per round to compare with")
		}
		m := newMemoWorld(t, p)
		for i, r := range m.wk.HandleBatch(context.Background(), recs()) {
			check(t, i, r)
		}
		got := m.doc(t, "s")
		if !reflect.DeepEqual(got, perRound) {
			t.Fatalf("document written by one round\n got %v\nwant %v (one event per round)", got, perRound)
		}
	})
	t.Run("the failed event is the round's last", func(t *testing.T) {
		m := newMemoWorld(t, p)
		rs := recs()
		res := m.wk.HandleBatch(context.Background(), []*worker.Record{rs[0], rs[1]})
		check(t, 0, res[0])
		check(t, 1, res[1])
		if got, want := body(m.doc(t, "s")), (map[string]any{"count": 1.0, "seen": []any{1.0}, "total": 5.0, "before": 0.0, "deleted": false,
			"a": map[string]any{"x": map[string]any{"y": 1.0}}, "b": map[string]any{"x": map[string]any{"y": 1.0}}}); !reflect.DeepEqual(got, want) {
			t.Fatalf("document\n got %v\nwant %v", got, want)
		}
	})
}

// N events of one document in one round decode it once when it is read
// from Elasticsearch, and never when the round creates it; one event per
// round decodes it every round. A replay in the round hands the value
// back unchanged.
func TestDecodedOncePerRound(t *testing.T) {
	p := compileOneYAML(t, memoYAML)
	decodes := 0
	p.onDecode = func() { decodes++ }
	const n = 20
	events := func(from int) []*worker.Record {
		var rs []*worker.Record
		for i := from; i < from+n; i++ {
			rs = append(rs, memoRec(i, fmt.Sprintf("d%d", i), fmt.Sprintf(`{"site":"s","n":%d,"amount":1,"counted":true}`, i)))
		}
		return rs
	}
	cases := []struct {
		name        string
		seed        []*worker.Record // rounds before, one event each
		round       []*worker.Record
		wantDecodes int
	}{
		{"a new document", nil, events(1), 0},
		{"a stored document", events(1)[:1], events(2), 1},
		{"a stored document and a replay", events(1)[:1], slices.Concat(events(2)[:n/2], events(1)[:1], events(2)[n/2:]), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMemoWorld(t, p)
			for _, r := range tc.seed {
				if res := m.wk.HandleBatch(context.Background(), []*worker.Record{r}); res[0].Err != nil {
					t.Fatal(res[0].Err)
				}
			}
			decodes = 0
			for i, r := range m.wk.HandleBatch(context.Background(), tc.round) {
				if r.Err != nil {
					t.Fatalf("event %d: %v", i, r.Err)
				}
			}
			if decodes != tc.wantDecodes {
				t.Errorf("%d events of one document in one round decoded it %d times, want %d", len(tc.round), decodes, tc.wantDecodes)
			}
			if got := m.doc(t, "s")["count"]; got != float64(n+len(tc.seed)) {
				t.Errorf("count %v, want %d", got, n+len(tc.seed))
			}
		})
	}
	t.Run("one event per round", func(t *testing.T) {
		m := newMemoWorld(t, p)
		decodes = 0
		for _, r := range events(1) {
			if res := m.wk.HandleBatch(context.Background(), []*worker.Record{r}); res[0].Err != nil {
				t.Fatal(res[0].Err)
			}
		}
		if decodes != n-1 {
			t.Errorf("%d rounds of one event decoded the document %d times, want %d (every round but the first)", n, decodes, n-1)
		}
	})
}

// The value kept for the round's next event is what the written bytes
// decode to: a number is a double whether it was read or set by an
// earlier event of the round (an int from CEL is written as a JSON
// number and read back as a double), so an expression on it behaves the
// same in one round as across rounds.
func TestDecodedDocumentNumbersAreDoubles(t *testing.T) {
	const spec = `name: tally
version: 1
scope: m
event_types: [READING]
key: event.data.site
updates:
  - set: twice
    value: 'has(doc.n) ? doc.n * 2.0 : 0.0'
  - set: n
    value: 'int(event.data.n)'
  - set: isdouble
    value: 'has(doc.n) ? type(doc.n) == double : true'
`
	recs := []*worker.Record{memoRec(1, "d1", `{"site":"s","n":1}`), memoRec(2, "d2", `{"site":"s","n":2}`)}
	want := map[string]any{"twice": 2.0, "n": 2.0, "isdouble": true}
	for _, tc := range []struct {
		name   string
		rounds [][]*worker.Record
	}{
		{"one event per round", [][]*worker.Record{recs[:1], recs[1:]}},
		{"one round", [][]*worker.Record{recs}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMemoWorld(t, compileOneYAML(t, spec))
			for _, round := range tc.rounds {
				for i, r := range m.wk.HandleBatch(context.Background(), round) {
					if r.Err != nil {
						t.Fatalf("event %d: %v", i+1, r.Err)
					}
				}
			}
			d := m.doc(t, "s")
			for k, v := range want {
				if d[k] != v {
					t.Errorf("%s = %v, want %v", k, d[k], v)
				}
			}
		})
	}
}

// memoFailingRecs is a round of memoYAML's events of which three fail
// after they changed their document (records 2, 5 and 7; the last is the
// round's last event of its document).
func memoFailingRecs() []*worker.Record {
	return []*worker.Record{
		memoRec(1, "d1", `{"site":"s","n":1,"obj":{"x":{"y":1}},"amount":5,"counted":true}`),
		memoRec(2, "d2", `{"site":"s","n":2,"counted":true,"obj":{"x":{"bad":1}},"patch":{"x":{"bad":2}}}`), // no amount: by fails
		memoRec(3, "t1", `{"site":"t","n":1,"counted":false}`),
		memoRec(4, "d3", `{"site":"s","n":3,"patch":{"x":{"z":2}},"amount":1,"counted":true}`),
		memoRec(5, "d4", `{"site":"s","n":4,"counted":"yes"}`), // when: not a bool
		memoRec(6, "d5", `{"site":"s","n":5,"obj":{"q":{"r":1}},"patch":{"q":{"s":2}},"counted":false}`),
		memoRec(7, "d6", `{"site":"s","n":6,"counted":true}`), // fails as the round's last event of s
	}
}
