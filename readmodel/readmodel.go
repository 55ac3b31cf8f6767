// Package readmodel provides the Elasticsearch side of sluice's read models
// that several workers share (docs/projectionworker.md#bulk-writes): the instances projection's index
// naming, mappings and aliases, its document function (current state plus
// bookkeeping fields, tombstones on delete), the versioned write
// (version = sequence_number, version_type = external) and EnsureIndex.
//
// It keeps per-aggregate order (docs/architecture.md#per-aggregate-order): every instance document is written
// with the external version of the event's sequence number, so a late or
// repeated older write gets a 409 and can never overwrite newer state, and a
// delete is a versioned tombstone rather than a hard delete, so nothing older
// can resurrect the document.
package readmodel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/elastic/go-elasticsearch/v8"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/shared/envelope"
)

// Projection is the name of the instances projection; DefaultVersion its
// version.
const (
	Projection     = "instances"
	DefaultVersion = 1
)

// ReservedFields returns the top-level keys the document reserves: an
// instance's state must not use them (the instance worker rejects such
// commands).
func ReservedFields() []string {
	return []string{"db", "class", "instance_id", "sequence_number", "event_id", "created_at", "updated_at", "deleted"}
}

// IsReserved reports whether key is a reserved document field.
func IsReserved(key string) bool {
	for _, f := range ReservedFields() {
		if f == key {
			return true
		}
	}
	return false
}

// Names are the index and aliases of one db's instances read model.
type Names struct {
	// Index is the concrete index {prefix}{db}_instances_v{version}.
	Index string
	// ReadAlias is {prefix}{db}_instances, filtered to deleted:false.
	ReadAlias string
	// WriteAlias is {prefix}{db}_instances_write, pointing at the active
	// version (is_write_index).
	WriteAlias string
}

// InstanceNames returns the names for db at version (DefaultVersion when 0).
func InstanceNames(prefix, db string, version int) Names {
	if version <= 0 {
		version = DefaultVersion
	}
	base := prefix + db + "_" + Projection
	return Names{Index: base + "_v" + strconv.Itoa(version), ReadAlias: base, WriteAlias: base + "_write"}
}

// DocumentID returns the _id of an instance document: envelope.ESDocumentID
// of class + ":" + instance_id. The class is part of the id because one
// index holds every class of a db, and instance ids are unique only within a
// class.
func DocumentID(class, instanceID string) string {
	return envelope.ESDocumentID(class + ":" + instanceID)
}

// Mappings returns the index body (settings, mappings) of an instances index:
// the bookkeeping fields are mapped explicitly, the state dynamically.
func Mappings() map[string]any {
	kw := map[string]any{"type": "keyword"}
	return map[string]any{
		"settings": map[string]any{"number_of_shards": 1},
		"mappings": map[string]any{
			"dynamic": true,
			"properties": map[string]any{
				"db": kw, "class": kw, "instance_id": kw, "event_id": kw,
				"sequence_number": map[string]any{"type": "long"},
				"created_at":      map[string]any{"type": "date"},
				"updated_at":      map[string]any{"type": "date"},
				"deleted":         map[string]any{"type": "boolean"},
			},
		},
	}
}

// Meta is the bookkeeping part of an instance document.
type Meta struct {
	DB             string             `json:"db"`
	Class          string             `json:"class"`
	InstanceID     string             `json:"instance_id"`
	SequenceNumber int64              `json:"sequence_number"`
	EventID        string             `json:"event_id"`
	CreatedAt      envelope.Timestamp `json:"created_at"`
	UpdatedAt      envelope.Timestamp `json:"updated_at"`
	Deleted        bool               `json:"deleted"`
}

