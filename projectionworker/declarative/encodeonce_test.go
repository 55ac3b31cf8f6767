package declarative

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/projectionworker/declarative/declarativetest"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/worker"
)

// A document is encoded once per round, when the round's write is built,
// not after every event. These tests run rounds of several events of one
// document on the real worker and a model Elasticsearch, and compare every
// bulk body sent and every document stored, byte for byte, with what the
// worker sent when each event encoded the document (golden bytes recorded
// by main 2ba47bf, which encoded after every event:
// testdata/encodeonce.golden.json; -update-encodeonce rewrites them).

var updateEncodeOnce = flag.Bool("update-encodeonce", false, "rewrite testdata/encodeonce.golden.json")

// numsYAML sets integers beyond 2^53 (not kept exactly by a double),
// strings encoding/json escapes, and increments that overflow.
const numsYAML = `name: nums
version: 1
scope: m
event_types: [READING]
key: event.data.site
updates:
  - set: big
    value: 'event.position + 9007199254740990'
  - set: small
    value: 'event.position * 2'
  - set: u
    value: 'uint(event.position)'
  - increment: total
    by: event.data.amount
    when: has(event.data.amount)
  - set: s
    value: event.data.s
    when: has(event.data.s)
  - set: prev
    value: 'has(doc.big) ? doc.big : 0.0'
`

// orderRec is an order event of Order/order for order_totals.
func orderRec(n int, typ, order string, seq int64, data string) *worker.Record {
	return &worker.Record{Offset: int64(n), Envelope: envelope.Envelope{EventID: fmt.Sprintf("00000000-0000-4000-8000-%012d", n),
		EventType: typ, Kind: envelope.KindDomain, AggregateType: "Order", AggregateID: order, SequenceNumber: seq,
		Position: int64(n), Data: []byte(data), SchemaVersion: 1,
		OccurredAt: envelope.NewTimestamp(time.Unix(1_700_000_000+int64(n), 0).UTC())}}
}

// mixedOrderTotals projects the events at an even position with the Go
// twin of order_totals (declarativetest.OrderTotals: DocState.Get and Put
// of bytes) and the others declaratively, on the same documents of one
// round.
type mixedOrderTotals struct{ *Projection }

func (m mixedOrderTotals) ProjectState(ctx context.Context, e envelope.Envelope, st *projectionworker.DocState) ([]projectionworker.Op, error) {
	if e.Position%2 == 0 {
		return declarativetest.OrderTotals(ctx, e, st)
	}
	return m.Projection.ProjectState(ctx, e, st)
}

// encodeOnceRun is what one scenario sent and stored.
type encodeOnceRun struct {
	Bodies  []string          `json:"bodies"`  // every bulk body, in order
	Results []string          `json:"results"` // per round, per event: ok or the error class
	Docs    map[string]string `json:"docs"`    // index/id → source
}

