package declarative

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/worker"
)

// The round model (issue 39): two projection workers of one group share
// documents (a key that gathers many aggregates), and every interleaving
// of their document reads and bulk writes is explored, with at most one
// crash of a worker between the links of a bulk request (a prefix of its
// items applied). The workers are the real projectionworker.Worker running
// the real declarative projection; Elasticsearch is a model store with
// external-version semantics behind a transport that blocks each request
// until the explorer lets it through. At the end every document must count
// every event once, and an event may finish as ignored only when it was
// replayed after a crash whose write had stored its effect.

const modelYAML = `name: sites
version: 1
scope: m
event_types: [READING]
key: event.data.site
updates:
  - increment: count
`

// modelConfig configures the model's workers: their indices are under
// "model_".
func modelConfig() projectionworker.Config {
	return projectionworker.Config{Elasticsearch: readmodel.Config{IndexPrefix: "model_"}}
}

// modelEvent is one event of the model: an aggregate (device) and the
// document (site) its key gathers it into.
type modelEvent struct{ device, site string }

func TestRoundModelTwoWriters(t *testing.T) {
	cases := []struct {
		name string
		// events per worker (the partitions each one owns)
		workers [][]modelEvent
		crashes int // crashes allowed per run
	}{
		{"one document, one event each", [][]modelEvent{{{"d1", "s"}}, {{"d2", "s"}}}, 0},
		{"one document, chained writes", [][]modelEvent{{{"d1", "s"}, {"d2", "s"}}, {{"d3", "s"}}}, 0},
		{"two documents, chained writes on both sides", [][]modelEvent{{{"d1", "s"}, {"d2", "t"}, {"d3", "s"}}, {{"d4", "s"}, {"d5", "t"}}}, 0},
		{"one document, a crash between links", [][]modelEvent{{{"d1", "s"}, {"d2", "t"}}, {{"d3", "s"}}}, 1},
		{"one document, chained writes, a crash between links", [][]modelEvent{{{"d1", "s"}, {"d2", "s"}}, {{"d3", "s"}}}, 1},
		{"two documents, a crash between links", [][]modelEvent{{{"d1", "s"}, {"d2", "t"}, {"d3", "s"}}, {{"d4", "t"}}}, 1},
	}
	specs, err := Parse("sites.yaml", []byte(modelYAML))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Compile(specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runs := explore(t, 20000, func(ch *chooser) error { return runModel(ch, ps[0], tc.workers, tc.crashes) })
			t.Logf("%d interleavings explored", runs)
		})
	}
}

// explore runs run once per interleaving (depth-first over the choices it
// makes), up to limit runs, and fails on the first run that errs.
func explore(t *testing.T, limit int, run func(*chooser) error) int {
	t.Helper()
	var prefix []int
	for n := 1; ; n++ {
		ch := &chooser{prefix: prefix}
		if err := run(ch); err != nil {
			t.Fatalf("interleaving %d (choices %v): %v", n, ch.taken, err)
		}
		// The next interleaving: the deepest choice with an option left.
		i := len(ch.taken) - 1
		for i >= 0 && ch.taken[i]+1 >= ch.options[i] {
			i--
		}
		if i < 0 {
			return n
		}
		if n >= limit {
			t.Fatalf("more than %d interleavings: make the case smaller", limit)
		}
		prefix = append(slices.Clone(ch.taken[:i]), ch.taken[i]+1)
	}
}

// chooser follows a prefix of choices, then takes option 0.
type chooser struct {
	prefix, taken, options []int
}

func (c *chooser) choose(n int) int {
	k := 0
	if len(c.taken) < len(c.prefix) {
		k = c.prefix[len(c.taken)]
	}
	c.taken, c.options = append(c.taken, k), append(c.options, n)
	return k
}

// modelStore is Elasticsearch's document store with external versions.
type modelStore struct {
	docs map[string]storedDoc // index/id
}

type storedDoc struct {
	version int64
	source  json.RawMessage
}

