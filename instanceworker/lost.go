package instanceworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
)

// A lost read model (docs/instanceworker.md#read-model-lost): the instance
// documents of a db are rebuilt from the event store when the worker finds
// its index missing, empty or clearly short at start-up, or a write is
// answered 404 while it runs.

// RebuildStore is what rebuilding an instances index needs of the event
// store (*eventstore.Store has it): the aggregates of a db page by page,
// their domain streams a page at a time, and the count of instances per db.
type RebuildStore interface {
	Aggregates(ctx context.Context, q eventstore.AggregateQuery) ([]eventstore.AggregateInfo, error)
	Streams(ctx context.Context, aggregateType string, ids []string, kind envelope.Kind) ([][]eventstore.Event, error)
	CountAggregatesByPart(ctx context.Context, aggType, sep string, kind envelope.Kind) (map[string]int64, error)
	SampleAggregates(ctx context.Context, aggType string, kind envelope.Kind, n int) ([]string, error)
	AggregatesEstimate(ctx context.Context) (float64, error)
}

// ExactBelow is the store size (aggregates, the planner's estimate) below
// which the start-up check counts every instance per db, as exact as it is
// cheap; above it, it samples (StartupSample).
const ExactBelow = 200_000

// minSampled is the fewest sampled instances of a db for which the 10%
// rule is applied; with fewer, only a missing or empty index is lost.
const minSampled = 20

// StartupSample is how many instances the start-up check reads from the
// store (at random) and looks up in their indices: the check costs the
// same with 10 thousand and 10 million instances.
const StartupSample = 2000

// rebuildPage is how many aggregates a rebuild reads (one index query and
// the coalesced segment reads) and writes (one _bulk) at a time.
const rebuildPage = 200

// DefaultRebuildProgressEvery is how often a rebuild logs its progress.
const DefaultRebuildProgressEvery = 5 * time.Second

// ShortFraction: an index is clearly short when more than 1/ShortFraction
// of the instances the store knows have no document (ShortIndex).
const ShortFraction = 10

// ShortIndex is the rule that decides that db's instances index was lost
// (docs/instanceworker.md#read-model-lost): want is the number of instance
// aggregates of the db with at least one domain event that were looked up
// (the start-up check's random sample of the store), docs how many of them
// have a document in the write alias (tombstones included; exists false
// when the alias is missing). The index is lost when the store has
// instances and the alias is missing, holds none of them, or fewer than
// want − want/ShortFraction (more than 10% missing: a few documents a
// crash left unwritten, or a stale read model, do not trigger it).
func ShortIndex(want, docs int64, exists bool) (bool, string) {
	switch {
	case want <= 0:
		return false, ""
	case !exists:
		return true, fmt.Sprintf("no instances index while the store has %d instances", want)
	case docs <= 0:
		return true, fmt.Sprintf("the instances index holds no document while the store has %d instances", want)
	case (want-docs)*ShortFraction > want:
		return true, fmt.Sprintf("the instances index holds %d documents while the store has %d instances (more than 1/%d missing)", docs, want, ShortFraction)
	}
	return false, ""
}

// RebuildProgress is the state of a running rebuild.
type RebuildProgress struct {
	DB string
	// Total is the number of instances of the db the store counted at the
	// start; Done how many were read and written so far.
	Total, Done int64
	// Written documents, Current ones (the document already held that
	// slot or a newer one — intact, or the live worker got there first:
	// left out of the bulk after the page's _mget, or answered 409), Failed ones
	// (refused by Elasticsearch: the read model of those stays stale).
	Written, Current, Failed int64
	Elapsed                  time.Duration
}

