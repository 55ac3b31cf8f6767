package projectionworker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/shared/backoff"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/failure"
	"github.com/sluicehq/sluice/shared/tracing"
	"github.com/sluicehq/sluice/worker"
)

// CrashWorker is the worker name of the projection worker's crash points
// (SLUICE_CRASH_POINT=projectionworker:<point>).
const CrashWorker = "projectionworker"

// Crash points hit by the handler (the runtime hits after_claim,
// before_mark_done and before_commit).
const (
	PointBeforeESWrite = "before_es_write"
	PointAfterESWrite  = "after_es_write"
)

// Conflict reasons of sluice_projection_conflicts_total.
const (
	// ReasonVersion: an external-version write found the same or a newer
	// version (already applied, or a stale event).
	ReasonVersion = "version"
	// ReasonExists: an op_type=create found the document (already applied).
	ReasonExists = "exists"
)

// Mode says how a worker manages indices.
type Mode int

const (
	// Live creates a missing concrete index together with its read and write
	// aliases when the scope has no write alias yet.
	Live Mode = iota
	// Rebuilding creates concrete indices with refresh off and no replicas and
	// never touches aliases (the swap does, docs/projectionworker.md#rebuild-and-rollback-runbook).
	Rebuilding
)

// Worker is the worker.Handler (and worker.BatchHandler) of one
// projection version: a part of a Service, which builds one per consumer.
type Worker struct {
	spec   Spec   // Version ≥ 1
	prefix string // ELASTICSEARCH_INDEX_PREFIX
	es     *elasticsearch.Client
	// bulk batches the writes (shared by the workers of a Service).
	bulk  *Bulker
	crash *crashpoint.Crasher
	log   *slog.Logger
	// onLost, when set, is told of a write answered 404 (the index was
	// deleted under the worker and Elasticsearch does not create it on
	// write): the Service rebuilds the read model
	// (docs/projectionworker.md#read-model-lost).
	onLost func(scope, reason string)
	// ensured maps each scope whose index exists (index) to the index's
	// name: a lookup without allocation on every operation of a round.
	ensured   map[string]string
	ensuredMu sync.RWMutex // guards ensured
	ensMu     sync.Mutex   // held while an index is created
	m         *metrics
}

var _ worker.BatchHandler = (*Worker)(nil)

// NewWorker returns the handler of projection sp.Projection at version
// sp.Version (≥ 1) in mode sp.Mode, as a Service builds it: it writes
// through bulk (NewBulker) into the indices under
// cfg.Elasticsearch.IndexPrefix, reads with d.ES, logs to d.Logger and
// counts on d.Metrics (default: a private registry; collectors already
// registered are reused). Tests and benchmarks call it to run a handler
// without the runtime.
func NewWorker(cfg Config, d Deps, sp Spec, bulk *Bulker) (*Worker, error) {
	switch {
	case sp.Projection == nil:
		return nil, errors.New("projectionworker: Projection is required")
	case d.ES == nil || bulk == nil:
		return nil, errors.New("projectionworker: ES and Bulker are required")
	case sp.Version <= 0:
		return nil, fmt.Errorf("projectionworker: version %d: must be ≥ 1", sp.Version)
	}
	if err := ValidateName(sp.Projection.Name()); err != nil {
		return nil, err
	}
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	reg := d.Metrics
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	return &Worker{spec: sp, prefix: cfg.Elasticsearch.IndexPrefix, es: d.ES, bulk: bulk, log: log, m: newMetrics(reg),
		ensured: map[string]string{}}, nil
}

// HandlerName is the worker's registry handler.
func (w *Worker) HandlerName() string { return HandlerName(w.spec.Projection.Name(), w.spec.Version) }

func (w *Worker) hit(point string) {
	if w.crash != nil {
		w.crash.Hit(CrashWorker, point)
	}
}

// Handle projects one claimed event and writes its operations, returning
// only after Elasticsearch answered every item: applied, conflict (409 on
// every item: already applied or stale; counted), Permanent (mapping
// errors: DLQ for this event only), Outage (429, 502, 503, 504 items after
// the bulker's retries, or index management failing as an outage: the
// runtime pauses, no attempt is spent) or Retryable (other 5xx). It is
// HandleBatch for one record.
func (w *Worker) Handle(ctx context.Context, rec *worker.Record) (claim.Outcome, error) {
	r := w.HandleBatch(ctx, []*worker.Record{rec})[0]
	return r.Outcome, r.Err
}