// bulk applies the items of a bulk body (index operations with an
// external version) in order: an item is written when its version is
// higher than the stored one, else refused with 409.
func (m *modelStore) bulk(body []byte, upto int) ([]map[string]any, error) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	var items []map[string]any
	for sc.Scan() {
		var action map[string]struct {
			Index   string `json:"_index"`
			ID      string `json:"_id"`
			Version int64  `json:"version"`
		}
		if err := json.Unmarshal(sc.Bytes(), &action); err != nil {
			return nil, err
		}
		if !sc.Scan() {
			return nil, errors.New("bulk: action without a source")
		}
		a, ok := action["index"]
		if !ok || a.Version <= 0 {
			return nil, fmt.Errorf("bulk: want index operations with an external version, got %v", action)
		}
		if len(items) == upto {
			break // the writer crashed: the rest is never applied
		}
		k := a.Index + "/" + a.ID
		status := http.StatusCreated
		if cur, ok := m.docs[k]; ok && a.Version <= cur.version {
			status = http.StatusConflict
		} else {
			m.docs[k] = storedDoc{version: a.Version, source: append(json.RawMessage(nil), sc.Bytes()...)}
		}
		it := map[string]any{"_index": a.Index, "_id": a.ID, "status": status}
		if status == http.StatusConflict {
			it["error"] = map[string]any{"type": "version_conflict_engine_exception", "reason": "version conflict"}
		}
		items = append(items, map[string]any{"index": it})
	}
	return items, nil
}

// world is one run: the store, the workers' requests waiting to run, and
// the explorer's choices.
type world struct {
	mu      sync.Mutex
	cond    *sync.Cond
	store   modelStore
	ch      *chooser
	crashes int
	// per worker: its waiting request (nil when running or idle), whether
	// it is done, and whether it crashed in this incarnation.
	waiting []*request
	done    []bool
	crashed []bool
	incn    []int
	cancel  []context.CancelFunc
	// requests that read documents: the round reads with one _mget
	mgets, gets int
}

type request struct {
	req   *http.Request
	body  []byte
	lines int
	grant chan *http.Response
}

// transport is one worker incarnation's connection to the model.
type transport struct {
	w    *world
	id   int
	incn int // incarnation, to refuse a crashed one's late requests
}

func resp(status int, v any) *http.Response {
	b, _ := json.Marshal(v)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Elastic-Product", "Elasticsearch")
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(bytes.NewReader(b))}
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	w := tr.w
	path := req.URL.Path
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
	}
	// Index management: answered at once (not an interleaving point).
	switch {
	case req.Method == http.MethodHead:
		return resp(http.StatusOK, map[string]any{}), nil
	case path == "/_aliases":
		return resp(http.StatusOK, map[string]any{"acknowledged": true}), nil
	case strings.Contains(path, "/_alias"):
		return resp(http.StatusNotFound, map[string]any{}), nil
	}
	w.mu.Lock()
	if tr.incn != w.incn[tr.id] || w.crashed[tr.id] {
		w.mu.Unlock()
		return nil, errors.New("model: the worker crashed")
	}
	r := &request{req: req, body: body, lines: bytes.Count(body, []byte("\n")) / 2, grant: make(chan *http.Response, 1)}
	w.waiting[tr.id] = r
	w.cond.Broadcast()
	w.mu.Unlock()
	if out := <-r.grant; out != nil {
		return out, nil
	}
	return nil, errors.New("model: connection reset (the worker crashed)")
}