// RebuildIndex rewrites every instance document of db from the event store
// into the db's write alias (created when missing): for each page of
// instance aggregates, one read of their domain streams (Store.Streams) and
// one _bulk of the folded documents (storedDocument, as Repair writes one),
// each with version = its last domain slot, version_type external. The
// documents already at that slot or a newer one (one real-time _mget per
// page: behind) are left out of the bulk, so a rebuild of an index that
// lost only a few documents sends only those. A document the live worker
// wrote meanwhile at the same or a newer slot answers 409 and stays: a
// rebuild never moves a document backwards, so it is safe next to a
// running worker. progress (optional) is called about
// every Config.RebuildProgressEvery and at the end.
func (w *Worker) RebuildIndex(ctx context.Context, db string, progress func(RebuildProgress)) (RebuildProgress, error) {
	st := RebuildProgress{DB: db}
	store, ok := w.store.(RebuildStore)
	if !ok {
		return st, errors.New("instanceworker: rebuild: the store cannot list aggregates")
	}
	if err := envelope.ValidateDBName(db); err != nil {
		return st, fmt.Errorf("instanceworker: rebuild: %w", err)
	}
	start := time.Now()
	every := w.cfg.RebuildProgressEvery
	report := func() {
		st.Elapsed = time.Since(start)
		if progress != nil {
			progress(st)
		}
	}
	counts, err := store.CountAggregatesByPart(ctx, envelope.AggregateTypeInstance, ":", envelope.KindDomain)
	if err != nil {
		return st, fmt.Errorf("instanceworker: rebuild %s: %w", db, err)
	}
	st.Total = counts[db]
	w.ensured.Delete(db)
	n, err := w.names(ctx, db)
	if err != nil {
		return st, fmt.Errorf("instanceworker: rebuild %s: %w", db, err)
	}
	last := time.Now()
	prefix := db + ":"
	after := ""
	for {
		page, err := store.Aggregates(ctx, eventstore.AggregateQuery{Type: envelope.AggregateTypeInstance, Prefix: prefix,
			After: after, Limit: rebuildPage, Kind: envelope.KindDomain})
		if err != nil {
			return st, fmt.Errorf("instanceworker: rebuild %s: %w", db, err)
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].ID
		ids := make([]string, 0, len(page))
		for _, a := range page {
			if a.LastSeq > 0 { // commands only: no instance
				ids = append(ids, a.ID)
			}
		}
		streams, err := store.Streams(ctx, envelope.AggregateTypeInstance, ids, envelope.KindDomain)
		if err != nil {
			return st, fmt.Errorf("instanceworker: rebuild %s: %w", db, err)
		}
		ws := make([]readmodel.Write, 0, len(ids))
		for i, id := range ids {
			if len(streams[i]) == 0 {
				continue
			}
			_, class, iid, err := envelope.ParseInstanceAggregateID(id)
			if err != nil {
				return st, fmt.Errorf("instanceworker: rebuild %s: %w", db, err)
			}
			meta, state := storedDocument(db, class, iid, streams[i])
			ws = append(ws, readmodel.Write{Names: n, Meta: meta, State: state})
		}
		if err := w.rebuildWrite(ctx, ws, &st); err != nil {
			return st, fmt.Errorf("instanceworker: rebuild %s: %w", db, err)
		}
		st.Done += int64(len(ws))
		if time.Since(last) >= every {
			last = time.Now()
			report()
		}
	}
	report()
	return st, nil
}

// rebuildWrite writes one page of a rebuild. A failure of the whole
// request (an outage, after ESRetry) is waited out with a capped backoff
// until ctx ends; an item answered 404 (the index was deleted again) gets
// the index ensured (recoverIndex: a deletion after this rebuild ensured
// it makes the rebuild run once more) and is sent once more; other
// refused items are counted as failed and logged.
func (w *Worker) rebuildWrite(ctx context.Context, ws []readmodel.Write, st *RebuildProgress) error {
	ws, current := w.behind(ctx, ws)
	st.Current += current
	if len(ws) == 0 {
		return nil
	}
	wait := readmodel.Retry{Base: 200 * time.Millisecond, Cap: 5 * time.Second}
	var res []readmodel.WriteItem
	var sent uint64
	for try := 0; ; try++ {
		var err error
		sent = w.generation(st.DB)
		res, err = w.writeInstances(ctx, ws)
		if err == nil {
			break
		}
		w.log.Warn("read model rebuild: Elasticsearch refused a page; retrying", "db", st.DB, "err", err)
		if serr := wait.Sleep(ctx, try); serr != nil {
			return err
		}
	}
	var again []int
	for k, r := range res {
		if lostIndex(r.Err) {
			again = append(again, k)
		}
	}
	if len(again) > 0 {
		if _, err := w.recoverIndex(ctx, st.DB, sent, res[again[0]].Err); err != nil {
			return err
		}
		sub := make([]readmodel.Write, len(again))
		for j, k := range again {
			sub[j] = ws[k]
		}
		r2, err := w.writeInstances(ctx, sub)
		if err != nil {
			return err
		}
		for j, k := range again {
			res[k] = r2[j]
		}
	}
	for k, r := range res {
		switch {
		case r.Err != nil:
			st.Failed++
			if st.Failed <= 10 {
				w.log.Error("read model rebuild: document not written; its read model stays stale",
					"db", st.DB, "class", ws[k].Meta.Class, "instance_id", ws[k].Meta.InstanceID, "err", r.Err)
			}
		case r.Result == readmodel.AlreadyApplied:
			st.Current++
		default:
			st.Written++
		}
	}
	return nil
}