// conflictRetries bounds how often a round projects again, on the newly
// read state, the events whose document another worker changed since the
// round read it, before it hands them to the runtime as retryable (which
// spends an attempt). Each pass is a compare-and-swap that some writer
// wins, so contention delays a round but never loses or dead-letters an
// event unless it persists through every pass.
const conflictRetries = 8

// conflictPause is the pause before conflict pass n: 5 ms doubling to
// 80 ms, jittered (shared/backoff).
func conflictPause() backoff.Policy {
	return backoff.Policy{Base: 5 * time.Millisecond, Cap: 80 * time.Millisecond, Jitter: true}
}

// errRunAlone marks an event whose round's folded write was refused for
// good: it is run again in a round of its own (HandleBatch).
var errRunAlone = errors.New("projectionworker: a write shared with other events was refused; running the event alone")

// errDocChanged marks a stateful write refused with 409: another worker
// wrote the document since the round read it.
var errDocChanged = errors.New("projectionworker: a document changed while the event was projected; retrying on its new state")

// HandleBatch is Handle for all records of a runtime round
// (worker.BatchHandler): it projects every record, writes all their
// operations together — in bulk requests bounded by the bulker's MaxDocs
// and MaxBytes, in record order, one write per document for a stateful
// projection (Stateful: a compare-and-swap on the version the round read)
// — and maps the item answers back: a record is applied when all its
// items succeeded (or conflict when all were 409s of a stateless
// projection), and fails on its own (Permanent, Retryable) without
// affecting the others. The records whose stateful document was changed
// by another writer meanwhile are projected again on the new state, up to
// conflictRetries times, before they are returned as retryable.
func (w *Worker) HandleBatch(ctx context.Context, recs []*worker.Record) []worker.BatchResult {
	out := w.round(ctx, recs)
	if !isStateful(w.spec.Projection) {
		return out
	}
	for i, r := range out {
		if errors.Is(r.Err, errRunAlone) && ctx.Err() == nil {
			out[i] = w.round(ctx, recs[i:i+1])[0]
		}
	}
	for pass := 0; pass < conflictRetries; pass++ {
		var again []int
		for i, r := range out {
			if errors.Is(r.Err, errDocChanged) {
				again = append(again, i)
			}
		}
		if len(again) == 0 || ctx.Err() != nil {
			break
		}
		// A short random pause, growing with the passes, lets the other
		// writer's round finish before this one reads again.
		if conflictPause().Sleep(ctx, pass) != nil {
			return out
		}
		sub := make([]*worker.Record, len(again))
		for j, i := range again {
			sub[j] = recs[i]
		}
		for j, r := range w.round(ctx, sub) {
			out[again[j]] = r
		}
	}
	return out
}

// roundPlan is the writes of one round: the encoded bulk lines, the item
// of each line, and per record the lines its outcome depends on.
type roundPlan struct {
	out   []worker.BatchResult
	lines [][]byte
	items []BulkItem
	// deps[i] are the lines of record i: its own writes, or (noWrite[i])
	// the round's writes of the documents it read before it decided it
	// had nothing to write — that decision holds only if they are stored.
	deps    [][]int
	noWrite []bool
	// Scratch reused from record to record: the items of the record being
	// planned (prepare) and their lines (encodeRound), which place copies
	// into the round, and the backing array of the deps (depLines).
	its     []BulkItem
	enc     [][]byte
	depsBuf []int
}

// depLines returns a slice of n lines for one record's deps, cut from one
// array per round; its capacity is n, so that an append to it never
// reaches another record's.
func (pl *roundPlan) depLines(n int) []int {
	if cap(pl.depsBuf)-len(pl.depsBuf) < n {
		pl.depsBuf = make([]int, 0, max(n, 2*cap(pl.depsBuf), 16))
	}
	l := len(pl.depsBuf)
	pl.depsBuf = pl.depsBuf[:l+n]
	return pl.depsBuf[l : l+n : l+n]
}