// step runs one waiting request chosen by the explorer; false when no
// request waits (every worker is done).
func (w *world) step() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		waiting, running := 0, 0
		for i := range w.waiting {
			switch {
			case w.waiting[i] != nil:
				waiting++
			case !w.done[i]:
				running++
			}
		}
		if running == 0 {
			if waiting == 0 {
				return false
			}
			break
		}
		w.cond.Wait()
	}
	// The options: each waiting request; a bulk may also crash its
	// worker after any prefix of its items while crashes are left.
	type option struct{ worker, crashAfter int }
	var opts []option
	for i, r := range w.waiting {
		if r == nil {
			continue
		}
		opts = append(opts, option{i, -1})
		if strings.HasSuffix(r.req.URL.Path, "/_bulk") && w.crashes > 0 {
			for k := 0; k <= r.lines; k++ {
				opts = append(opts, option{i, k})
			}
		}
	}
	o := opts[w.ch.choose(len(opts))]
	r := w.waiting[o.worker]
	w.waiting[o.worker] = nil
	switch path := r.req.URL.Path; {
	case strings.HasSuffix(path, "/_bulk"):
		upto := -1
		if o.crashAfter >= 0 {
			upto = o.crashAfter
		}
		items, err := w.store.bulk(r.body, upto)
		if err != nil {
			r.grant <- resp(http.StatusBadRequest, map[string]any{"error": err.Error()})
			return true
		}
		if o.crashAfter >= 0 {
			w.crashes--
			w.crashed[o.worker] = true
			w.cancel[o.worker]()
			r.grant <- nil
			return true
		}
		r.grant <- resp(http.StatusOK, map[string]any{"errors": false, "items": items})
	case strings.HasSuffix(path, "/_mget"):
		var q struct {
			Docs []struct {
				Index string `json:"_index"`
				ID    string `json:"_id"`
			} `json:"docs"`
		}
		if err := json.Unmarshal(r.body, &q); err != nil {
			r.grant <- resp(http.StatusBadRequest, map[string]any{"error": err.Error()})
			return true
		}
		docs := []map[string]any{}
		for _, d := range q.Docs {
			if sd, ok := w.store.docs[d.Index+"/"+d.ID]; ok {
				docs = append(docs, map[string]any{"_index": d.Index, "_id": d.ID, "found": true, "_version": sd.version, "_source": sd.source})
			} else {
				docs = append(docs, map[string]any{"_index": d.Index, "_id": d.ID, "found": false})
			}
		}
		w.mgets++
		r.grant <- resp(http.StatusOK, map[string]any{"docs": docs})
	case strings.Contains(path, "/_doc/"):
		w.gets++
		i := strings.Index(path, "/_doc/")
		k := strings.TrimPrefix(path[:i], "/") + "/" + path[i+len("/_doc/"):]
		d, ok := w.store.docs[k]
		if !ok {
			r.grant <- resp(http.StatusNotFound, map[string]any{"found": false})
			return true
		}
		r.grant <- resp(http.StatusOK, map[string]any{"found": true, "_version": d.version, "_source": d.source})
	default:
		r.grant <- resp(http.StatusBadRequest, map[string]any{"error": "model: unexpected " + r.req.Method + " " + path})
	}
	return true
}