// behind returns the writes of a rebuild page whose document is missing or
// holds an older slot (one real-time _mget), and how many it left out: a
// document already at the write's slot or a newer one is current, and
// sending its write again would only be answered 409 — a finished write
// sent again. When the _mget fails (after ESRetry) every write is kept:
// they are versioned, so the bulk stays safe.
func (w *Worker) behind(ctx context.Context, ws []readmodel.Write) ([]readmodel.Write, int64) {
	if len(ws) == 0 {
		return ws, 0
	}
	refs := make([]readmodel.Ref, len(ws))
	for k, wr := range ws {
		refs[k] = readmodel.Ref{Names: wr.Names, Class: wr.Meta.Class, InstanceID: wr.Meta.InstanceID}
	}
	got, err := w.readInstances(ctx, refs)
	if err != nil {
		return ws, 0
	}
	out := make([]readmodel.Write, 0, len(ws))
	for k, wr := range ws {
		if got[k].Err == nil && got[k].Meta.SequenceNumber >= wr.Meta.SequenceNumber {
			continue
		}
		out = append(out, wr)
	}
	return out, int64(len(ws) - len(out))
}

// lostIndex reports whether err is a write answered 404: with require_alias
// the write alias is gone (its index deleted under the worker).
func lostIndex(err error) bool {
	var se *readmodel.StatusError
	return errors.As(err, &se) && se.Status == http.StatusNotFound
}

// rebuilds are the background rebuilds of a Worker: the shared scheduler
// (readmodel.Rebuilds, at most one per db at a time; one asked for while
// one runs makes it run once more after), and the rebuilds found needed
// whose index could not be ensured yet.
type rebuilds struct {
	sched readmodel.Rebuilds
	mu    sync.Mutex
	// need: db → why, a rebuild found needed whose index could not be
	// ensured yet (recoverIndex failed); names starts it once the index
	// exists again, so that a later attempt does not recreate the index
	// silently, empty.
	need map[string]string
}

// generation counts the times db's index was ensured (names asked
// Elasticsearch) in this process. A write answered 404 that was sent at an
// older generation than the current one was in flight while the index was
// created again: it is sent again without starting another rebuild.
func (w *Worker) generation(db string) uint64 { return w.gen(db).Load() }

func (w *Worker) gen(db string) *atomic.Uint64 {
	g, _ := w.gens.LoadOrStore(db, new(atomic.Uint64))
	return g.(*atomic.Uint64)
}

// generations is generation for every db of ws.
func (w *Worker) generations(ws []readmodel.Write) map[string]uint64 {
	out := map[string]uint64{}
	for _, x := range ws {
		if _, ok := out[x.Meta.DB]; !ok {
			out[x.Meta.DB] = w.generation(x.Meta.DB)
		}
	}
	return out
}

// needRebuild remembers that db's index must be rebuilt (startNeeded).
func (w *Worker) needRebuild(db, why string) {
	r := &w.rb
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.need == nil {
		r.need = map[string]string{}
	}
	r.need[db] = why
}

// startNeeded starts the rebuild of db if one is needed (needRebuild).
func (w *Worker) startNeeded(db string) {
	r := &w.rb
	r.mu.Lock()
	why, ok := r.need[db]
	delete(r.need, db)
	r.mu.Unlock()
	if ok {
		w.startRebuild(db, why)
	}
}

// serveRebuilds lets the worker start background rebuilds under ctx until
// the returned stop is called; stop cancels them and waits.
func (w *Worker) serveRebuilds(ctx context.Context) (stop func()) { return w.rb.sched.Serve(ctx) }

// startRebuild rebuilds db's index in the background (RebuildIndex),
// logging `read model missing; rebuilding` with why, progress every
// RebuildProgressEvery, and the result. Without a running Service it only
// logs what to do.
func (w *Worker) startRebuild(db, why string) {
	if !w.rb.sched.Start(db, why, func(ctx context.Context, why string) { w.rebuildLogged(ctx, db, why) }) {
		w.log.Error("instance index lost; rebuild it: restart the instance worker", "db", db, "reason", why)
	}
}

