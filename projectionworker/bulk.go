package projectionworker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/failure"
)

// BulkItem is one operation addressed to a concrete index.
type BulkItem struct {
	Index string
	Op    Op
}

// ItemResult is Elasticsearch's answer to one bulk item.
type ItemResult = readmodel.BulkItemResult

// BulkOptions configure a Bulker.
type BulkOptions struct {
	// MaxDocs and MaxBytes bound one bulk request (ELASTICSEARCH_BULK_MAX_DOCS,
	// ELASTICSEARCH_BULK_MAX_BYTES, and their defaults).
	MaxDocs, MaxBytes int
	// Linger is how long a batch waits for more operations before it is
	// sent (default 2 ms). A full batch is sent at once.
	Linger time.Duration
	// ItemRetries is how often transient item failures (429, 5xx inside a
	// successful bulk response) are retried within one call before they are
	// returned (default 3). Failures of the whole request (an outage) are
	// retried until every waiter gave up.
	ItemRetries int
	// BackoffBase and BackoffCap shape the retries (defaults 50 ms, 5 s).
	BackoffBase, BackoffCap time.Duration
	// RequestTimeout bounds one bulk request (ELASTICSEARCH_REQUEST_TIMEOUT
	// and its default): a request past it is an outage, retried.
	RequestTimeout time.Duration
	// Availability receives the result of every bulk request (default: a
	// new one pinging the bulker's client); Check reports it.
	Availability *readmodel.Availability
	// Observe, when set, is told about every bulk request: items, duration,
	// error (nil on an HTTP 200).
	Observe func(items int, d time.Duration, err error)
}

// Bulker batches the operations of concurrent callers into bulk requests
// bounded by count and bytes, with refresh=false. Do returns only when
// Elasticsearch answered every item of the call, so a caller marks its
// record done only after its writes are durable.
type Bulker struct {
	es  *elasticsearch.Client
	o   BulkOptions
	mu  sync.Mutex
	cur *batch
}

// batch is one bulk request being filled.
type batch struct {
	lines   [][]byte // action+source lines per item
	bytes   int
	results []ItemResult
	waiters atomic.Int32 // callers still waiting
	sealed  bool
	done    chan struct{}
	err     error
}

// NewBulker returns a Bulker writing to es.
func NewBulker(es *elasticsearch.Client, o BulkOptions) *Bulker {
	def := readmodel.DefaultConfig() // the ELASTICSEARCH_* defaults
	if o.MaxDocs <= 0 {
		o.MaxDocs = def.BulkMaxDocs
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = def.BulkMaxBytes
	}
	if o.Linger <= 0 {
		o.Linger = 2 * time.Millisecond
	}
	if o.ItemRetries <= 0 {
		o.ItemRetries = 3
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = 50 * time.Millisecond
	}
	if o.BackoffCap <= 0 {
		o.BackoffCap = 5 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = def.RequestTimeout
	}
	if o.Availability == nil {
		o.Availability = &readmodel.Availability{ES: es}
	}
	return &Bulker{es: es, o: o}
}

// InOutage reports whether Elasticsearch is out: the last request failed
// as an outage (refused, reset, timed out, 429, 502, 503, 504) and none
// got an answer since.
func (b *Bulker) InOutage() bool {
	out, _ := b.o.Availability.Out()
	return out
}

// Availability is the bulker's view of Elasticsearch, shared with the
// workers using it (their index management reports to it too).
func (b *Bulker) Availability() *readmodel.Availability { return b.o.Availability }

// Check is a readiness check: red while Elasticsearch is out (the
// projections are paused), green again once it answers.
func (b *Bulker) Check(ctx context.Context) error { return b.o.Availability.Check(ctx) }

