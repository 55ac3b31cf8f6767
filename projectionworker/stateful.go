package projectionworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Stateful is implemented by a projection whose documents depend on their
// current state — field updates such as increment or append, and keys
// that gather the events of many aggregates into one document (the
// declarative projections, projectionworker/declarative). The worker calls
// ProjectState instead of Project, with the round's DocState: documents
// are read from this version's own index (so a rebuild starts from
// nothing), and a document written earlier in the same round is seen by
// the later events of the round before their common bulk request is sent.
//
// The round rule (docs/projections.md#concurrent-writers): every write of a
// stateful projection is a compare-and-swap against the document as the
// round read it. DocState.Get returns, for a document written earlier in
// the round, the round's state with the version that was read, so every
// operation of the round on one document carries the same external
// version (read version + 1); the worker folds them into one write (the
// last state, which contains the effects of all of them). A 409 means
// another worker wrote the document since the round read it: the write
// changed nothing, and every event of the round that wrote the document —
// or that decided from the round's unwritten state that it had nothing
// to add — is projected again on the new state. Replays are the
// projection's to detect from the stored document (the declarative
// projections keep the last sequence applied per aggregate in the
// document); since a document only ever changes by such a swap, a marker
// in the stored document proves that the event's effect is in it.
type Stateful interface {
	Projection
	ProjectState(ctx context.Context, e envelope.Envelope, st *DocState) ([]Op, error)
}

// Doc is a document as a stateful projection sees it.
type Doc struct {
	Source  json.RawMessage // nil when not found
	Version int64           // 0 when not found
}

// LoadError is a failure to read a document (Elasticsearch unreachable or
// answering 5xx): the event is retried, never dead-lettered.
type LoadError struct{ Err error }

func (e *LoadError) Error() string { return "projectionworker: load document: " + e.Err.Error() }
func (e *LoadError) Unwrap() error { return e.Err }

// docKey names a document of a round: its scope and id.
type docKey struct{ scope, id string }

// DocState is one round's view of a stateful projection's documents: each
// document as read once from the index (its version is the base of the
// round's compare-and-swap), and the state the round's events have
// written to it so far. The worker brackets each event with begin and
// commit (or rollback), so that an event that fails after it wrote to the
// state leaves no trace in what later events see or in what is written.
//
// A projection that works on decoded documents (the declarative ones)
// keeps the decoded value across the events of a round (GetValue,
// PutValue, PutDecoded, KeepValue): a document is decoded at most once per
// round, when it is read, and — written with PutValue and an operation
// with Op.FromState — encoded once per round, when the round's write is
// built (or when a projection asks for its bytes with Get), not after
// every event. Such a value is changed in place only through SetField and
// DeleteField, which the rollback of a failed event undoes.
type DocState struct {
	w       *Worker
	read    map[docKey]Doc      // as stored when the round read it
	overlay map[docKey]roundDoc // the round's state, per document written
	// notes are what a RoundLocator computed for an event of the round
	// (by event id), for its ProjectState.
	notes map[string]any
	// The current event's undo log, its in-place changes of kept values
	// and the documents it read.
	undo    []undo
	edits   []edit
	touched []docKey
	// decoded is, per document not written in the round, what the
	// projection decoded its source as read into (KeepValue), so that the
	// next event of the round takes it instead of decoding the same bytes
	// again.
	decoded map[docKey]decodedDoc
}

// roundDoc is the round's state of a document it wrote: its source, or —
// pending — the decoded value whose encoding (enc) is its source, encoded
// when the bytes are first needed and then kept in src. v, when set, is
// what src decodes to.
type roundDoc struct {
	src json.RawMessage
	v   any
	enc func(any) ([]byte, error) // set while pending (src not encoded yet)
}

// pending reports whether the document's source is not encoded yet.
func (r roundDoc) pending() bool { return r.src == nil && r.enc != nil }

// decodedDoc is a document's decoded value and the source it was decoded
// from (the very bytes: same array, same length).
type decodedDoc struct {
	src json.RawMessage
	v   any
}

type undo struct {
	k       docKey
	prev    roundDoc
	existed bool
}