// NewClient returns a go-elasticsearch client for the configuration
// (ELASTICSEARCH_*). Every request it sends has a deadline of
// cfg.RequestTimeout (ELASTICSEARCH_REQUEST_TIMEOUT; none when 0), from the
// connect to the last byte of the answer: a cluster that accepts
// connections but never answers fails the request with
// context.DeadlineExceeded, an outage (failure.Classify), within one
// timeout. A path prefix in a URL keeps the requests' percent-encoding
// (PrefixEscaping).
func NewClient(cfg Config) (*elasticsearch.Client, error) {
	var tr http.RoundTripper = PrefixEscaping{Base: http.DefaultTransport.(*http.Transport).Clone()}
	if cfg.RequestTimeout > 0 {
		tr = DeadlineTransport{Base: tr, Timeout: cfg.RequestTimeout}
	}
	return elasticsearch.NewClient(elasticsearch.Config{
		Addresses: cfg.URLs, APIKey: cfg.APIKey.Value(), Username: cfg.Username, Password: cfg.Password.Value(),
		MaxRetries: 0, DisableRetry: true, Transport: tr,
	})
}

// StatusError is a non-2xx answer of Elasticsearch.
type StatusError struct {
	Op     string
	Status int
	Type   string
	Reason string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("elasticsearch %s: %d %s: %s", e.Op, e.Status, e.Type, e.Reason)
}

// HTTPStatus is the answer's status (failure.Classify reads it: 429, 502,
// 503, 504 are outages, other 4xx permanent).
func (e *StatusError) HTTPStatus() int { return e.Status }

// Retryable reports whether the failure is transient (429, 5xx).
func (e *StatusError) Retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// Conflict reports a version conflict (409).
func (e *StatusError) Conflict() bool { return e.Status == http.StatusConflict }

// NewStatusError reads a non-2xx answer of operation op (its error type and
// reason, or the body itself when it is not an Elasticsearch error).
func NewStatusError(op string, status int, body io.Reader) *StatusError {
	b, _ := io.ReadAll(io.LimitReader(body, 64<<10))
	var eb struct {
		Error struct {
			Type   string `json:"type"`
			Reason string `json:"reason"`
		} `json:"error"`
	}
	se := &StatusError{Op: op, Status: status}
	if json.Unmarshal(b, &eb) == nil && eb.Error.Type != "" {
		se.Type, se.Reason = eb.Error.Type, eb.Error.Reason
	} else {
		se.Reason = strings.TrimSpace(string(b))
	}
	return se
}

// EnsureIndex creates db's concrete instances index with its read alias
// (filter deleted:false) and write alias in one request, unless the write
// alias exists already. When the index exists but its write alias does
// not (the aliases alone were removed), the aliases are added to it again
// (one _aliases request): creating would answer
// resource_already_exists, and every write through the missing alias 404.
// Concurrent callers are safe.
func EnsureIndex(ctx context.Context, es *elasticsearch.Client, prefix, db string, version int) (Names, error) {
	n := InstanceNames(prefix, db, version)
	res, err := es.Indices.ExistsAlias([]string{n.WriteAlias}, es.Indices.ExistsAlias.WithContext(ctx))
	if err != nil {
		return n, fmt.Errorf("readmodel: alias %s: %w", n.WriteAlias, err)
	}
	res.Body.Close()
	if res.StatusCode == http.StatusOK {
		return n, nil
	}
	if res.StatusCode != http.StatusNotFound {
		return n, &StatusError{Op: "exists alias", Status: res.StatusCode}
	}
	readAlias := map[string]any{"filter": map[string]any{"term": map[string]any{"deleted": false}}}
	body := Mappings()
	body["aliases"] = map[string]any{
		n.ReadAlias:  readAlias,
		n.WriteAlias: map[string]any{"is_write_index": true},
	}
	b, _ := json.Marshal(body)
	cres, err := es.Indices.Create(n.Index, es.Indices.Create.WithContext(ctx), es.Indices.Create.WithBody(bytes.NewReader(b)))
	if err != nil {
		return n, fmt.Errorf("readmodel: create index %s: %w", n.Index, err)
	}
	defer cres.Body.Close()
	if cres.IsError() {
		se := NewStatusError("create index", cres.StatusCode, cres.Body)
		if se.Type == "resource_already_exists_exception" {
			return n, addAliases(ctx, es, n, readAlias)
		}
		return n, se
	}
	return n, nil
}