// encodeItem returns the NDJSON lines of one item.
func encodeItem(it BulkItem) ([]byte, error) {
	// The action line is built by hand (no map, no reflection, one
	// allocation): it is encoded once per operation on the hot path.
	// Invalid UTF-8 in the index or id becomes U+FFFD, as json.Marshal
	// wrote it; the quoted form differs from json.Marshal's only in not
	// escaping <, > and & for HTML, which JSON does not need.
	out := make([]byte, 0, len(it.Index)+len(it.Op.ID)+len(it.Op.Doc)+96)
	if it.Op.Create {
		out = append(out, `{"create":{"_index":`...)
	} else {
		out = append(out, `{"index":{"_index":`...)
	}
	out, _ = jsontext.AppendQuote(out, it.Index)
	out = append(out, `,"_id":`...)
	out, _ = jsontext.AppendQuote(out, it.Op.ID)
	if it.Op.Version > 0 {
		out = append(out, `,"version":`...)
		out = strconv.AppendInt(out, it.Op.Version, 10)
		out = append(out, `,"version_type":"external"`...)
	}
	out = append(out, "}}\n"...)
	// Compact: the document must be one line (custom projections may
	// return indented JSON); this also rejects invalid JSON. A document
	// the projection encoded compactly itself (Op.Compact) is copied.
	if it.Op.Compact {
		out = append(out, it.Op.Doc...)
	} else {
		buf := bytes.NewBuffer(out)
		if err := json.Compact(buf, it.Op.Doc); err != nil {
			return nil, fmt.Errorf("projectionworker: document of %s: %w", it.Op.ID, err)
		}
		out = buf.Bytes()
	}
	return append(out, '\n'), nil
}

// Do writes items (in one bulk request with other callers' items where
// possible) and returns one result per item. Transient item failures are
// retried ItemRetries times; an outage (the request fails as a whole) is
// retried until ctx ends. The error is non-nil only when ctx ended or an
// item could not be encoded.
func (b *Bulker) Do(ctx context.Context, items []BulkItem) ([]ItemResult, error) {
	lines := make([][]byte, len(items))
	for i, it := range items {
		l, err := encodeItem(it)
		if err != nil {
			return nil, err
		}
		lines[i] = l
	}
	return b.doLines(ctx, lines)
}