// runModel runs one interleaving: each worker processes its events in
// rounds (at most one event per aggregate per round, as the runtime
// does), retrying what is retryable and restarting after a crash.
func runModel(ch *chooser, p *Projection, workers [][]modelEvent, crashes int) error {
	w := &world{store: modelStore{docs: map[string]storedDoc{}}, ch: ch, crashes: crashes,
		waiting: make([]*request, len(workers)), done: make([]bool, len(workers)),
		crashed: make([]bool, len(workers)), incn: make([]int, len(workers)), cancel: make([]context.CancelFunc, len(workers))}
	w.cond = sync.NewCond(&w.mu)
	type finish struct {
		outcome  claim.OutcomeResult
		replayed bool // re-run after a crash
	}
	var mu sync.Mutex
	finished := map[string]finish{}
	errs := make(chan error, len(workers))
	seq := 0
	recs := make([][]*worker.Record, len(workers))
	want := map[string]int{}
	for i, evs := range workers {
		for _, e := range evs {
			seq++
			env := envelope.Envelope{EventID: fmt.Sprintf("00000000-0000-4000-8000-%012d", seq), EventType: "READING",
				Kind: envelope.KindDomain, AggregateType: "Device", AggregateID: e.device, SequenceNumber: 1, Position: int64(seq),
				Data: []byte(`{"site":"` + e.site + `"}`), OccurredAt: envelope.NewTimestamp(mustTime(t0))}
			recs[i] = append(recs[i], &worker.Record{Partition: int32(i), Offset: int64(seq), Envelope: env})
			want[e.site]++
		}
	}
	for i := range workers {
		go func() {
			errs <- func() error {
				pending := recs[i]
				replayed := map[string]bool{}
				for len(pending) > 0 {
					ctx, cancel := context.WithCancel(context.Background())
					w.mu.Lock()
					w.crashed[i], w.cancel[i] = false, cancel
					w.incn[i]++
					incn := w.incn[i]
					w.mu.Unlock()
					es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{"http://model"}, Transport: &transport{w: w, id: i, incn: incn}, DisableRetry: true})
					if err != nil {
						return err
					}
					wk, err := projectionworker.NewWorker(modelConfig(), projectionworker.Deps{ES: es, Logger: slog.New(slog.DiscardHandler), Metrics: prometheus.NewRegistry()},
						projectionworker.Spec{Projection: p, Version: 1},
						projectionworker.NewBulker(es, projectionworker.BulkOptions{Linger: time.Microsecond, ItemRetries: 1, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond}))
					if err != nil {
						return err
					}
					res := wk.HandleBatch(ctx, pending)
					w.mu.Lock()
					crashed := w.crashed[i]
					w.mu.Unlock()
					cancel()
					if crashed {
						for _, r := range pending {
							replayed[r.Envelope.EventID] = true
						}
						continue // restarted: nothing was marked done
					}
					var again []*worker.Record
					for j, r := range res {
						switch {
						case r.Err == nil:
							mu.Lock()
							finished[pending[j].Envelope.EventID] = finish{r.Outcome.Result, replayed[pending[j].Envelope.EventID]}
							mu.Unlock()
						case worker.Classify(r.Err) == worker.ClassRetryable:
							again = append(again, pending[j])
						default:
							return fmt.Errorf("event %s: %v", pending[j].Envelope.EventID, r.Err)
						}
					}
					pending = again
				}
				return nil
			}()
			w.mu.Lock()
			w.done[i] = true
			w.cond.Broadcast()
			w.mu.Unlock()
		}()
	}
	for w.step() {
	}
	for range workers {
		if err := <-errs; err != nil {
			return err
		}
	}
	got := map[string]int{}
	for k, d := range w.store.docs {
		var doc struct {
			Count int `json:"count"`
		}
		if err := json.Unmarshal(d.source, &doc); err != nil {
			return err
		}
		got[strings.TrimPrefix(k, "model_m_sites_v1/")] = doc.Count
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("documents count %v, want %v (events lost or counted twice)", got, want)
	}
	for id, f := range finished {
		if f.outcome == claim.OutcomeIgnored && !f.replayed {
			return fmt.Errorf("event %s finished as ignored though it was never written before", id)
		}
	}
	if w.gets > 0 || w.mgets == 0 {
		return fmt.Errorf("documents read with %d GETs and %d _mgets, want only _mgets", w.gets, w.mgets)
	}
	if len(finished) != seq {
		return fmt.Errorf("%d of %d events finished", len(finished), seq)
	}
	return nil
}

// directTransport answers at once from a model store; a document whose
// source holds "poison" is refused with 400, as a mapping error would be.
type directTransport struct {
	mu    sync.Mutex
	store modelStore
	bulks [][]byte // every bulk body, in order
}