// rebuildLogged is RebuildIndex with its logs.
func (w *Worker) rebuildLogged(ctx context.Context, db, why string) {
	log := w.log.With("db", db)
	log.Warn("read model missing; rebuilding", "reason", why)
	var lastDone int64
	lastAt := time.Now()
	st, err := w.RebuildIndex(ctx, db, func(p RebuildProgress) {
		rate := 0.0
		if dt := time.Since(lastAt).Seconds(); dt > 0 {
			rate = float64(p.Done-lastDone) / dt
		}
		lastDone, lastAt = p.Done, time.Now()
		log.Info("read model rebuild", "instances", p.Done, "total", p.Total, "written", p.Written, "current", p.Current,
			"failed", p.Failed, "instances_per_s", fmt.Sprintf("%.0f", rate), "elapsed", p.Elapsed.Round(time.Millisecond))
	})
	if err != nil {
		if ctx.Err() == nil {
			log.Error("read model rebuild failed: restart the instance worker to try again", "err", err)
		}
		return
	}
	log.Info("read model rebuilt", "instances", st.Done, "written", st.Written, "current", st.Current, "failed", st.Failed,
		"elapsed", st.Elapsed.Round(time.Millisecond))
}

// recoverIndex handles a document write answered 404 for db while running,
// sent when db's index was at generation sent: the index (or its write
// alias) was deleted under the worker. It creates the index and its
// aliases again now (so the write can be repeated) and starts the rebuild
// of the db's documents from the store — unless the index was ensured
// again since the write was sent (a newer generation: the write was in
// flight while another write, or the rebuild itself, recreated it), when
// the write is only to be repeated. It returns the generation to send the
// repeated write at. When the index cannot be ensured now, the rebuild
// stays needed and starts when it is (names).
func (w *Worker) recoverIndex(ctx context.Context, db string, sent uint64, cause error) (uint64, error) {
	w.recoverMu.Lock()
	defer w.recoverMu.Unlock()
	if g := w.generation(db); g > sent {
		return g, nil
	}
	w.needRebuild(db, "a document write was answered 404 (the index was deleted): "+cause.Error())
	w.ensured.Delete(db)
	if _, err := w.names(ctx, db); err != nil {
		return 0, err
	}
	w.startNeeded(db) // names did unless another caller had ensured it
	return w.generation(db), nil
}

// checkLost is the start-up check (docs/instanceworker.md#read-model-lost):
// when the worker has done work (registry done rows or committed offsets
// of its group), a random sample of at most StartupSample instances with a
// domain event is drawn from the store (bounded: no count of the whole
// store), their documents are looked up in their dbs' write aliases (one
// _mget per db), and a db whose alias is missing, or where ShortIndex
// finds too many of its sampled instances without a document, is rebuilt
// in the background. An Elasticsearch that is not ready (transient
// failures, after ESRetry) is waited for with a capped backoff until ctx
// ends, as an outage is everywhere in the workers: skipping the db would
// let the first command create its index again, empty, and nothing would
// rebuild it.
func (s *Service) checkLost(ctx context.Context, cl *kgo.Client) {
	store, ok := s.worker.store.(RebuildStore)
	if !ok {
		return
	}
	worked, err := s.hasWorked(ctx, cl)
	if err != nil {
		s.log.Warn("instance worker: read model check failed", "err", err)
		return
	}
	if !worked {
		return // a fresh deployment
	}
	est, err := store.AggregatesEstimate(ctx)
	if err != nil {
		s.log.Warn("instance worker: read model check failed", "err", err)
		return
	}
	if est < 0 || est < ExactBelow {
		s.checkLostExact(ctx, store)
		return
	}
	ids, err := store.SampleAggregates(ctx, envelope.AggregateTypeInstance, envelope.KindDomain, StartupSample)
	if err != nil {
		s.log.Warn("instance worker: read model check failed", "err", err)
		return
	}
	sample := map[string][]readmodel.Ref{}
	for _, id := range ids {
		db, class, iid, err := envelope.ParseInstanceAggregateID(id)
		if err != nil || envelope.ValidateDBName(db) != nil {
			continue
		}
		sample[db] = append(sample[db], readmodel.Ref{Class: class, InstanceID: iid})
	}
	for _, db := range slices.Sorted(maps.Keys(sample)) {
		found, exists, err := s.worker.waitSampleDocs(ctx, db, sample[db])
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("instance worker: read model check failed", "db", db, "err", err)
			}
			continue
		}
		want := int64(len(sample[db]))
		if want < minSampled && found > 0 {
			continue // too few sampled for the 10% rule: only a missing or empty index counts
		}
		if lost, why := ShortIndex(want, found, exists); lost {
			s.worker.startRebuild(db, why+" (of a random sample of the store)")
		}
	}
}

