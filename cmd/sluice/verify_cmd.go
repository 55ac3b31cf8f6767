package main

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
	"text/tabwriter"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/readmodel"
)

// exitVerifyDiffers is the exit code of `sluice verify` when the event store
// and Elasticsearch disagree.
const exitVerifyDiffers = 4

// Verify statuses of one instance.
const (
	verifyOK       = "ok"
	verifyMissing  = "missing"  // the store has the instance, Elasticsearch has no document
	verifyStale    = "stale"    // the document's sequence_number is below the store's last domain slot
	verifyExtra    = "extra"    // a document of the class the store does not know
	verifyMismatch = "mismatch" // same slot but different deleted flag, event_id or state, or ES ahead of the store
)

// verifyItem is one instance that is not ok.
type verifyItem struct {
	InstanceID string `json:"instance_id"`
	Status     string `json:"status"`
	StoreSeq   int64  `json:"store_seq"`
	ESSeq      int64  `json:"es_seq"`
	Reason     string `json:"reason,omitempty"`
}

// verifyReport is the result of `sluice verify` (its --json output).
type verifyReport struct {
	DB         string       `json:"db"`
	Class      string       `json:"class"`
	Index      string       `json:"index"`
	Instances  int          `json:"instances"`
	OK         int          `json:"ok"`
	Missing    int          `json:"missing"`
	Stale      int          `json:"stale"`
	Extra      int          `json:"extra"`
	Mismatch   int          `json:"mismatch"`
	Problems   []verifyItem `json:"problems"`
	DurationMS int64        `json:"duration_ms"`
}

func (r *verifyReport) add(it verifyItem) {
	r.Instances++
	switch it.Status {
	case verifyOK:
		r.OK++
		return
	case verifyMissing:
		r.Missing++
	case verifyStale:
		r.Stale++
	case verifyExtra:
		r.Extra++
	case verifyMismatch:
		r.Mismatch++
	}
	r.Problems = append(r.Problems, it)
}

func (r *verifyReport) summary() string {
	return fmt.Sprintf("verify: %d instances, %d ok, %d missing, %d stale, %d extra, %d mismatched", r.Instances, r.OK, r.Missing, r.Stale, r.Extra, r.Mismatch)
}

func newVerifyCmd() *cobra.Command {
	var db, class string
	var version, concurrency int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Compare the event store with Elasticsearch for a db/class: missing, stale, extra or mismatched instance documents",
		Long: `sluice verify reads every instance aggregate of a db/class from the event store's
index, reads its last domain event (the state of the highest applied slot) and compares it
with the instance document in Elasticsearch ({prefix}{db}_instances write alias):

  missing   the store has the instance, Elasticsearch has no document
  stale     the document's sequence_number is below the store's last domain slot
  extra     Elasticsearch has a document of the class the store does not know
  mismatch  same slot, but a different deleted flag, event_id or state; or the document
            is ahead of the store

Candidates for missing and stale are re-checked with a real-time GET. On a running
pipeline, recent commands may show as stale until the instance worker catches up: re-run.
Exit code 0 when everything matches, 4 when anything differs.`,
		Example: `  sluice verify --db shop --class orders
  sluice verify --db shop --class orders --json | jq .problems`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := envelope.ValidateDBName(db); err != nil {
				return fmt.Errorf("--db: %w", err)
			}
			if err := envelope.ValidateClassName(class); err != nil {
				return fmt.Errorf("--class: %w", err)
			}
			cfg, logger, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			pool, err := openPool(cmd, cfg)
			if err != nil {
				return err
			}
			defer pool.Close()
			bucket, err := backend.Open(ctx, cfg.EventStore)
			if err != nil {
				return err
			}
			st, err := eventstore.New(pool, bucket, eventstore.Options{Config: cfg.EventStore, Logger: logger})
			if err != nil {
				return err
			}
			defer func() { _ = st.Close() }()
			es, err := readmodel.NewClient(cfg.Elasticsearch)
			if err != nil {
				return err
			}
			v := &verifier{pool: pool, store: st, es: es, db: db, class: class,
				names: readmodel.InstanceNames(cfg.Elasticsearch.IndexPrefix, db, version), concurrency: max(concurrency, 1)}
			rep, err := v.run(ctx, func(total int64) *progress {
				return newProgress(cmd, total, fmt.Sprintf("verify %s/%s", db, class), "aggregates")
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				if len(rep.Problems) > 0 {
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "STATUS\tINSTANCE_ID\tSTORE_SEQ\tES_SEQ\tREASON")
					for _, p := range rep.Problems {
						fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", p.Status, p.InstanceID, p.StoreSeq, p.ESSeq, p.Reason)
					}
					_ = tw.Flush()
				}
				fmt.Fprintln(out, rep.summary())
			}
			if len(rep.Problems) > 0 {
				return &exitError{code: exitVerifyDiffers, err: errors.New(rep.summary())}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&db, "db", "", "database name (required)")
	f.StringVar(&class, "class", "", "class name (required)")
	f.IntVar(&version, "index-version", readmodel.DefaultVersion, "instances index version")
	f.IntVar(&concurrency, "concurrency", 8, "parallel event-store reads")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	_ = cmd.MarkFlagRequired("db")
	_ = cmd.MarkFlagRequired("class")
	return cmd
}