// plan projects the records of a round in order into one write per
// document (stateful) or per operation.
func (w *Worker) plan(ctx context.Context, recs []*worker.Record) *roundPlan {
	pl := &roundPlan{out: make([]worker.BatchResult, len(recs)), deps: make([][]int, len(recs)), noWrite: make([]bool, len(recs))}
	envs, failed := w.upcast(ctx, recs, pl)
	var st *DocState
	var byDoc map[docKey]int // stateful: document → its line
	if isStateful(w.spec.Projection) {
		st, byDoc = w.newDocState(len(recs)), make(map[docKey]int, len(recs))
		w.readRound(ctx, st, envs, failed)
	}
	for i := range recs {
		if failed[i] {
			continue // its result is the failed upcast
		}
		if st != nil {
			st.begin()
		}
		its, o, err := w.prepare(ctx, envs.at(i), st, pl.its)
		if its != nil {
			pl.its = its[:0]
		}
		if err == nil && its != nil && st != nil {
			// The swap's base is the version the round read, whatever the
			// projection put in the op: a write of a document it read is
			// always conditional on that document being unchanged.
			for j := range its {
				if d, ok := st.read[docKey{its[j].Op.Scope, its[j].Op.ID}]; ok && !its[j].Op.Create {
					its[j].Op.Version = d.Version + 1
				}
			}
		}
		if err == nil && its != nil {
			var enc [][]byte
			if enc, err = w.encodeRound(its, pl, byDoc); err != nil {
				err = worker.Permanent(err) // a document that is not JSON
			} else {
				pl.deps[i] = w.place(its, enc, pl, byDoc)
			}
		}
		if err != nil {
			if st != nil {
				st.rollback()
			}
			pl.out[i] = worker.BatchResult{Outcome: o, Err: err}
			continue
		}
		if st != nil {
			if its == nil {
				// Nothing to write, decided from the round's state: it
				// stands only once what the round wrote is stored.
				for _, k := range st.touched {
					if j, ok := byDoc[k]; ok && !slices.Contains(pl.deps[i], j) {
						pl.deps[i] = append(pl.deps[i], j)
					}
				}
				pl.noWrite[i] = pl.deps[i] != nil
			}
			st.commit()
		}
		pl.out[i] = worker.BatchResult{Outcome: o}
	}
	if st != nil {
		w.encodeStates(st, pl, len(recs))
	}
	return pl
}

// encodeStates builds the round's writes of documents whose operation is
// the round's state (Op.FromState): each is encoded once, now, from the
// state its round's last event left. A state that cannot be encoded holds
// the effects of all the events that wrote the document, and the
// projection promised it would encode: the round writes nothing, and each
// event that wrote or relied on a write is run again in a round of its own
// (errRunAlone), where the one that causes it fails alone (Permanent).
func (w *Worker) encodeStates(st *DocState, pl *roundPlan, records int) {
	var failed error
	for l := range pl.items {
		it := &pl.items[l]
		if !it.Op.FromState {
			continue
		}
		src, err := st.source(docKey{it.Op.Scope, it.Op.ID})
		if err == nil {
			it.Op.Doc = src
			pl.lines[l], err = encodeItem(*it)
		}
		if err != nil {
			failed = err
			break
		}
	}
	if failed == nil {
		return
	}
	for i, d := range pl.deps {
		if d == nil || pl.out[i].Err != nil {
			continue
		}
		if records == 1 {
			pl.out[i] = worker.BatchResult{Err: worker.Permanent(failed)}
		} else {
			pl.out[i] = worker.BatchResult{Err: worker.Retryable(fmt.Errorf("%s: %w: %w", w.spec.Projection.Name(), errRunAlone, failed))}
		}
		pl.deps[i] = nil
	}
	pl.lines, pl.items = nil, nil
}

// readRound reads the documents of a round's events with one _mget when
// the projection names them from the events alone (Locator; a
// RoundLocator keeps what it computed in st for ProjectState). A failure
// leaves them to be read one by one.
func (w *Worker) readRound(ctx context.Context, st *DocState, envs roundEnvs, failed []bool) {
	loc, ok := w.spec.Projection.(Locator)
	if !ok {
		return
	}
	rl, round := loc.(RoundLocator)
	var refs []DocRef
	for i := range failed {
		e := envs.at(i)
		if failed[i] || !w.spec.Projection.Handles(e) {
			continue
		}
		var r []DocRef
		var err error
		if round {
			r, err = rl.LocateRound(e, st)
		} else {
			r, err = loc.Locate(e)
		}
		if err == nil {
			refs = append(refs, r...)
		}
	}
	if err := st.prefetch(ctx, refs); err != nil {
		w.log.Debug("projectionworker: reading the round's documents at once failed; reading them one by one", "err", err)
	}
}