// checkLostExact is the start-up check of a small store: the instances
// per db counted (one grouped query) against each db's document count.
func (s *Service) checkLostExact(ctx context.Context, store RebuildStore) {
	want, err := store.CountAggregatesByPart(ctx, envelope.AggregateTypeInstance, ":", envelope.KindDomain)
	if err != nil {
		s.log.Warn("instance worker: read model check failed", "err", err)
		return
	}
	for _, db := range slices.Sorted(maps.Keys(want)) {
		if envelope.ValidateDBName(db) != nil {
			continue
		}
		docs, exists, err := s.worker.waitSampleDocs(ctx, db, nil)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("instance worker: read model check failed", "db", db, "err", err)
			}
			continue
		}
		if lost, why := ShortIndex(want[db], docs, exists); lost {
			s.worker.startRebuild(db, why)
		}
	}
}

// hasWorked reports whether the instance worker has done work: a done row
// of its registry handler, or an offset committed by its group.
func (s *Service) hasWorked(ctx context.Context, cl *kgo.Client) (bool, error) {
	done, err := s.reg.HasDone(ctx, HandlerName)
	if err != nil || done {
		return done, err
	}
	group := s.cfg.Kafka.Group(GroupName)
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return false, fmt.Errorf("offsets of %s: %w", group, err)
	}
	committed := false
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At > 0 {
			committed = true
		}
	})
	return committed, nil
}

// waitSampleDocs is sampleDocs through esDo (ESRetry, Availability), its
// transient failures waited out with a capped backoff, logged, until it
// answers or ctx ends.
func (w *Worker) waitSampleDocs(ctx context.Context, db string, refs []readmodel.Ref) (found int64, exists bool, err error) {
	wait := readmodel.Retry{Base: 200 * time.Millisecond, Cap: 5 * time.Second}
	for n := 0; ; n++ {
		err = w.esDo(ctx, func(ctx context.Context) (err error) {
			found, exists, err = sampleDocs(ctx, w, db, refs)
			return err
		})
		if err == nil || !readmodel.Transient(ctx, err) {
			return found, exists, err
		}
		w.log.Warn("instance worker: Elasticsearch unavailable for the read model check; waiting for it", "db", db, "err", err)
		if serr := wait.Sleep(ctx, n); serr != nil {
			return 0, false, err
		}
	}
}

// sampleDocs counts how many of refs have a document in db's write alias
// (one _mget), and whether the alias exists (a _count of it); with refs
// nil it returns the alias's document count.
func sampleDocs(ctx context.Context, w *Worker, db string, refs []readmodel.Ref) (found int64, exists bool, err error) {
	docs, exists, err := countDocs(ctx, w, db)
	if err != nil || !exists || docs == 0 || refs == nil {
		return docs, exists, err // refs nil: the document count is the answer
	}
	n := readmodel.InstanceNames(w.cfg.Elasticsearch.IndexPrefix, db, w.cfg.IndexVersion)
	for i := range refs {
		refs[i].Names = n
	}
	res, err := readmodel.GetInstances(ctx, w.es, refs)
	if err != nil {
		return 0, true, err
	}
	for _, r := range res {
		switch {
		case r.Err == nil:
			found++
		case !errors.Is(r.Err, readmodel.ErrNotFound):
			return 0, true, r.Err
		}
	}
	return found, true, nil
}

func countDocs(ctx context.Context, w *Worker, db string) (docs int64, exists bool, err error) {
	n := readmodel.InstanceNames(w.cfg.Elasticsearch.IndexPrefix, db, w.cfg.IndexVersion)
	es := w.es
	res, err := es.Count(es.Count.WithContext(ctx), es.Count.WithIndex(n.WriteAlias))
	if err != nil {
		return 0, false, fmt.Errorf("count %s: %w", n.WriteAlias, err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotFound {
		_, _ = io.Copy(io.Discard, res.Body)
		return 0, false, nil
	}
	if res.IsError() {
		return 0, false, readmodel.NewStatusError("count", res.StatusCode, res.Body)
	}
	var c struct {
		Count int64 `json:"count"`
	}
	if err := json.NewDecoder(res.Body).Decode(&c); err != nil {
		return 0, false, fmt.Errorf("count %s: %w", n.WriteAlias, err)
	}
	return c.Count, true, nil
}