// edit is one in-place change of a kept value (SetField, DeleteField):
// m[k] held old (had) before it.
type edit struct {
	m   map[string]any
	k   string
	old any
	had bool
}

// newDocState returns the state of a round of n records.
func (w *Worker) newDocState(n int) *DocState {
	return &DocState{w: w, read: make(map[docKey]Doc, n), overlay: make(map[docKey]roundDoc, n)}
}

// begin starts an event's changes.
func (s *DocState) begin() {
	s.undo, s.edits, s.touched = s.undo[:0], s.edits[:0], s.touched[:0]
}

// commit keeps the current event's changes.
func (s *DocState) commit() { s.undo, s.edits = s.undo[:0], s.edits[:0] }

// rollback undoes the current event's changes: its in-place changes of
// kept values (newest first), then its writes. A document whose state has
// its bytes then forgets its decoded value (the next event decodes the
// bytes); a pending one keeps the value the undone changes restored — its
// only form.
func (s *DocState) rollback() {
	for i := len(s.edits) - 1; i >= 0; i-- {
		e := s.edits[i]
		if e.had {
			e.m[e.k] = e.old
		} else {
			delete(e.m, e.k)
		}
		s.edits[i] = edit{}
	}
	for i := len(s.undo) - 1; i >= 0; i-- {
		u := s.undo[i]
		if u.existed {
			s.overlay[u.k] = u.prev
		} else {
			delete(s.overlay, u.k)
		}
	}
	forget := func(k docKey) {
		delete(s.decoded, k)
		if r, ok := s.overlay[k]; ok && r.v != nil && !r.pending() {
			r.v = nil
			s.overlay[k] = r
		}
	}
	for _, k := range s.touched {
		forget(k)
	}
	for _, u := range s.undo {
		forget(u.k)
	}
	s.undo, s.edits = s.undo[:0], s.edits[:0]
}

// Get returns the document scope/id: its source as written earlier in this
// round, else as stored in this version's index; its version is always the
// one stored when the round read it (the base of the round's single write).
// A document written with PutValue is encoded now (once: the bytes are
// kept).
func (s *DocState) Get(ctx context.Context, scope, id string) (Doc, error) {
	k := docKey{scope, id}
	d, err := s.readDoc(ctx, k)
	if err != nil {
		return Doc{}, err
	}
	if _, ok := s.overlay[k]; ok {
		src, err := s.source(k)
		if err != nil {
			return Doc{}, err
		}
		return Doc{Source: src, Version: d.Version}, nil
	}
	return d, nil
}

// GetValue is Get for a projection that works on decoded documents: it
// returns the document and the decoded value the round keeps for its
// current state (PutValue, PutDecoded, KeepValue), or a nil value — then
// the caller decodes d.Source itself. With a value, d.Source is nil while
// the state is not encoded yet: the value is the document. The value stays
// the round's: the caller changes it only with SetField and DeleteField,
// and then writes it (PutValue or PutDecoded) or fails.
func (s *DocState) GetValue(ctx context.Context, scope, id string) (Doc, any, error) {
	k := docKey{scope, id}
	d, err := s.readDoc(ctx, k)
	if err != nil {
		return Doc{}, nil, err
	}
	if r, ok := s.overlay[k]; ok {
		return Doc{Source: r.src, Version: d.Version}, r.v, nil
	}
	if dd, ok := s.decoded[k]; ok && sameBytes(dd.src, d.Source) {
		return d, dd.v, nil
	}
	return d, nil, nil
}

// readDoc returns the document k as the round read it (reading it now if
// the round has not), and counts it as read by the current event.
func (s *DocState) readDoc(ctx context.Context, k docKey) (Doc, error) {
	s.touched = append(s.touched, k)
	d, ok := s.read[k]
	if !ok {
		var err error
		if d, err = s.load(ctx, k.scope, k.id); err != nil {
			return Doc{}, err
		}
		s.read[k] = d
	}
	return d, nil
}