// encodeRound encodes one record's items (but those of the round's state,
// Op.FromState: encodeStates, their lines are nil) into pl.enc, which it
// returns; a stateful write of a document the round writes already
// carries that write's version.
func (w *Worker) encodeRound(its []BulkItem, pl *roundPlan, byDoc map[docKey]int) ([][]byte, error) {
	enc := slices.Grow(pl.enc[:0], len(its))[:len(its)]
	clear(enc)
	pl.enc = enc
	for j := range its {
		if byDoc != nil {
			if l, ok := byDoc[docKey{its[j].Op.Scope, its[j].Op.ID}]; ok {
				its[j].Op.Version = pl.items[l].Op.Version
			}
		}
		if its[j].Op.FromState {
			if byDoc == nil {
				return nil, fmt.Errorf("projectionworker: operation on %s: FromState needs a Stateful projection", its[j].Op.ID)
			}
			continue // encoded once the round's last event is projected (encodeStates)
		}
		var err error
		if enc[j], err = encodeItem(its[j]); err != nil {
			return nil, err
		}
	}
	return enc, nil
}

// place adds one record's encoded items to the round and returns their
// lines: a stateful write replaces the round's earlier write of the same
// document (its state contains that write's effects).
func (w *Worker) place(its []BulkItem, enc [][]byte, pl *roundPlan, byDoc map[docKey]int) []int {
	lines := pl.depLines(len(its))
	for j, it := range its {
		if byDoc != nil {
			k := docKey{it.Op.Scope, it.Op.ID}
			if l, ok := byDoc[k]; ok {
				pl.lines[l], pl.items[l] = enc[j], it
				lines[j] = l
				continue
			}
			byDoc[k] = len(pl.lines)
		}
		lines[j] = len(pl.lines)
		pl.lines = append(pl.lines, enc[j])
		pl.items = append(pl.items, it)
	}
	return lines
}

// round plans the records, writes the plan and settles each record.
func (w *Worker) round(ctx context.Context, recs []*worker.Record) []worker.BatchResult {
	pl := w.plan(ctx, recs)
	if len(pl.lines) == 0 {
		return pl.out
	}
	w.hit(PointBeforeESWrite)
	esStart := time.Now()
	res, err := w.bulk.doLines(ctx, pl.lines)
	if recs[0].Span != nil {
		spans := make([]trace.Span, 0, len(recs))
		for i, rec := range recs {
			if pl.deps[i] != nil {
				spans = append(spans, rec.Span)
			}
		}
		tracing.Stage(spans, "elasticsearch bulk", esStart, time.Now(), err)
	}
	if err != nil {
		err = worker.Classified(ctx, failure.Elasticsearch, err)
		for i := range recs {
			if pl.deps[i] != nil {
				pl.out[i].Err = err
			}
		}
		return pl.out
	}
	w.hit(PointAfterESWrite)
	w.lineEffects(pl.items, res)
	sharers := make([]int, len(pl.lines))
	for i := range recs {
		if pl.out[i].Err == nil {
			for _, l := range pl.deps[i] {
				sharers[l]++
			}
		}
	}
	var items []BulkItem
	var rs []ItemResult
	for i := range recs {
		d := pl.deps[i]
		if d == nil || pl.out[i].Err != nil {
			continue
		}
		// A folded write refused for good holds the effects of several
		// events, and one of them caused it: each is run again alone, so
		// that only that one is dead-lettered; an event that only read
		// the refused state is projected again.
		if slices.ContainsFunc(d, func(l int) bool { return refused(res[l]) && (sharers[l] > 1 || pl.noWrite[i]) }) {
			pl.out[i] = worker.BatchResult{Err: worker.Retryable(fmt.Errorf("%s: %w", w.spec.Projection.Name(), errRunAlone))}
			continue
		}
		items, rs = items[:0], rs[:0] // evaluate keeps neither
		for _, l := range d {
			items, rs = append(items, pl.items[l]), append(rs, res[l])
		}
		o, err := w.evaluate(items, rs, pl.noWrite[i])
		if err == nil && pl.noWrite[i] {
			o = pl.out[i].Outcome
		}
		pl.out[i] = worker.BatchResult{Outcome: o, Err: err}
	}
	return pl.out
}

