package instanceworker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/elastic/go-elasticsearch/v8"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Verify statuses of one instance (docs/operator-commands.md, "verify").
const (
	VerifyOK       = "ok"
	VerifyMissing  = "missing"  // the store has the instance, Elasticsearch has no document
	VerifyStale    = "stale"    // the document's sequence_number is below the store's last domain slot
	VerifyExtra    = "extra"    // a document of the class the store does not know
	VerifyMismatch = "mismatch" // same slot but different deleted flag, event_id or state, or ES ahead of the store
)

// VerifyItem is one instance that is not ok.
type VerifyItem struct {
	InstanceID string `json:"instance_id"`
	Status     string `json:"status"`
	StoreSeq   int64  `json:"store_seq"`
	ESSeq      int64  `json:"es_seq"`
	Reason     string `json:"reason,omitempty"`
}

// VerifyReport is the result of Verify (`sluice verify --json`).
type VerifyReport struct {
	DB         string       `json:"db"`
	Class      string       `json:"class"`
	Index      string       `json:"index"`
	Instances  int          `json:"instances"`
	OK         int          `json:"ok"`
	Missing    int          `json:"missing"`
	Stale      int          `json:"stale"`
	Extra      int          `json:"extra"`
	Mismatch   int          `json:"mismatch"`
	Problems   []VerifyItem `json:"problems"`
	DurationMS int64        `json:"duration_ms"`
}

func (r *VerifyReport) add(it VerifyItem) {
	r.Instances++
	switch it.Status {
	case VerifyOK:
		r.OK++
		return
	case VerifyMissing:
		r.Missing++
	case VerifyStale:
		r.Stale++
	case VerifyExtra:
		r.Extra++
	case VerifyMismatch:
		r.Mismatch++
	}
	r.Problems = append(r.Problems, it)
}

// Summary is the report in one line.
func (r *VerifyReport) Summary() string {
	return fmt.Sprintf("verify: %d instances, %d ok, %d missing, %d stale, %d extra, %d mismatched", r.Instances, r.OK, r.Missing, r.Stale, r.Extra, r.Mismatch)
}

// VerifyOptions select what Verify compares.
type VerifyOptions struct {
	Store *eventstore.Store
	ES    *elasticsearch.Client
	// IndexPrefix is ELASTICSEARCH_INDEX_PREFIX.
	IndexPrefix string
	DB, Class   string
	// IndexVersion selects the instances index compared (VerifyIndex): 0,
	// the write alias (the live version); N > 0, the concrete index of
	// version N (one kept for rollback, or one being rebuilt).
	IndexVersion int
	// Concurrency of the event-store reads (default 8).
	Concurrency int
	// Progress, when set, is given the number of aggregates once (total)
	// and then told of each one compared.
	Progress func(done, total int64)
}

// verifyPage is the page size of the store listing and the ES scan.
const verifyPage = 500

// Verify compares the event store with Elasticsearch for one db/class:
// every instance aggregate's last domain event (the state of the highest
// applied slot) against its instance document in the {prefix}{db}_instances
// write alias. Candidates for missing and stale are re-checked with a
// real-time GET (the scan goes through search, which may lag a refresh).
// On a running pipeline recent commands may show as stale until the
// instance worker catches up. It reads aggregates and their streams, not
// the log by position, so it checks every shard of a sharded store.
func Verify(ctx context.Context, o VerifyOptions) (*VerifyReport, error) {
	if err := envelope.ValidateDBName(o.DB); err != nil {
		return nil, fmt.Errorf("db: %w", err)
	}
	if err := envelope.ValidateClassName(o.Class); err != nil {
		return nil, fmt.Errorf("class: %w", err)
	}
	target, err := VerifyIndex(o.IndexPrefix, o.DB, o.IndexVersion)
	if err != nil {
		return nil, err
	}
	// The scan and the real-time GETs read target: readmodel.GetInstance
	// reads a Names' write alias.
	v := &verifier{store: o.Store, es: o.ES, db: o.DB, class: o.Class,
		names: readmodel.Names{WriteAlias: target}, concurrency: max(o.Concurrency, 1), progress: o.Progress}
	if o.Concurrency == 0 {
		v.concurrency = 8
	}
	return v.run(ctx)
}