func (d *directTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	path := req.URL.Path
	switch {
	case req.Method == http.MethodHead:
		return resp(http.StatusOK, map[string]any{}), nil
	case path == "/_aliases":
		return resp(http.StatusOK, map[string]any{"acknowledged": true}), nil
	case strings.Contains(path, "/_alias"):
		return resp(http.StatusNotFound, map[string]any{}), nil
	case strings.HasSuffix(path, "/_mget"):
		var q struct {
			Docs []struct {
				Index string `json:"_index"`
				ID    string `json:"_id"`
			} `json:"docs"`
		}
		_ = json.Unmarshal(body, &q)
		docs := []map[string]any{}
		for _, x := range q.Docs {
			if sd, ok := d.store.docs[x.Index+"/"+x.ID]; ok {
				docs = append(docs, map[string]any{"found": true, "_version": sd.version, "_source": sd.source})
			} else {
				docs = append(docs, map[string]any{"found": false})
			}
		}
		return resp(http.StatusOK, map[string]any{"docs": docs}), nil
	case strings.HasSuffix(path, "/_bulk"):
		d.bulks = append(d.bulks, body)
		lines := bytes.Split(bytes.TrimSpace(body), []byte("\n"))
		var items []map[string]any
		for k := 0; k+1 < len(lines); k += 2 {
			if bytes.Contains(lines[k+1], []byte("poison")) {
				items = append(items, map[string]any{"index": map[string]any{"status": http.StatusBadRequest,
					"error": map[string]any{"type": "mapper_parsing_exception", "reason": "poison"}}})
				continue
			}
			got, err := d.store.bulk(append(append(append([]byte(nil), lines[k]...), '\n'), append(lines[k+1], '\n')...), -1)
			if err != nil {
				return nil, err
			}
			items = append(items, got...)
		}
		return resp(http.StatusOK, map[string]any{"errors": true, "items": items}), nil
	}
	return resp(http.StatusBadRequest, map[string]any{"error": "model: unexpected " + req.Method + " " + path}), nil
}

// TestRoundRefusedSharedWrite: when the folded write of a document is
// refused for good because of one event's data, only that event is
// dead-lettered; the others of the round that wrote the document are run
// alone and applied.
func TestRoundRefusedSharedWrite(t *testing.T) {
	specs, err := Parse("sites.yaml", []byte(modelYAML+`  - set: poison
    value: event.data.poison
    when: has(event.data.poison)
`))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Compile(specs)
	if err != nil {
		t.Fatal(err)
	}
	tr := &directTransport{store: modelStore{docs: map[string]storedDoc{}}}
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{"http://model"}, Transport: tr, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	wk, err := projectionworker.NewWorker(modelConfig(), projectionworker.Deps{ES: es, Logger: slog.New(slog.DiscardHandler), Metrics: prometheus.NewRegistry()},
		projectionworker.Spec{Projection: ps[0], Version: 1}, projectionworker.NewBulker(es, projectionworker.BulkOptions{Linger: time.Microsecond}))
	if err != nil {
		t.Fatal(err)
	}
	rec := func(n int, device, data string) *worker.Record {
		return &worker.Record{Offset: int64(n), Envelope: envelope.Envelope{EventID: fmt.Sprintf("00000000-0000-4000-8000-%012d", n),
			EventType: "READING", Kind: envelope.KindDomain, AggregateType: "Device", AggregateID: device, SequenceNumber: 1,
			Position: int64(n), Data: []byte(data), OccurredAt: envelope.NewTimestamp(mustTime(t0))}}
	}
	recs := []*worker.Record{rec(1, "d1", `{"site":"s"}`), rec(2, "d2", `{"site":"s","poison":"x"}`), rec(3, "d3", `{"site":"s"}`)}
	res := wk.HandleBatch(context.Background(), recs)
	for i, want := range []string{worker.ClassRetryable, worker.ClassPermanent, worker.ClassRetryable} {
		got := "ok"
		if res[i].Err != nil {
			got = worker.Classify(res[i].Err)
		}
		if (want == worker.ClassPermanent) != (got == worker.ClassPermanent) || (want != worker.ClassPermanent && res[i].Err != nil) {
			t.Fatalf("event %d: %v (%s), want only event 2 refused", i+1, res[i].Err, got)
		}
	}
	var doc struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal(tr.store.docs["model_m_sites_v1/s"].source, &doc); err != nil || doc.Count != 2 {
		t.Fatalf("document %s, want count 2 (events 1 and 3)", tr.store.docs["model_m_sites_v1/s"].source)
	}
}