// Upcasting is a projection that reads events in another form than
// stored: a declarative projection with `upcast: latest`, or a Go
// projection that wants the same (docs/schemas.md#upcasting-on-read). The
// worker asks it once per event it handles, before Locate and Project;
// the record itself (and so a dead letter) keeps the stored form.
type Upcasting interface {
	Upcast(ctx context.Context, e envelope.Envelope) (envelope.Envelope, error)
}

// roundEnvs are the envelopes of a round's records as the projection
// reads them: the records' own, unless the projection upcasts (up).
type roundEnvs struct {
	recs []*worker.Record
	up   []envelope.Envelope
}

// at is the envelope of record i.
func (r roundEnvs) at(i int) envelope.Envelope {
	if r.up != nil {
		return r.up[i]
	}
	return r.recs[i].Envelope
}

// upcast returns the envelopes of recs as the projection reads them, and
// which ones failed (their result is set in pl): a failed upcast is the
// event's own (Permanent: its dead letter names the upcaster and the
// reason), unless the schema registry is out (an outage: the worker
// pauses; no attempt is spent). A projection that does not upcast reads
// the records' envelopes (no copy).
func (w *Worker) upcast(ctx context.Context, recs []*worker.Record, pl *roundPlan) (roundEnvs, []bool) {
	failed := make([]bool, len(recs))
	up, ok := w.spec.Projection.(Upcasting)
	if !ok {
		return roundEnvs{recs: recs}, failed
	}
	envs := make([]envelope.Envelope, len(recs))
	for i, rec := range recs {
		envs[i] = rec.Envelope
		if !w.spec.Projection.Handles(rec.Envelope) {
			continue
		}
		e, err := up.Upcast(ctx, rec.Envelope)
		if err != nil {
			failed[i] = true
			pl.out[i] = worker.BatchResult{Err: classifyProjectionErr(ctx, err)}
			continue
		}
		envs[i] = e
	}
	return roundEnvs{recs: recs, up: envs}, failed
}

// classifyProjectionErr classifies an error of a projection: the event's
// own (Permanent), but for a schema registry that cannot be read (an
// outage of Postgres).
func classifyProjectionErr(ctx context.Context, err error) error {
	var ue *schema.UnavailableError
	if errors.As(err, &ue) && ctx.Err() == nil {
		return worker.Outage(failure.Postgres, err)
	}
	return worker.Permanent(err)
}

// prepare projects one event into its bulk items (index names resolved,
// indices ensured), appended to buf[:0]. nil items with a nil error:
// finished without a write (the returned outcome).
func (w *Worker) prepare(ctx context.Context, e envelope.Envelope, st *DocState, buf []BulkItem) ([]BulkItem, claim.Outcome, error) {
	p := w.spec.Projection
	if !p.Handles(e) {
		return nil, claim.Ignored(), nil
	}
	var ops []Op
	var err error
	if sp, ok := p.(Stateful); ok {
		ops, err = sp.ProjectState(ctx, e, st)
		if err != nil && isLoadError(err) {
			return nil, claim.Outcome{}, worker.Classified(ctx, failure.Elasticsearch, err)
		}
	} else {
		ops, err = p.Project(e)
	}
	if err != nil {
		return nil, claim.Outcome{}, classifyProjectionErr(ctx, err)
	}
	if len(ops) == 0 {
		return nil, claim.Ignored(), nil
	}
	items := slices.Grow(buf[:0], len(ops))
	for _, op := range ops {
		ix, err := w.validIndex(ctx, op.Scope)
		if err != nil {
			return nil, claim.Outcome{}, err
		}
		items = append(items, BulkItem{Index: ix, Op: op})
	}
	return items, claim.Outcome{}, nil
}