// verifier compares one db/class.
type verifier struct {
	pool        *pgxpool.Pool
	store       *eventstore.Store
	es          *elasticsearch.Client
	names       readmodel.Names
	db, class   string
	concurrency int
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

const verifyPage = 500

// run compares the store with the index; newBar makes the progress bar
// over the number of aggregates (nil: no bar).
func (v *verifier) run(ctx context.Context, newBar func(total int64) *progress) (*verifyReport, error) {
	start := time.Now()
	rep := &verifyReport{DB: v.db, Class: v.class, Index: v.names.WriteAlias, Problems: []verifyItem{}}
	prefix := v.db + ":" + v.class + ":"
	like := escapeLike(prefix) + "%"
	var total int64
	if err := v.pool.QueryRow(ctx, `SELECT count(*) FROM sluice.sequences WHERE aggregate_type = $1 AND aggregate_id LIKE $2 ESCAPE '\'`,
		envelope.AggregateTypeInstance, like).Scan(&total); err != nil {
		return nil, fmt.Errorf("verify: count aggregates: %w", err)
	}
	docs, err := v.scanES(ctx)
	if err != nil {
		return nil, err
	}
	prog := newBar(total)
	after := ""
	for {
		rows, err := v.pool.Query(ctx, `SELECT s.aggregate_id,
				(SELECT max(a.sequence_number) FROM sluice.appends a
				 WHERE a.aggregate_type = s.aggregate_type AND a.aggregate_id = s.aggregate_id
				   AND a.kind = 'domain' AND a.state = 'committed')
			FROM sluice.sequences s
			WHERE s.aggregate_type = $1 AND s.aggregate_id LIKE $2 ESCAPE '\' AND s.aggregate_id > $3
			ORDER BY s.aggregate_id LIMIT $4`, envelope.AggregateTypeInstance, like, after, verifyPage)
		if err != nil {
			return nil, fmt.Errorf("verify: list aggregates: %w", err)
		}
		type agg struct {
			id  string
			seq *int64
		}
		var page []agg
		for rows.Next() {
			var a agg
			if err := rows.Scan(&a.id, &a.seq); err != nil {
				rows.Close()
				return nil, fmt.Errorf("verify: list aggregates: %w", err)
			}
			page = append(page, a)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("verify: list aggregates: %w", err)
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].id
		// Read the last domain event of each aggregate, in parallel.
		insts := make([]*storeInst, len(page))
		errs := make([]error, len(page))
		sem := make(chan struct{}, v.concurrency)
		var wg sync.WaitGroup
		for i, a := range page {
			if a.seq == nil {
				continue // commands only (all rejected or pending): no instance yet
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				insts[i], errs[i] = v.readLast(ctx, a.id, strings.TrimPrefix(a.id, prefix), *a.seq)
			}()
		}
		wg.Wait()
		for i := range page {
			if errs[i] != nil {
				return nil, errs[i]
			}
			prog.add(1)
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
		rep.add(verifyItem{InstanceID: id, Status: verifyExtra, ESSeq: d.meta.SequenceNumber, Reason: "no domain event in the event store"})
	}
	prog.finish()
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
	in := &storeInst{instanceID: instanceID, seq: seq, eventID: e.EventID, deleted: e.EventType == instanceworker.InstanceDeleted}
	if !in.deleted {
		if in.stateHash, err = stateHash(e.Data); err != nil {
			return nil, fmt.Errorf("verify: %s slot %d: %w", aggID, seq, err)
		}
	}
	return in, nil
}

// compare classifies one store instance against its scanned document;
// missing and stale candidates are re-checked with a real-time GET (the
// scan goes through search, which may lag a refresh behind).
func (v *verifier) compare(ctx context.Context, in *storeInst, d esDoc, found bool) (verifyItem, error) {
	if !found || d.meta.SequenceNumber < in.seq {
		meta, state, err := readmodel.GetInstance(ctx, v.es, v.names, v.class, in.instanceID)
		switch {
		case errors.Is(err, readmodel.ErrNotFound):
			return verifyItem{InstanceID: in.instanceID, Status: verifyMissing, StoreSeq: in.seq, Reason: "no document"}, nil
		case err != nil:
			return verifyItem{}, fmt.Errorf("verify: get %s: %w", in.instanceID, err)
		}
		d = esDoc{meta: meta}
		if d.stateHash, err = stateHash(state); err != nil {
			return verifyItem{}, err
		}
	}
	it := verifyItem{InstanceID: in.instanceID, Status: verifyOK, StoreSeq: in.seq, ESSeq: d.meta.SequenceNumber}
	switch {
	case d.meta.SequenceNumber < in.seq:
		it.Status, it.Reason = verifyStale, fmt.Sprintf("document at slot %d, store at %d", d.meta.SequenceNumber, in.seq)
	case d.meta.SequenceNumber > in.seq:
		it.Status, it.Reason = verifyMismatch, fmt.Sprintf("document at slot %d is ahead of the store (%d)", d.meta.SequenceNumber, in.seq)
	case d.meta.Deleted != in.deleted:
		it.Status, it.Reason = verifyMismatch, fmt.Sprintf("deleted: store %t, document %t", in.deleted, d.meta.Deleted)
	case d.meta.EventID != in.eventID:
		it.Status, it.Reason = verifyMismatch, fmt.Sprintf("event_id: store %s, document %s", in.eventID, d.meta.EventID)
	case !in.deleted && d.stateHash != in.stateHash:
		it.Status, it.Reason = verifyMismatch, "state differs"
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
			"sort":  []any{map[string]any{"instance_id": "asc"}},
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

// escapeLike escapes the LIKE metacharacters of s (escape character \).
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// opProgress prints a throttled progress bar (one line per update, so it
// reads well in logs too) to the operator's stderr.
type opProgress struct {
	mu      sync.Mutex
	w       io.Writer
	label   string
	unit    string
	total   int64
	n       int64
	last    time.Time
	every   time.Duration
	started time.Time
}

func newOpProgress(w io.Writer, label string, total int64, unit string) *opProgress {
	now := time.Now()
	return &opProgress{w: w, label: label, unit: unit, total: total, every: time.Second, last: now, started: now}
}

func (p *opProgress) add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += n
	if time.Since(p.last) >= p.every {
		p.print()
	}
}

func (p *opProgress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.print()
}

func (p *opProgress) print() {
	p.last = time.Now()
	elapsed := time.Since(p.started).Round(time.Millisecond)
	if p.total <= 0 {
		fmt.Fprintf(p.w, "%s: %d %s (%s)\n", p.label, p.n, p.unit, elapsed)
		return
	}
	const width = 30
	frac := min(float64(p.n)/float64(p.total), 1)
	filled := int(frac * width)
	fmt.Fprintf(p.w, "%s [%s%s] %d/%d %s %3.0f%% (%s)\n", p.label, strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		p.n, p.total, p.unit, frac*100, elapsed)
}