// doLines is Do for items already encoded with encodeItem.
func (b *Bulker) doLines(ctx context.Context, lines [][]byte) ([]ItemResult, error) {
	results := make([]ItemResult, len(lines))
	pending := make([]int, len(lines))
	for i := range pending {
		pending[i] = i
	}
	for try := 0; ; try++ {
		res, err := b.submit(ctx, lines, pending)
		if err != nil {
			return nil, err
		}
		var again []int
		for j, i := range pending {
			results[i] = res[j]
			if res[j].Transient() && try < b.o.ItemRetries {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			return results, nil
		}
		pending = again
		if err := b.retry().Sleep(ctx, try); err != nil {
			return nil, err
		}
	}
}

// submit adds the lines at idx to the current batch and waits for the
// batch's answer.
func (b *Bulker) submit(ctx context.Context, lines [][]byte, idx []int) ([]ItemResult, error) {
	var parts []struct {
		bt    *batch
		first int
		n     int
	}
	b.mu.Lock()
	var toFlush []*batch
	for k := 0; k < len(idx); {
		if b.cur == nil {
			nb := &batch{done: make(chan struct{})}
			b.cur = nb
			time.AfterFunc(b.o.Linger, func() { b.flush(nb) })
		}
		bt := b.cur
		first, n := len(bt.lines), 0
		for k < len(idx) {
			l := lines[idx[k]]
			if len(bt.lines) > 0 && (len(bt.lines) >= b.o.MaxDocs || bt.bytes+len(l) > b.o.MaxBytes) {
				break
			}
			bt.lines = append(bt.lines, l)
			bt.bytes += len(l)
			k++
			n++
		}
		if n > 0 {
			bt.waiters.Add(1)
			parts = append(parts, struct {
				bt    *batch
				first int
				n     int
			}{bt, first, n})
		}
		if len(bt.lines) >= b.o.MaxDocs || bt.bytes >= b.o.MaxBytes || k < len(idx) {
			b.cur = nil
			toFlush = append(toFlush, bt)
		}
	}
	b.mu.Unlock()
	for _, bt := range toFlush {
		go b.flush(bt)
	}
	out := make([]ItemResult, 0, len(idx))
	for pi, p := range parts {
		select {
		case <-p.bt.done:
		case <-ctx.Done():
			for _, q := range parts[pi:] {
				q.bt.waiters.Add(-1)
			}
			return nil, ctx.Err()
		}
		p.bt.waiters.Add(-1)
		if p.bt.err != nil {
			return nil, p.bt.err
		}
		out = append(out, p.bt.results[p.first:p.first+p.n]...)
	}
	return out, nil
}

// flush sends a batch (once), retrying whole-request failures while anyone
// waits for it.
func (b *Bulker) flush(bt *batch) {
	b.mu.Lock()
	if bt.sealed {
		b.mu.Unlock()
		return
	}
	bt.sealed = true
	if b.cur == bt {
		b.cur = nil
	}
	b.mu.Unlock()
	defer close(bt.done)
	for try := 0; ; try++ {
		res, err := b.sendLines(bt.lines)
		if err == nil {
			bt.results = res
			return
		}
		// An outage (or a 500): retried while anyone waits.
		if bt.waiters.Load() <= 0 {
			bt.err = fmt.Errorf("projectionworker: bulk abandoned: %w", err)
			return
		}
		time.Sleep(b.retry().Delay(try))
	}
}

// sendLines sends lines as one bulk request. When Elasticsearch refuses
// the request as a whole for a reason retrying cannot fix (a request-level
// 400 or 413: shared/failure Permanent), the lines are split in halves and
// sent again, down to single lines, so that only the items it refuses on
// their own get the refusal as their answer and the others are written
// (one bad item never dead-letters the events it was batched with). The
// error is a failure of a request as a whole that is not permanent (an
// outage, a 500).
func (b *Bulker) sendLines(lines [][]byte) ([]ItemResult, error) {
	start := time.Now()
	res, err := b.send(bytes.Join(lines, nil), len(lines))
	if b.o.Observe != nil {
		b.o.Observe(len(lines), time.Since(start), err)
	}
	if err != nil {
		b.o.Availability.Observe(context.Background(), err)
	} else {
		b.o.Availability.ObserveItems(context.Background(), itemOutage(res))
	}
	if err == nil || failure.Classify(context.Background(), err) != failure.Permanent {
		return res, err
	}
	if len(lines) == 1 {
		var se *readmodel.StatusError
		if !errors.As(err, &se) {
			return nil, err
		}
		return []ItemResult{{Status: se.Status, Type: se.Type, Reason: se.Reason}}, nil
	}
	h := len(lines) / 2
	first, err := b.sendLines(lines[:h])
	if err != nil {
		return nil, err
	}
	second, err := b.sendLines(lines[h:])
	if err != nil {
		return nil, err
	}
	return append(first, second...), nil
}

// itemOutage is the first item of a bulk answer refused as an outage (429,
// 502, 503, 504: the cluster is overloaded although it answers), or nil.
func itemOutage(res []ItemResult) error {
	for _, r := range res {
		if r.OK() || r.Conflict() {
			continue
		}
		ie := &readmodel.StatusError{Op: "bulk item", Status: r.Status, Type: r.Type, Reason: r.Reason}
		if failure.Classify(context.Background(), ie) == failure.Outage {
			return ie
		}
	}
	return nil
}

// send posts one bulk body under RequestTimeout and parses the per-item
// answers; a non-200 answer is a *readmodel.StatusError.
func (b *Bulker) send(body []byte, n int) ([]ItemResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.o.RequestTimeout)
	defer cancel()
	res, err := b.es.Bulk(bytes.NewReader(body), b.es.Bulk.WithContext(ctx), b.es.Bulk.WithRefresh("false"))
	if err != nil {
		return nil, fmt.Errorf("bulk: %w", err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("bulk: read answer: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return nil, readmodel.NewStatusError("bulk", res.StatusCode, bytes.NewReader(raw))
	}
	return readmodel.DecodeBulkItems(bytes.NewReader(raw), n)
}

// retry is the bulker's backoff (BackoffBase, BackoffCap).
func (b *Bulker) retry() readmodel.Retry {
	return readmodel.Retry{Tries: b.o.ItemRetries, Base: b.o.BackoffBase, Cap: b.o.BackoffCap}
}