// source returns the round's source of a document it wrote, encoding a
// pending value (once: the bytes are kept with the value).
func (s *DocState) source(k docKey) (json.RawMessage, error) {
	r, ok := s.overlay[k]
	if !ok {
		return nil, fmt.Errorf("projectionworker: document %s/%s: the round holds no state of it", k.scope, k.id)
	}
	if !r.pending() {
		return r.src, nil
	}
	b, err := r.enc(r.v)
	if err != nil {
		return nil, fmt.Errorf("projectionworker: encode document %s/%s: %w", k.scope, k.id, err)
	}
	if b == nil {
		b = json.RawMessage{}
	}
	r.src, r.enc = b, nil
	s.overlay[k] = r
	return b, nil
}

// load reads one document from this version's index (realtime).
func (s *DocState) load(ctx context.Context, scope, id string) (Doc, error) {
	if err := ValidateName(scope); err != nil {
		return Doc{}, err
	}
	index, err := s.w.index(ctx, scope)
	if err != nil {
		return Doc{}, &LoadError{Err: err}
	}
	res, err := s.w.es.Get(index, id, s.w.es.Get.WithContext(ctx), s.w.es.Get.WithRealtime(true))
	if err != nil {
		return Doc{}, &LoadError{Err: err}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return Doc{}, &LoadError{Err: err}
	}
	if res.StatusCode == http.StatusNotFound {
		return Doc{}, nil
	}
	if res.StatusCode != http.StatusOK {
		return Doc{}, &LoadError{Err: fmt.Errorf("GET %s/%s: %d %s", index, id, res.StatusCode, body)}
	}
	var got struct {
		Found   bool            `json:"found"`
		Version int64           `json:"_version"`
		Source  json.RawMessage `json:"_source"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		return Doc{}, &LoadError{Err: fmt.Errorf("GET %s/%s: %w", index, id, err)}
	}
	if !got.Found {
		return Doc{}, nil
	}
	return Doc{Source: got.Source, Version: got.Version}, nil
}

// write records the round's new state of the document k, undone if the
// current event is rolled back.
func (s *DocState) write(k docKey, r roundDoc) {
	prev, existed := s.overlay[k]
	s.undo = append(s.undo, undo{k: k, prev: prev, existed: existed})
	s.overlay[k] = r
	delete(s.decoded, k)
}

// Put records the document an operation of this round writes (d.Version
// is not kept: the round's write of a document always carries the version
// it was read at, plus one). A decoded value kept for the document is
// forgotten.
func (s *DocState) Put(scope, id string, d Doc) {
	s.write(docKey{scope, id}, roundDoc{src: d.Source})
}

// PutDecoded is Put, and keeps v as what d.Source decodes to: a
// projection that changed the decoded document and encoded it into
// d.Source hands v over, so that the round's next event of the document
// takes v (GetValue) instead of decoding d.Source again.
func (s *DocState) PutDecoded(scope, id string, d Doc, v any) {
	s.write(docKey{scope, id}, roundDoc{src: d.Source, v: v})
}

// PutValue records v as the round's state of the document scope/id without
// encoding it: enc(v) is its source, encoded once, when the bytes are
// first needed — the round's write (an operation with Op.FromState), or a
// Get. v must be what its encoding decodes to (numbers as float64, as
// encoding/json decodes them), and enc must not fail on it: the round's
// next event of the document takes v (GetValue) as the document.
func (s *DocState) PutValue(scope, id string, v any, enc func(any) ([]byte, error)) {
	s.write(docKey{scope, id}, roundDoc{v: v, enc: enc})
}

// KeepValue keeps v as what src — the source GetValue returned for the
// document scope/id, unchanged since — decodes to, for the round's next
// GetValue (a projection that decoded a document and wrote nothing hands
// its decoded value back). It keeps nothing when src is empty or is not
// the round's current source of the document.
func (s *DocState) KeepValue(scope, id string, src json.RawMessage, v any) {
	k := docKey{scope, id}
	if r, ok := s.overlay[k]; ok {
		if sameBytes(src, r.src) {
			r.v = v
			s.overlay[k] = r
		}
		return
	}
	if !sameBytes(src, s.read[k].Source) {
		return
	}
	if s.decoded == nil {
		s.decoded = map[docKey]decodedDoc{}
	}
	s.decoded[k] = decodedDoc{src: src, v: v}
}

// SetField sets m[k] = v in a value the round keeps (GetValue), undone if
// the current event is rolled back.
func (s *DocState) SetField(m map[string]any, k string, v any) {
	old, had := m[k]
	s.edits = append(s.edits, edit{m: m, k: k, old: old, had: had})
	m[k] = v
}

// DeleteField deletes m[k] from a value the round keeps (GetValue), undone
// if the current event is rolled back.
func (s *DocState) DeleteField(m map[string]any, k string) {
	old, had := m[k]
	if !had {
		return
	}
	s.edits = append(s.edits, edit{m: m, k: k, old: old, had: true})
	delete(m, k)
}

// sameBytes reports whether a and b are the very same non-empty bytes
// (one array, one length); sources are never changed in place.
func sameBytes(a, b []byte) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}

// isLoadError reports whether err is a LoadError.
func isLoadError(err error) bool {
	var le *LoadError
	return errors.As(err, &le)
}

func isStateful(p Projection) bool {
	_, ok := p.(Stateful)
	return ok
}

// TakeNote returns what SetNote kept for the event eventID in this round,
// and forgets it: a note serves one projection of its event.
func (s *DocState) TakeNote(eventID string) (any, bool) {
	v, ok := s.notes[eventID]
	if ok {
		delete(s.notes, eventID)
	}
	return v, ok
}

// SetNote keeps v for the event eventID until the round ends: a
// RoundLocator keeps what it computed to name the event's documents, so
// that ProjectState of the same event does not compute it again. A note
// is the event's alone (a round holds at most one record of an
// aggregate, so one of an event).
func (s *DocState) SetNote(eventID string, v any) {
	if s.notes == nil {
		s.notes = map[string]any{}
	}
	s.notes[eventID] = v
}

// DocRef names a document: its scope and id.
type DocRef struct{ Scope, ID string }

// Locator is implemented by a stateful projection that can name, from the
// event alone, the documents ProjectState will read for it. The worker
// then reads every document of a round with one _mget before it projects
// the round's events, instead of one GET per document.
type Locator interface {
	Locate(e envelope.Envelope) ([]DocRef, error)
}

// RoundLocator is a Locator that computes, while it names an event's
// documents, what ProjectState needs again (a declarative projection: the
// event's variables, its key and document id): the worker calls
// LocateRound instead of Locate, with the round's DocState, where the
// projection keeps it (SetNote) for ProjectState of the same event
// (TakeNote). The result must be what Locate returns.
type RoundLocator interface {
	Locator
	LocateRound(e envelope.Envelope, st *DocState) ([]DocRef, error)
}

// prefetch reads the documents refs (those not read yet) with one _mget
// per round. A failure leaves them unread: each is then read on its own
// by Get, which reports the failure as the event's LoadError.
func (s *DocState) prefetch(ctx context.Context, refs []DocRef) error {
	var docs []readmodel.DocAddr
	var keys []docKey
	seen := map[docKey]bool{}
	for _, r := range refs {
		k := docKey{r.Scope, r.ID}
		if _, ok := s.read[k]; ok || seen[k] {
			continue
		}
		if _, ok := s.w.ensuredIndex(r.Scope); !ok && ValidateName(r.Scope) != nil {
			continue // Get reports it
		}
		index, err := s.w.index(ctx, r.Scope)
		if err != nil {
			return err
		}
		seen[k] = true
		keys = append(keys, k)
		docs = append(docs, readmodel.DocAddr{Index: index, ID: r.ID})
	}
	got, err := readmodel.Mget(ctx, s.w.es, docs)
	if err != nil {
		return err
	}
	for i, d := range got {
		switch {
		case d.Err != nil:
			// Left unread: Get reads it on its own and reports the error.
		case d.Found:
			s.read[keys[i]] = Doc{Source: d.Source, Version: d.Version}
		default:
			s.read[keys[i]] = Doc{}
		}
	}
	return nil
}