// addAliases points n's read alias (with its filter) and write alias at
// n.Index, in one atomic _aliases request (adding an alias that is there
// already changes nothing).
func addAliases(ctx context.Context, es *elasticsearch.Client, n Names, readAlias map[string]any) error {
	read := map[string]any{"index": n.Index, "alias": n.ReadAlias}
	for k, v := range readAlias {
		read[k] = v
	}
	b, _ := json.Marshal(map[string]any{"actions": []any{
		map[string]any{"add": read},
		map[string]any{"add": map[string]any{"index": n.Index, "alias": n.WriteAlias, "is_write_index": true}},
	}})
	res, err := es.Indices.UpdateAliases(bytes.NewReader(b), es.Indices.UpdateAliases.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("readmodel: aliases of %s: %w", n.Index, err)
	}
	defer res.Body.Close()
	if res.IsError() {
		return NewStatusError("update aliases", res.StatusCode, res.Body)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return nil
}

// WriteResult is what a versioned write did.
type WriteResult int

const (
	// Written: the document was created or replaced.
	Written WriteResult = iota + 1
	// AlreadyApplied: Elasticsearch answered 409, the document holds this
	// version or a newer one.
	AlreadyApplied
)

// WriteInstance writes an instance document through the write alias with
// version = m.SequenceNumber, version_type = external and require_alias. A 409
// is AlreadyApplied, not an error; other failures are *StatusError or
// transport errors.
func WriteInstance(ctx context.Context, es *elasticsearch.Client, n Names, m Meta, state json.RawMessage) (WriteResult, error) {
	body, err := Document(m, state)
	if err != nil {
		return 0, err
	}
	v := int(m.SequenceNumber)
	res, err := es.Index(n.WriteAlias, bytes.NewReader(body),
		es.Index.WithContext(ctx), es.Index.WithDocumentID(url.PathEscape(DocumentID(m.Class, m.InstanceID))),
		es.Index.WithVersion(v), es.Index.WithVersionType("external"), es.Index.WithRequireAlias(true))
	if err != nil {
		return 0, fmt.Errorf("readmodel: index document: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusConflict {
		_, _ = io.Copy(io.Discard, res.Body)
		return AlreadyApplied, nil
	}
	if res.IsError() {
		return 0, NewStatusError("index", res.StatusCode, res.Body)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return Written, nil
}

// ErrNotFound is returned by GetInstance when there is no document.
var ErrNotFound = errors.New("readmodel: no such document")

// GetInstance reads an instance document in real time through the write
// alias and splits it into Meta and state. A missing document or index is
// ErrNotFound.
func GetInstance(ctx context.Context, es *elasticsearch.Client, n Names, class, instanceID string) (Meta, json.RawMessage, error) {
	res, err := es.Get(n.WriteAlias, url.PathEscape(DocumentID(class, instanceID)), es.Get.WithContext(ctx), es.Get.WithRealtime(true))
	if err != nil {
		return Meta{}, nil, fmt.Errorf("readmodel: get document: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotFound {
		_, _ = io.Copy(io.Discard, res.Body)
		return Meta{}, nil, ErrNotFound
	}
	if res.IsError() {
		return Meta{}, nil, NewStatusError("get", res.StatusCode, res.Body)
	}
	var g struct {
		Found  bool            `json:"found"`
		Source json.RawMessage `json:"_source"`
	}
	if err := json.NewDecoder(res.Body).Decode(&g); err != nil {
		return Meta{}, nil, fmt.Errorf("readmodel: get document: %w", err)
	}
	if !g.Found {
		return Meta{}, nil, ErrNotFound
	}
	return SplitDocument(g.Source)
}

// Ref names one instance document of a batch read: the names of its db and
// its class and instance id.
type Ref struct {
	Names      Names
	Class      string
	InstanceID string
}

// GetResult is one answer of GetInstances: Err is ErrNotFound for a missing
// document or index, a *StatusError for another item failure, else nil with
// Meta and State set.
type GetResult struct {
	Meta  Meta
	State json.RawMessage
	Err   error
}

// GetInstances reads many instance documents in real time through their
// write aliases in one _mget request (Mget) and splits each into Meta and
// state; results are at the index of their ref. A failure of the whole
// request (transport, non-2xx) is returned as the error.
func GetInstances(ctx context.Context, es *elasticsearch.Client, refs []Ref) ([]GetResult, error) {
	out := make([]GetResult, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	docs := make([]DocAddr, len(refs))
	for i, r := range refs {
		docs[i] = DocAddr{Index: r.Names.WriteAlias, ID: DocumentID(r.Class, r.InstanceID)}
	}
	got, err := Mget(ctx, es, docs)
	if err != nil {
		return nil, err
	}
	var db DocBuilder
	for i, d := range got {
		switch {
		case d.Err != nil && d.Err.Type == "index_not_found_exception":
			out[i].Err = ErrNotFound
		case d.Err != nil:
			out[i].Err = d.Err
		case !d.Found:
			out[i].Err = ErrNotFound
		default:
			out[i].Meta, out[i].State, out[i].Err = db.Split(d.Source)
		}
	}
	return out, nil
}

// DocAddr names one document of an _mget: its index (or alias) and _id.
type DocAddr struct{ Index, ID string }

// MgetDoc is one answer of Mget: Found with the document's Source and
// Version, or not found, or Err, the item's own failure (Op "mget", Status
// 500, Elasticsearch's error type and reason).
type MgetDoc struct {
	Found   bool
	Version int64
	Source  json.RawMessage
	Err     *StatusError
}

// Mget reads docs in real time (realtime=true) in one _mget request: the
// one raw multi-get of the read models, under the instance worker's batch
// reads and the stateful projections' round reads. Answers are at the index
// of their doc. A failure of the whole request (transport, non-2xx, an
// answer count that differs) is the error; nothing is sent for no docs.
func Mget(ctx context.Context, es *elasticsearch.Client, docs []DocAddr) ([]MgetDoc, error) {
	if len(docs) == 0 {
		return nil, nil
	}
	var body bytes.Buffer
	body.WriteString(`{"docs":[`)
	for i, d := range docs {
		if i > 0 {
			body.WriteByte(',')
		}
		ix, _ := json.Marshal(d.Index)
		id, _ := json.Marshal(d.ID)
		body.WriteString(`{"_index":`)
		body.Write(ix)
		body.WriteString(`,"_id":`)
		body.Write(id)
		body.WriteByte('}')
	}
	body.WriteString(`]}`)
	res, err := es.Mget(&body, es.Mget.WithContext(ctx), es.Mget.WithRealtime(true))
	if err != nil {
		return nil, fmt.Errorf("readmodel: mget: %w", err)
	}
	defer res.Body.Close()
	if res.IsError() {
		return nil, NewStatusError("mget", res.StatusCode, res.Body)
	}
	var mr struct {
		Docs []struct {
			Found   bool           `json:"found"`
			Version int64          `json:"_version"`
			Source  jsontext.Value `json:"_source"`
			Error   *struct {
				Type   string `json:"type"`
				Reason string `json:"reason"`
			} `json:"error"`
		} `json:"docs"`
	}
	// encoding/json/v2's decoder, as DecodeBulkItems: the sources are
	// taken as raw values, without v1's second scan of each.
	if err := jsonv2.UnmarshalRead(res.Body, &mr, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)); err != nil {
		return nil, fmt.Errorf("readmodel: mget: %w", err)
	}
	if len(mr.Docs) != len(docs) {
		return nil, fmt.Errorf("readmodel: mget: %d answers for %d documents", len(mr.Docs), len(docs))
	}
	out := make([]MgetDoc, len(docs))
	for i, d := range mr.Docs {
		if d.Error != nil {
			out[i].Err = &StatusError{Op: "mget", Status: http.StatusInternalServerError, Type: d.Error.Type, Reason: d.Error.Reason}
			continue
		}
		out[i] = MgetDoc{Found: d.Found, Version: d.Version, Source: json.RawMessage(d.Source)}
	}
	return out, nil
}

// Write is one instance document of a batch write.
type Write struct {
	Names Names
	Meta  Meta
	State json.RawMessage
}

// WriteItem is the answer to one Write: Result, or Err (a *StatusError
// with the item's status, or a document error).
type WriteItem struct {
	Result WriteResult
	Err    error
}

// WriteInstances writes many instance documents in one _bulk request, each
// exactly as WriteInstance writes one (through the write alias,
// require_alias, version = Meta.SequenceNumber, version_type = external,
// refresh=false). Per-item answers are at the index of their write: a 409 is
// AlreadyApplied. A failure of the whole request (transport, non-2xx) is
// returned as the error.
func WriteInstances(ctx context.Context, es *elasticsearch.Client, ws []Write) ([]WriteItem, error) {
	out := make([]WriteItem, len(ws))
	var body bytes.Buffer
	pos := make([]int, 0, len(ws)) // index into ws of each bulk item
	var (
		db   DocBuilder
		line []byte
	)
	for i, w := range ws {
		var err error
		if line, err = db.Append(line[:0], w.Meta, w.State); err != nil {
			out[i].Err = err
			continue
		}
		ix, _ := json.Marshal(w.Names.WriteAlias)
		id, _ := json.Marshal(DocumentID(w.Meta.Class, w.Meta.InstanceID))
		body.WriteString(`{"index":{"_index":`)
		body.Write(ix)
		body.WriteString(`,"_id":`)
		body.Write(id)
		body.WriteString(`,"version":`)
		body.Write(strconv.AppendInt(body.AvailableBuffer(), w.Meta.SequenceNumber, 10))
		body.WriteString(`,"version_type":"external","require_alias":true}}` + "\n")
		body.Write(line)
		body.WriteByte('\n')
		pos = append(pos, i)
	}
	if len(pos) == 0 {
		return out, nil
	}
	res, err := es.Bulk(&body, es.Bulk.WithContext(ctx), es.Bulk.WithRefresh("false"))
	if err != nil {
		return nil, fmt.Errorf("readmodel: bulk: %w", err)
	}
	defer res.Body.Close()
	if res.IsError() {
		return nil, NewStatusError("bulk", res.StatusCode, res.Body)
	}
	items, err := DecodeBulkItems(res.Body, len(pos))
	if err != nil {
		return nil, fmt.Errorf("readmodel: %w", err)
	}
	for j, r := range items {
		i := pos[j]
		switch {
		case r.Conflict():
			out[i].Result = AlreadyApplied
		case r.OK():
			out[i].Result = Written
		default:
			out[i].Err = &StatusError{Op: "bulk index", Status: r.Status, Type: r.Type, Reason: r.Reason}
		}
	}
	return out, nil
}

// BulkItemResult is Elasticsearch's answer to one item of a _bulk request.
type BulkItemResult struct {
	Status int
	Type   string // error type, empty on success
	Reason string
}

// OK reports a 2xx answer.
func (r BulkItemResult) OK() bool { return r.Status >= 200 && r.Status < 300 }

// Conflict reports a 409 (already applied or stale).
func (r BulkItemResult) Conflict() bool { return r.Status == http.StatusConflict }

// Transient reports a 429 or 5xx answer.
func (r BulkItemResult) Transient() bool {
	return r.Status == http.StatusTooManyRequests || r.Status >= 500
}

// DecodeBulkItems decodes the per-item answers of a _bulk response body, in
// request order, and checks that there are want of them.
func DecodeBulkItems(body io.Reader, want int) ([]BulkItemResult, error) {
	var br struct {
		Items []map[string]struct {
			Status int `json:"status"`
			Error  *struct {
				Type   string `json:"type"`
				Reason string `json:"reason"`
			} `json:"error"`
		} `json:"items"`
	}
	// encoding/json/v2's decoder: a third of v1's time and allocations on
	// large answers (projection benchmark), as lenient as v1 was.
	if err := jsonv2.UnmarshalRead(body, &br, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)); err != nil {
		return nil, fmt.Errorf("bulk: answer: %w", err)
	}
	if len(br.Items) != want {
		return nil, fmt.Errorf("bulk: %d answers for %d items", len(br.Items), want)
	}
	out := make([]BulkItemResult, want)
	for i, m := range br.Items {
		for _, v := range m {
			out[i].Status = v.Status
			if v.Error != nil {
				out[i].Type, out[i].Reason = v.Error.Type, v.Error.Reason
			}
		}
	}
	return out, nil
}