// evaluate turns the answers to one event's items into its outcome.
// dependent: the items are not the event's own writes but the round's
// writes its no-write decision rests on; they are not counted for it.
// The answers' side effects (conflict counts, a lost index) are the
// round's, once per item (lineEffects).
func (w *Worker) evaluate(items []BulkItem, res []ItemResult, dependent bool) (claim.Outcome, error) {
	p := w.spec.Projection
	count := func(c *prometheus.CounterVec, labels ...string) {
		if !dependent {
			c.WithLabelValues(labels...).Inc()
		}
	}
	conflicts, reason := 0, ReasonVersion
	var transient, permanent, outage error
	for i, r := range res {
		switch {
		case r.OK():
		case r.Conflict():
			conflicts++
			if items[i].Op.Create {
				reason = ReasonExists
			}
		case r.Transient():
			err := fmt.Errorf("elasticsearch item %s/%s: %w", items[i].Index, items[i].Op.ID,
				&readmodel.StatusError{Op: "bulk item", Status: r.Status, Type: r.Type, Reason: r.Reason})
			if failure.Classify(context.Background(), err) == failure.Outage {
				outage = err // 429, 502, 503, 504: the cluster is overloaded or out
			} else {
				transient = err
			}
		case r.Status == http.StatusNotFound:
			transient = fmt.Errorf("elasticsearch item %s/%s: %d %s: %s", items[i].Index, items[i].Op.ID, r.Status, r.Type, r.Reason)
		default:
			permanent = fmt.Errorf("elasticsearch item %s/%s: %d %s: %s", items[i].Index, items[i].Op.ID, r.Status, r.Type, r.Reason)
		}
	}
	switch {
	case permanent != nil:
		count(w.m.items, p.Name(), "rejected")
		return claim.Outcome{}, worker.Permanent(permanent)
	case outage != nil:
		count(w.m.items, p.Name(), "retry")
		return claim.Outcome{}, worker.Outage(failure.Elasticsearch, outage)
	case transient != nil:
		count(w.m.items, p.Name(), "retry")
		return claim.Outcome{}, worker.Retryable(transient)
	case conflicts > 0 && isStateful(p):
		// Another worker wrote the document since it was read: project
		// the event again on the new state.
		count(w.m.items, p.Name(), "retry")
		return claim.Outcome{}, worker.Retryable(fmt.Errorf("%s: %w", p.Name(), errDocChanged))
	case conflicts == len(res):
		count(w.m.items, p.Name(), "conflict")
		return claim.Outcome{}, worker.ConflictErr(reason, nil)
	}
	count(w.m.items, p.Name(), "applied")
	return claim.Applied(), nil
}

// lineEffects acts once per item of a round on its answer: a 409 is
// counted (sluice_projection_conflicts_total), a 404 — the index was
// deleted under the worker — makes the scope be ensured again and is
// reported (Worker.onLost).
func (w *Worker) lineEffects(items []BulkItem, res []ItemResult) {
	for i, r := range res {
		switch {
		case r.Conflict():
			w.m.conflicts.WithLabelValues(w.spec.Projection.Name(), reasonFor(items[i].Op)).Inc()
		case !r.OK() && !r.Transient() && r.Status == http.StatusNotFound:
			w.ensuredMu.Lock()
			delete(w.ensured, items[i].Op.Scope) // index vanished: ensure again
			w.ensuredMu.Unlock()
			if w.onLost != nil {
				w.onLost(items[i].Op.Scope, fmt.Sprintf("elasticsearch item %s/%s: %d %s: %s", items[i].Index, items[i].Op.ID, r.Status, r.Type, r.Reason))
			}
		}
	}
}

// refused reports whether an item answer is a refusal retrying cannot fix
// (what evaluate calls permanent).
func refused(r ItemResult) bool {
	return !r.OK() && !r.Conflict() && !r.Transient() && r.Status != http.StatusNotFound
}

func reasonFor(op Op) string {
	if op.Create {
		return ReasonExists
	}
	return ReasonVersion
}

// validIndex is index for a scope a projection named in an Op: one that
// does not match ValidateName is the event's own error (Permanent). An
// ensured scope is not matched again: every caller of index validated it.
func (w *Worker) validIndex(ctx context.Context, scope string) (string, error) {
	if ix, ok := w.ensuredIndex(scope); ok {
		return ix, nil
	}
	if err := ValidateName(scope); err != nil {
		return "", worker.Permanent(err)
	}
	return w.index(ctx, scope)
}

// index creates scope's concrete index of this version once per process
// (idempotent across processes) and returns its name. scope must have
// passed ValidateName.
func (w *Worker) index(ctx context.Context, scope string) (string, error) {
	if ix, ok := w.ensuredIndex(scope); ok {
		return ix, nil
	}
	w.ensMu.Lock()
	defer w.ensMu.Unlock()
	if ix, ok := w.ensuredIndex(scope); ok {
		return ix, nil
	}
	n := IndexNames(w.prefix, scope, w.spec.Projection.Name(), w.spec.Version)
	err := createIndex(ctx, w.es, n, w.spec.Projection.Template(), w.spec.Mode)
	w.bulk.Availability().Observe(ctx, err)
	if err != nil {
		return "", worker.Classified(ctx, failure.Elasticsearch, err)
	}
	w.ensuredMu.Lock()
	w.ensured[scope] = n.Index
	w.ensuredMu.Unlock()
	return n.Index, nil
}