// VerifyIndex is the index or alias Verify compares a db's instances
// against: with version 0 the write alias of its instances index (the live
// version, wherever a rebuild moved it), else the concrete index of that
// version ({prefix}{db}_instances_v{N}). Before, a version was accepted
// and ignored: every verify read the write alias. A negative version is
// an error naming index_version.
func VerifyIndex(prefix, db string, version int) (string, error) {
	n := readmodel.InstanceNames(prefix, db, version)
	switch {
	case version < 0:
		return "", fmt.Errorf("index_version: must be 0 (the live version, through the write alias) or a version >= 1, got %d", version)
	case version == 0:
		return n.WriteAlias, nil
	}
	return n.Index, nil
}

// verifier compares one db/class.
type verifier struct {
	store       *eventstore.Store
	es          *elasticsearch.Client
	names       readmodel.Names
	db, class   string
	concurrency int
	progress    func(done, total int64)
}

// esDoc is what the scan keeps of one Elasticsearch document.
type esDoc struct {
	meta      readmodel.Meta
	stateHash [32]byte
}

// storeInst is the store's view of one instance: its last domain event.
type storeInst struct {
	instanceID string
	seq        int64
	eventID    string
	deleted    bool
	stateHash  [32]byte
}

func (v *verifier) run(ctx context.Context) (*VerifyReport, error) {
	start := time.Now()
	rep := &VerifyReport{DB: v.db, Class: v.class, Index: v.names.WriteAlias, Problems: []VerifyItem{}}
	prefix := v.db + ":" + v.class + ":"
	total, err := v.store.CountAggregates(ctx, envelope.AggregateTypeInstance, prefix)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	docs, err := v.scanES(ctx)
	if err != nil {
		return nil, err
	}
	var done int64
	tick := func() {
		done++
		if v.progress != nil {
			v.progress(done, total)
		}
	}
	after := ""
	for {
		page, err := v.store.Aggregates(ctx, eventstore.AggregateQuery{Type: envelope.AggregateTypeInstance, Prefix: prefix,
			After: after, Limit: verifyPage, Kind: envelope.KindDomain})
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].ID
		// Read the last domain event of each aggregate, in parallel.
		insts := make([]*storeInst, len(page))
		errs := make([]error, len(page))
		sem := make(chan struct{}, v.concurrency)
		var wg sync.WaitGroup
		for i, a := range page {
			if a.LastSeq == 0 {
				continue // commands only (all rejected or pending): no instance yet
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				insts[i], errs[i] = v.readLast(ctx, a.ID, strings.TrimPrefix(a.ID, prefix), a.LastSeq)
			}()
		}
		wg.Wait()
		for i := range page {
			if errs[i] != nil {
				return nil, errs[i]
			}
			tick()
			if insts[i] == nil {
				continue
			}
			in := insts[i]
			d, found := docs[in.instanceID]
			delete(docs, in.instanceID)
			it, err := v.compare(ctx, in, d, found)
			if err != nil {
				return nil, err
			}
			rep.add(it)
		}
	}
	extras := make([]string, 0, len(docs))
	for id := range docs {
		extras = append(extras, id)
	}
	sort.Strings(extras)
	for _, id := range extras {
		d := docs[id]
		rep.add(VerifyItem{InstanceID: id, Status: VerifyExtra, ESSeq: d.meta.SequenceNumber, Reason: "no domain event in the event store"})
	}
	rep.DurationMS = time.Since(start).Milliseconds()
	return rep, nil
}

// readLast reads the domain event at seq of aggregate aggID.
func (v *verifier) readLast(ctx context.Context, aggID, instanceID string, seq int64) (*storeInst, error) {
	evs, err := v.store.Stream(ctx, envelope.AggregateTypeInstance, aggID, seq, seq, envelope.KindDomain)
	if err != nil {
		return nil, fmt.Errorf("verify: read %s slot %d: %w", aggID, seq, err)
	}
	if len(evs) != 1 {
		return nil, fmt.Errorf("verify: read %s slot %d: %d domain events, want 1", aggID, seq, len(evs))
	}
	e := evs[0].Envelope
	in := &storeInst{instanceID: instanceID, seq: seq, eventID: e.EventID, deleted: e.EventType == InstanceDeleted}
	if !in.deleted {
		if in.stateHash, err = stateHash(e.Data); err != nil {
			return nil, fmt.Errorf("verify: %s slot %d: %w", aggID, seq, err)
		}
	}
	return in, nil
}