// encodeOnceScenarios are rounds on one model Elasticsearch: each
// scenario's rounds run in order, each at its projection version.
func encodeOnceScenarios(t *testing.T) map[string]func(t *testing.T) encodeOnceRun {
	orders := compileOneYAML(t, mustRead(t, "../../examples/projections/order_totals.yaml"))
	tally := compileOneYAML(t, memoYAML)
	placed := func(n int, order, customer string, amount string) *worker.Record {
		return orderRec(n, "ORDER_PLACED", order, 1, fmt.Sprintf(`{"customer_id":%q,"amount":%s}`, customer, amount))
	}
	cancelled := func(n int, order, customer string, amount string) *worker.Record {
		return orderRec(n, "ORDER_CANCELLED", order, 2, fmt.Sprintf(`{"customer_id":%q,"amount":%s}`, customer, amount))
	}
	// Ten events of two customers, one of them already stored.
	ordersRound := func(from int) []*worker.Record {
		var rs []*worker.Record
		for i := from; i < from+10; i++ {
			c := "c-" + fmt.Sprint(i%2)
			rs = append(rs, placed(i, fmt.Sprintf("o-%d", i), c, fmt.Sprintf("%d.25", i)))
		}
		return rs
	}
	// Ten events of two customers, each projected in turn by Go (even
	// positions) and declaratively (odd).
	mixedRound := func(from int) []*worker.Record {
		var rs []*worker.Record
		for i := from; i < from+10; i++ {
			c := "c-" + fmt.Sprint(i/2%2)
			rs = append(rs, placed(i, fmt.Sprintf("o-%d", i), c, fmt.Sprintf("%d.25", i)))
		}
		return rs
	}
	failing := memoFailingRecs
	run := func(p projectionworker.Projection, rounds ...[]*worker.Record) func(t *testing.T) encodeOnceRun {
		return func(t *testing.T) encodeOnceRun {
			return runEncodeOnce(t, []projectionworker.Projection{p}, rounds)
		}
	}
	return map[string]func(t *testing.T) encodeOnceRun{
		"order totals, new documents": run(orders, ordersRound(1)),
		"order totals, stored documents, replays and cancellations": run(orders, ordersRound(1)[:3], slices.Concat(
			ordersRound(11)[:4], ordersRound(1)[:2], // replays of stored events
			[]*worker.Record{cancelled(30, "o-11", "c-1", "11.25"), cancelled(31, "o-11", "c-1", "11.25")}, // the second a replay in the round
			ordersRound(11)[4:])),
		"order totals, a failing event in the middle": run(orders, ordersRound(1)[:2], slices.Concat(ordersRound(11)[:3],
			[]*worker.Record{placed(40, "o-40", "c-0", `"x"`), placed(41, "o-41", "c-1", `null`)}, // by: not a number
			ordersRound(11)[3:])),
		"tally, failing events change the document first": run(tally, failing()),
		"tally, one event per round then one round":       run(tally, failing()[:3], failing()[3:]),
		"tally, an increment that overflows": run(tally, []*worker.Record{
			memoRec(1, "d1", `{"site":"s","n":1,"amount":1e308,"counted":true}`),
			memoRec(2, "d2", `{"site":"s","n":2,"amount":1e308,"counted":true}`), // total +Inf: cannot be encoded
			memoRec(3, "d3", `{"site":"s","n":3,"amount":-1e308,"counted":true}`),
			memoRec(4, "d4", `{"site":"s","n":4,"amount":1,"counted":true}`),
		}),
		"go projection mixed in": run(mixedOrderTotals{orders}, mixedRound(1)[:3], slices.Concat(mixedRound(11),
			[]*worker.Record{placed(41, "o-41", "c-1", `null`)}, mixedRound(21), mixedRound(31)[:3])),
		"rebuild": func(t *testing.T) encodeOnceRun {
			v2 := compileOneYAML(t, strings.Replace(mustRead(t, "../../examples/projections/order_totals.yaml"), "version: 1", "version: 2", 1))
			all := slices.Concat(ordersRound(1), ordersRound(11))
			return runEncodeOnce(t, []projectionworker.Projection{orders, orders, v2}, [][]*worker.Record{all[:7], all[7:], all})
		},
		"numbers and strings the value does not keep": run(compileOneYAML(t, numsYAML), func() []*worker.Record {
			rs := []*worker.Record{
				memoRec(1, "d1", `{"site":"s","amount":1e300}`),
				memoRec(2, "d2", `{"site":"s","s":"line\u2028sep","amount":1e308}`),
				memoRec(3, "d3", `{"site":"s","amount":1e308}`), // +Inf: refused
				memoRec(4, "d4", `{"site":"s","s":{"big":18446744073709551615}}`),
				memoRec(5, "d5", `{"site":"s","s":"<&>"}`),
				memoRec(6, "d6", `{"site":"s"}`),
				memoRec(7, "d7", `{"site":"s"}`), // the round's last: big and its sequence beyond 2^53, written exactly
			}
			rs[3].Envelope.SequenceNumber = 9007199254740993
			rs[4].Envelope.SequenceNumber = 1 << 53
			rs[6].Envelope.SequenceNumber = 9007199254740995
			return rs
		}()),
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runEncodeOnce runs rounds[i] with projection ps[i] (its version's
// worker; the last one for the rounds beyond ps) on one model
// Elasticsearch.
func runEncodeOnce(t *testing.T, ps []projectionworker.Projection, rounds [][]*worker.Record) encodeOnceRun {
	t.Helper()
	tr := &directTransport{store: modelStore{docs: map[string]storedDoc{}}}
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{"http://model"}, Transport: tr, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	var out encodeOnceRun
	for i, round := range rounds {
		p := ps[min(i, len(ps)-1)]
		wk, err := projectionworker.NewWorker(modelConfig(), projectionworker.Deps{ES: es, Logger: slog.New(slog.DiscardHandler), Metrics: prometheus.NewRegistry()},
			projectionworker.Spec{Projection: p, Version: p.Version()}, projectionworker.NewBulker(es, projectionworker.BulkOptions{Linger: time.Microsecond}))
		if err != nil {
			t.Fatal(err)
		}
		var rs []string
		for _, r := range wk.HandleBatch(context.Background(), round) {
			if r.Err != nil {
				rs = append(rs, worker.Classify(r.Err))
			} else {
				rs = append(rs, "ok")
			}
		}
		out.Results = append(out.Results, strings.Join(rs, " "))
	}
	for _, b := range tr.bulks {
		out.Bodies = append(out.Bodies, string(b))
	}
	out.Docs = map[string]string{}
	for k, d := range tr.store.docs {
		out.Docs[k] = string(d.source)
	}
	return out
}

// Every scenario sends the bulk bodies and stores the documents main sent
// and stored when each event encoded its document, byte for byte.
func TestEncodeOnceSameBytes(t *testing.T) {
	const golden = "testdata/encodeonce.golden.json"
	want := map[string]encodeOnceRun{}
	if !*updateEncodeOnce {
		b, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]encodeOnceRun{}
	for name, run := range encodeOnceScenarios(t) {
		t.Run(name, func(t *testing.T) {
			r := run(t)
			got[name] = r
			if *updateEncodeOnce {
				return
			}
			w, ok := want[name]
			if !ok {
				t.Fatalf("no golden run %q", name)
			}
			if !reflect.DeepEqual(r.Results, w.Results) {
				t.Errorf("results\n got %q\nwant %q", r.Results, w.Results)
			}
			if len(r.Bodies) != len(w.Bodies) {
				t.Errorf("%d bulk bodies, want %d", len(r.Bodies), len(w.Bodies))
			}
			for i := range min(len(r.Bodies), len(w.Bodies)) {
				if r.Bodies[i] != w.Bodies[i] {
					t.Errorf("bulk body %d\n got %s\nwant %s", i, r.Bodies[i], w.Bodies[i])
				}
			}
			if !reflect.DeepEqual(r.Docs, w.Docs) {
				t.Errorf("documents\n got %v\nwant %v", r.Docs, w.Docs)
			}
		})
	}
	if *updateEncodeOnce {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// randomRounds are n random events of a few aggregates and documents for
// spec (memoYAML or numsYAML), with replays and failing events, cut into
// rounds of random sizes.
func randomRounds(r *rand.Rand, spec string, n int) [][]*worker.Record {
	seqs := map[string]int64{}
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	var all []*worker.Record
	for i := 1; i <= n; i++ {
		device := fmt.Sprintf("d%d", r.IntN(6))
		seq := seqs[device] + 1
		if r.IntN(8) == 0 && seq > 1 {
			seq = 1 + r.Int64N(seq-1) // a replay
		} else {
			seqs[device] = seq
		}
		fields := []string{`"site":` + pick(`"s"`, `"s"`, `"t"`)}
		if spec == memoYAML {
			fields = append(fields, fmt.Sprintf(`"n":%d`, r.IntN(100)))
			if r.IntN(3) == 0 {
				fields = append(fields, pick(`"obj":{"x":{"y":1}}`, `"obj":{"q":{"r":[1,2]}}`, `"obj":[1,{"a":null}]`, `"obj":"str"`))
			}
			if r.IntN(3) == 0 {
				fields = append(fields, pick(`"patch":{"x":{"z":2}}`, `"patch":{"x":null}`, `"patch":{"q":{"s":2,"r":null}}`, `"patch":5`))
			}
			if r.IntN(5) != 0 {
				fields = append(fields, pick(`"amount":1`, `"amount":2.5`, `"amount":-0.125`, `"amount":"x"`))
			}
			fields = append(fields, pick(`"counted":true`, `"counted":true`, `"counted":false`, `"counted":"yes"`))
		} else {
			if r.IntN(2) == 0 {
				fields = append(fields, pick(`"amount":1e300`, `"amount":1e308`, `"amount":-1e308`, `"amount":0.1`, `"amount":1e-7`, `"amount":123456789012345678901234`))
			}
			if r.IntN(2) == 0 {
				fields = append(fields, pick(`"s":"line\u2028sep"`, `"s":"<&>"`, `"s":"é\u00e9\ud83d\ude00"`, `"s":{"big":18446744073709551615}`, `"s":[]`, `"s":{}`, `"s":null`))
			}
		}
		rec := &worker.Record{Offset: int64(i), Envelope: envelope.Envelope{EventID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
			EventType: "READING", Kind: envelope.KindDomain, AggregateType: "Device", AggregateID: device, SequenceNumber: seq,
			Position: int64(i) * (1 + r.Int64N(3)), Data: []byte("{" + strings.Join(fields, ",") + "}"),
			OccurredAt: envelope.NewTimestamp(time.Unix(1_700_000_000+int64(i), 0).UTC())}}
		if spec != memoYAML && r.IntN(4) == 0 {
			rec.Envelope.SequenceNumber += 1 << 53 // beyond a double's integers
			seqs[device] = rec.Envelope.SequenceNumber
		}
		all = append(all, rec)
	}
	var rounds [][]*worker.Record
	for len(all) > 0 {
		k := min(len(all), 1+r.IntN(12))
		rounds = append(rounds, all[:k])
		all = all[k:]
	}
	return rounds
}

// Random rounds (replays, failing events, values the encoding does not
// give back as they are) send the same bulk bodies and store the same
// documents whether the round encodes each document once or every event
// encodes it, as before. Each execution runs two workers over 60 events
// (about 8 ms), so make test's short run gives it a budget of its own:
// fuzz-short.sh reads the line below.
//
// fuzz-budget: FuzzEncodeOnceEqualsEncodeEachEvent 3000x
func FuzzEncodeOnceEqualsEncodeEachEvent(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed, seed%2 == 0)
	}
	// Compiled once (the CEL programs are most of a compile's cost), one
	// projection per spec and way of encoding; a run keeps no state in
	// them.
	type key struct {
		spec      string
		eachEvent bool
	}
	compiled := map[key]*Projection{}
	for _, spec := range []string{numsYAML, memoYAML} {
		for _, each := range []bool{false, true} {
			p := compileOneYAML(f, spec)
			p.encodeEachEvent = each
			compiled[key{spec, each}] = p
		}
	}
	f.Fuzz(func(t *testing.T, seed uint64, tally bool) {
		spec := numsYAML
		if tally {
			spec = memoYAML
		}
		rounds := randomRounds(rand.New(rand.NewPCG(seed, 1)), spec, 60)
		run := func(eachEvent bool) encodeOnceRun {
			p := compiled[key{spec, eachEvent}]
			ps := make([]projectionworker.Projection, len(rounds))
			for i := range ps {
				ps[i] = p
			}
			return runEncodeOnce(t, ps, rounds)
		}
		once, each := run(false), run(true)
		if !reflect.DeepEqual(once.Results, each.Results) {
			t.Fatalf("results\nonce %q\neach %q", once.Results, each.Results)
		}
		if len(once.Bodies) != len(each.Bodies) {
			t.Fatalf("%d bulk bodies, %d when each event encodes", len(once.Bodies), len(each.Bodies))
		}
		for i := range once.Bodies {
			if once.Bodies[i] != each.Bodies[i] {
				t.Fatalf("bulk body %d\nonce %s\neach %s", i, once.Bodies[i], each.Bodies[i])
			}
		}
		if !reflect.DeepEqual(once.Docs, each.Docs) {
			t.Fatalf("documents\nonce %v\neach %v", once.Docs, each.Docs)
		}
	})
}

// BenchmarkRoundOrderTotals runs one worker round of 1,000 order events
// over 20 customers (50 events per document) on a model Elasticsearch:
// the allocations of a round of a stateful read model (the model's own
// bulk and _mget handling included).
func BenchmarkRoundOrderTotals(b *testing.B) {
	ps := compileOrderTotals(b)
	recs := make([]*worker.Record, 1000)
	for i := range recs {
		recs[i] = orderRec(i+1, "ORDER_PLACED", fmt.Sprintf("o-%d", i), 1, fmt.Sprintf(`{"customer_id":"c-%d","amount":%d.5}`, i%20, i%97))
	}
	b.ReportAllocs()
	for b.Loop() {
		tr := &directTransport{store: modelStore{docs: map[string]storedDoc{}}}
		es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{"http://model"}, Transport: tr, DisableRetry: true})
		if err != nil {
			b.Fatal(err)
		}
		wk, err := projectionworker.NewWorker(modelConfig(), projectionworker.Deps{ES: es, Logger: slog.New(slog.DiscardHandler), Metrics: prometheus.NewRegistry()},
			projectionworker.Spec{Projection: ps[0], Version: 1}, projectionworker.NewBulker(es, projectionworker.BulkOptions{Linger: time.Microsecond}))
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range wk.HandleBatch(context.Background(), recs) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
}