func (w *Worker) ensuredIndex(scope string) (string, bool) {
	w.ensuredMu.RLock()
	defer w.ensuredMu.RUnlock()
	ix, ok := w.ensured[scope]
	return ix, ok
}

// createIndex creates n.Index unless it exists. Live: with the read and
// write aliases when the write alias does not exist yet, and then (index
// new or not) claimAliases. Rebuild: refresh off, no replicas, no aliases.
func createIndex(ctx context.Context, es *elasticsearch.Client, n Names, t Template, mode Mode) error {
	res, err := es.Indices.Exists([]string{n.Index}, es.Indices.Exists.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("index %s exists: %w", n.Index, err)
	}
	res.Body.Close()
	if res.StatusCode == http.StatusOK {
		if mode == Live {
			return claimAliases(ctx, es, n, t)
		}
		return nil
	}
	if res.StatusCode != http.StatusNotFound {
		return &ESError{Op: "index exists", Status: res.StatusCode}
	}
	settings := map[string]any{}
	for k, v := range t.Settings {
		settings[k] = v
	}
	body := map[string]any{"mappings": t.Mappings}
	switch mode {
	case Rebuilding:
		settings["refresh_interval"] = "-1"
		settings["number_of_replicas"] = 0
	case Live:
		ares, err := es.Indices.ExistsAlias([]string{n.WriteAlias}, es.Indices.ExistsAlias.WithContext(ctx))
		if err != nil {
			return fmt.Errorf("alias %s exists: %w", n.WriteAlias, err)
		}
		ares.Body.Close()
		if ares.StatusCode == http.StatusNotFound {
			read := map[string]any{}
			if t.ReadFilter != nil {
				read["filter"] = t.ReadFilter
			}
			body["aliases"] = map[string]any{n.ReadAlias: read, n.WriteAlias: map[string]any{"is_write_index": true}}
		}
	}
	body["settings"] = settings
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	cres, err := es.Indices.Create(n.Index, es.Indices.Create.WithContext(ctx), es.Indices.Create.WithBody(bytes.NewReader(b)))
	if err != nil {
		return fmt.Errorf("create index %s: %w", n.Index, err)
	}
	defer cres.Body.Close()
	if cres.IsError() {
		ee := readmodel.NewStatusError("create index", cres.StatusCode, cres.Body)
		if ee.Type != "resource_already_exists_exception" {
			return ee
		}
	} else {
		_, _ = io.Copy(io.Discard, cres.Body)
	}
	if mode == Live {
		return claimAliases(ctx, es, n, t)
	}
	return nil
}

// claimAliases makes a live worker's index the target of its scope's read
// and write aliases when they are missing or point at a lower version of
// the projection, in one atomic _aliases request; aliases on a higher
// version are left alone (this worker is the old one, about to follow the
// live version). It closes the rebuild's swap race: a scope whose first
// event arrived while `projection rebuild` swapped the aliases got its
// aliases on the old version from the old live worker and an index of the
// new version without them; the worker that follows the swap moves them.
func claimAliases(ctx context.Context, es *elasticsearch.Client, n Names, t Template) error {
	res, err := es.Indices.GetAlias(es.Indices.GetAlias.WithContext(ctx), es.Indices.GetAlias.WithName(n.WriteAlias, n.ReadAlias))
	if err != nil {
		return fmt.Errorf("aliases of %s: %w", n.Index, err)
	}
	defer res.Body.Close()
	holders := map[string]map[string]json.RawMessage{} // index → alias → definition
	switch {
	case res.StatusCode == http.StatusNotFound:
		_, _ = io.Copy(io.Discard, res.Body)
	case res.IsError():
		return readmodel.NewStatusError("get alias", res.StatusCode, res.Body)
	default:
		var body map[string]struct {
			Aliases map[string]json.RawMessage `json:"aliases"`
		}
		if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
			return fmt.Errorf("aliases of %s: %w", n.Index, err)
		}
		for ix, v := range body {
			holders[ix] = v.Aliases
		}
	}
	ours := versionOf(n, n.Index)
	var actions []map[string]any
	needRead, needWrite := true, true
	for ix, aliases := range holders {
		for alias := range aliases {
			if alias != n.ReadAlias && alias != n.WriteAlias {
				continue
			}
			if ix == n.Index {
				needRead, needWrite = needRead && alias != n.ReadAlias, needWrite && alias != n.WriteAlias
				continue
			}
			if v := versionOf(n, ix); v == 0 || v > ours {
				return nil // a newer (or foreign) index holds it: not ours to move
			}
			actions = append(actions, map[string]any{"remove": map[string]any{"index": ix, "alias": alias}})
		}
	}
	if !needRead && !needWrite && len(actions) == 0 {
		return nil
	}
	read := map[string]any{"index": n.Index, "alias": n.ReadAlias}
	if t.ReadFilter != nil {
		read["filter"] = t.ReadFilter
	}
	actions = append(actions, map[string]any{"add": read},
		map[string]any{"add": map[string]any{"index": n.Index, "alias": n.WriteAlias, "is_write_index": true}})
	b, err := json.Marshal(map[string]any{"actions": actions})
	if err != nil {
		return err
	}
	ures, err := es.Indices.UpdateAliases(bytes.NewReader(b), es.Indices.UpdateAliases.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("move aliases to %s: %w", n.Index, err)
	}
	defer ures.Body.Close()
	if ures.IsError() {
		return readmodel.NewStatusError("update aliases", ures.StatusCode, ures.Body)
	}
	_, _ = io.Copy(io.Discard, ures.Body)
	return nil
}