// compare classifies one store instance against its scanned document;
// missing and stale candidates are re-checked with a real-time GET.
func (v *verifier) compare(ctx context.Context, in *storeInst, d esDoc, found bool) (VerifyItem, error) {
	if !found || d.meta.SequenceNumber < in.seq {
		meta, state, err := readmodel.GetInstance(ctx, v.es, v.names, v.class, in.instanceID)
		switch {
		case errors.Is(err, readmodel.ErrNotFound):
			return VerifyItem{InstanceID: in.instanceID, Status: VerifyMissing, StoreSeq: in.seq, Reason: "no document"}, nil
		case err != nil:
			return VerifyItem{}, fmt.Errorf("verify: get %s: %w", in.instanceID, err)
		}
		d = esDoc{meta: meta}
		if d.stateHash, err = stateHash(state); err != nil {
			return VerifyItem{}, err
		}
	}
	it := VerifyItem{InstanceID: in.instanceID, Status: VerifyOK, StoreSeq: in.seq, ESSeq: d.meta.SequenceNumber}
	switch {
	case d.meta.SequenceNumber < in.seq:
		it.Status, it.Reason = VerifyStale, fmt.Sprintf("document at slot %d, store at %d", d.meta.SequenceNumber, in.seq)
	case d.meta.SequenceNumber > in.seq:
		it.Status, it.Reason = VerifyMismatch, fmt.Sprintf("document at slot %d is ahead of the store (%d)", d.meta.SequenceNumber, in.seq)
	case d.meta.Deleted != in.deleted:
		it.Status, it.Reason = VerifyMismatch, fmt.Sprintf("deleted: store %t, document %t", in.deleted, d.meta.Deleted)
	case d.meta.EventID != in.eventID:
		it.Status, it.Reason = VerifyMismatch, fmt.Sprintf("event_id: store %s, document %s", in.eventID, d.meta.EventID)
	case !in.deleted && d.stateHash != in.stateHash:
		it.Status, it.Reason = VerifyMismatch, "state differs"
	}
	return it, nil
}

// scanES reads every document of the class from the write alias (tombstones
// included), paging with search_after on instance_id.
func (v *verifier) scanES(ctx context.Context) (map[string]esDoc, error) {
	docs := map[string]esDoc{}
	var after []any
	for {
		body := map[string]any{
			"size":  verifyPage,
			"query": map[string]any{"term": map[string]any{"class": v.class}},
			"sort":  []any{map[string]any{"instance_id": map[string]any{"order": "asc", "unmapped_type": "keyword"}}},
		}
		if after != nil {
			body["search_after"] = after
		}
		b, _ := json.Marshal(body)
		res, err := v.es.Search(v.es.Search.WithContext(ctx), v.es.Search.WithIndex(v.names.WriteAlias), v.es.Search.WithBody(bytes.NewReader(b)))
		if err != nil {
			return nil, fmt.Errorf("verify: search %s: %w", v.names.WriteAlias, err)
		}
		if res.StatusCode == http.StatusNotFound {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			return docs, nil // no index yet: no documents
		}
		if res.IsError() {
			raw, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
			res.Body.Close()
			return nil, fmt.Errorf("verify: search %s: %d %s", v.names.WriteAlias, res.StatusCode, strings.TrimSpace(string(raw)))
		}
		var sr struct {
			Hits struct {
				Hits []struct {
					Source json.RawMessage `json:"_source"`
					Sort   []any           `json:"sort"`
				} `json:"hits"`
			} `json:"hits"`
		}
		err = json.NewDecoder(res.Body).Decode(&sr)
		res.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("verify: search %s: %w", v.names.WriteAlias, err)
		}
		for _, h := range sr.Hits.Hits {
			meta, state, err := readmodel.SplitDocument(h.Source)
			if err != nil {
				return nil, err
			}
			if meta.DB != "" && meta.DB != v.db {
				continue
			}
			d := esDoc{meta: meta}
			if d.stateHash, err = stateHash(state); err != nil {
				return nil, err
			}
			docs[meta.InstanceID] = d
		}
		if len(sr.Hits.Hits) < verifyPage {
			return docs, nil
		}
		after = sr.Hits.Hits[len(sr.Hits.Hits)-1].Sort
		if len(after) == 0 {
			return nil, errors.New("verify: search returned no sort values to page with")
		}
	}
}

// stateHash hashes a JSON object in a canonical form (keys sorted, numbers
// kept as written), so the event's data and the document's state compare
// equal regardless of key order.
func stateHash(state json.RawMessage) ([32]byte, error) {
	if len(bytes.TrimSpace(state)) == 0 {
		state = json.RawMessage(`{}`)
	}
	dec := json.NewDecoder(bytes.NewReader(state))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return [32]byte{}, fmt.Errorf("verify: state: %w", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return [32]byte{}, fmt.Errorf("verify: state: %w", err)
	}
	return sha256.Sum256(b), nil
}