// versionOf returns the version of index ix of the scope named by n
// ({read alias}_v{N}), or 0 when ix is not one of them.
func versionOf(n Names, ix string) int {
	rest, ok := strings.CutPrefix(ix, n.ReadAlias+"_v")
	if !ok {
		return 0
	}
	v, err := strconv.Atoi(rest)
	if err != nil || v <= 0 {
		return 0
	}
	return v
}

// ESError is a non-2xx answer of Elasticsearch to an index-management
// request: readmodel's StatusError.
type ESError = readmodel.StatusError

type metrics struct {
	conflicts *prometheus.CounterVec
	items     *prometheus.CounterVec
	bulks     *prometheus.CounterVec
	bulkDur   *prometheus.HistogramVec
	bulkSize  prometheus.Histogram
}

func newMetrics(r prometheus.Registerer) *metrics {
	return &metrics{
		conflicts: register(r, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_projection_conflicts_total",
			Help: "Elasticsearch 409s of projection writes, once per write: already applied or stale (stateless projections, treated as success), or a document another worker changed (stateful, projected again)."}, []string{"projection", "reason"})),
		items: register(r, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_projection_events_total",
			Help: "Projected events by result (applied, conflict, retry, rejected)."}, []string{"projection", "result"})),
		bulks: register(r, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_projection_bulk_requests_total",
			Help: "Bulk requests by result (ok, error)."}, []string{"result"})),
		bulkDur: register(r, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_projection_bulk_duration_seconds",
			Help: "Duration of bulk requests.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"result"})),
		bulkSize: register(r, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_projection_bulk_items",
			Help: "Items per bulk request.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)})),
	}
}

// zero creates, at 0, the series of every projection in projections (by
// result and conflict reason) and of both bulk results, so that dashboards
// and increase() alerts see them before the first event (issue 23.5).
func (m *metrics) zero(projections []string) {
	for _, p := range projections {
		for _, r := range []string{"applied", "conflict", "retry", "rejected"} {
			m.items.WithLabelValues(p, r)
		}
		for _, r := range []string{ReasonExists, ReasonVersion} {
			m.conflicts.WithLabelValues(p, r)
		}
	}
	for _, r := range []string{"ok", "error"} {
		m.bulks.WithLabelValues(r)
		m.bulkDur.WithLabelValues(r)
	}
}

// observeBulk is the Bulker's Observe hook.
func (m *metrics) observeBulk(items int, d interface{ Seconds() float64 }, err error) {
	res := "ok"
	if err != nil {
		res = "error"
	}
	m.bulks.WithLabelValues(res).Inc()
	m.bulkDur.WithLabelValues(res).Observe(d.Seconds())
	m.bulkSize.Observe(float64(items))
}

// register registers c, or returns the collector registered before.
func register[C prometheus.Collector](r prometheus.Registerer, c C) C {
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(C); ok {
				return old
			}
		}
	}
	return c
}
