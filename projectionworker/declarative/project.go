package declarative

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"

	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/celexpr"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Store is where ProjectState reads documents and records what it
// writes: the worker's *projectionworker.DocState, or Memory.
type Store interface {
	Get(ctx context.Context, scope, id string) (projectionworker.Doc, error)
	Put(scope, id string, d projectionworker.Doc)
}

// EvalError is a runtime failure of one expression for one event: the
// event goes to the dead-letter topic with this message.
type EvalError struct {
	Projection string
	What       string // "key", "updates[1].by", …
	Expr       Expr
	EventID    string
	Err        error
}

func (e *EvalError) Error() string {
	return fmt.Sprintf("projection %s: %s at %s: expression %q failed on event %s: %v", e.Projection, e.What, e.Expr.Pos, e.Expr.Source, e.EventID, e.Err)
}

func (e *EvalError) Unwrap() error { return e.Err }

// Project projects e onto an empty document store (what ProjectState does
// for an event whose document does not exist yet).
func (p *Projection) Project(e envelope.Envelope) ([]projectionworker.Op, error) {
	return p.Apply(context.Background(), e, NewMemory())
}

// ProjectState applies one event to its document (projectionworker.Stateful).
func (p *Projection) ProjectState(ctx context.Context, e envelope.Envelope, st *projectionworker.DocState) ([]projectionworker.Op, error) {
	return p.Apply(ctx, e, st)
}

// Locate names the document an event updates, from the event alone
// (projectionworker.Locator): the worker reads the documents of a round
// with one _mget.
func (p *Projection) Locate(e envelope.Envelope) ([]projectionworker.DocRef, error) {
	return p.LocateRound(e, nil)
}

// LocateRound is Locate that keeps the event as upcast, its variables, key
// and document id in the round's state (projectionworker.RoundLocator):
// ProjectState of the same event takes them instead of decoding the event
// and evaluating the key again.
func (p *Projection) LocateRound(e envelope.Envelope, st *projectionworker.DocState) ([]projectionworker.DocRef, error) {
	l, err := p.locateEvent(e)
	if err != nil {
		return nil, err
	}
	if st != nil {
		st.SetNote(e.EventID, l)
	}
	return []projectionworker.DocRef{{Scope: p.spec.Scope, ID: l.docID}}, nil
}

// locateEvent upcasts e and evaluates its key and document id.
func (p *Projection) locateEvent(e envelope.Envelope) (*located, error) {
	e, err := p.Upcast(context.Background(), e)
	if err != nil {
		return nil, err
	}
	vars, docID, err := p.locate(e)
	if err != nil {
		return nil, err
	}
	return &located{e: e, vars: vars, docID: docID}, nil
}

// located is what LocateRound computed for an event (a DocState note).
type located struct {
	e     envelope.Envelope // as upcast
	vars  *activation
	docID string
}

// noteStore is a Store that keeps LocateRound's notes (DocState).
type noteStore interface {
	TakeNote(eventID string) (any, bool)
}

// takeLocated returns LocateRound's note for e in store, if any.
func takeLocated(store Store, e envelope.Envelope) *located {
	ns, ok := store.(noteStore)
	if !ok {
		return nil
	}
	v, ok := ns.TakeNote(e.EventID)
	if !ok {
		return nil
	}
	l, _ := v.(*located)
	return l
}

// locate evaluates the key and the document id of e; vars holds the event
// and the key for the updates.
func (p *Projection) locate(e envelope.Envelope) (*activation, string, error) {
	event, err := eventVars(e)
	if err != nil {
		return nil, "", fmt.Errorf("projection %s: event %s: %w", p.spec.Name, e.EventID, err)
	}
	vars := &activation{event: event, doc: emptyDoc}
	kv, err := p.eval(p.key, vars, e)
	if err != nil {
		return nil, "", err
	}
	key, err := asKey(kv)
	if err != nil {
		return nil, "", p.evalErr(p.key, e, err)
	}
	vars.key = key
	docID := key
	if p.docID != nil {
		v, err := p.eval(p.docID, vars, e)
		if err != nil {
			return nil, "", err
		}
		if docID, err = asKey(v); err != nil {
			return nil, "", p.evalErr(p.docID, e, err)
		}
	}
	return vars, envelope.ESDocumentID(docID), nil
}

// Apply applies one event to its document in store and returns the write.
// With upcast: latest, the event is read upcast to its type's latest
// schema version (an event upcast already passes as it is).
func (p *Projection) Apply(ctx context.Context, e envelope.Envelope, store Store) ([]projectionworker.Op, error) {
	var vars *activation
	var docID string
	if l := takeLocated(store, e); l != nil {
		e, vars, docID = l.e, l.vars, l.docID
	} else {
		var err error
		if e, err = p.Upcast(ctx, e); err != nil {
			return nil, err
		}
		if vars, docID, err = p.locate(e); err != nil {
			return nil, err
		}
	}
	key := vars.key
	scope := p.spec.Scope
	vs, _ := store.(valueStore)
	cur, doc, kept, err := p.current(ctx, store, vs, scope, docID)
	if err != nil {
		return nil, err
	}
	// The round's kept value is changed only through the DocState's
	// journal, which a rollback of this event undoes.
	var ed fieldEditor = directEdits{}
	if kept {
		ed = vs
	}
	meta, _ := doc["sluice"].(map[string]any)
	applied, _ := meta["applied"].(map[string]any)
	if applied == nil {
		applied = map[string]any{}
	}
	aggKey := envelope.AggregateKey(e.AggregateType, e.AggregateID)
	if last, ok := applied[aggKey]; ok {
		if n, ok := toFloat(last); ok && e.SequenceNumber <= int64(n) {
			if vs != nil && !kept {
				vs.KeepValue(scope, docID, cur.Source, doc) // unchanged
			}
			return nil, nil // applied already (a replay): nothing to write
		}
	}
	// lazy: the round may encode the document once, after its last event
	// (PutValue, Op.FromState), because every value this event puts into
	// it is already what its encoding decodes to and encodes to the bytes
	// encoding it now would give. Otherwise (an integer beyond 2^53, a
	// number that is not finite, a string that is not valid UTF-8, a value
	// that is not JSON's) it is encoded now, as it always was.
	lazy := vs != nil && !p.encodeEachEvent
	next := doc
	ed.DeleteField(next, "sluice")
	if d, _ := next["deleted"].(bool); d {
		next = map[string]any{} // a deleted document starts afresh
	}
	ed.DeleteField(next, "deleted")
	if p.usesDoc {
		// Expressions see the document as it was before the event.
		vars.doc = cloneMap(next)
	}
	next, deleted, lazy, err := p.applyUpdates(vars, e, ed, next, lazy)
	if err != nil {
		return nil, err
	}
	var seq any = e.SequenceNumber
	if lazy {
		seq, lazy = exactFloat(e.SequenceNumber)
	}
	ed.SetField(applied, aggKey, seq)
	ed.SetField(next, "deleted", deleted)
	updatedAt := e.OccurredAt.String()
	ed.SetField(next, "sluice", map[string]any{"applied": applied, "key": key, "event_id": e.EventID, "updated_at": updatedAt})
	version := cur.Version + 1
	if lazy && utf8.ValidString(key) && utf8.ValidString(aggKey) && utf8.ValidString(e.EventID) && utf8.ValidString(updatedAt) {
		vs.PutValue(scope, docID, next, encodeDoc)
		return []projectionworker.Op{{Scope: scope, ID: docID, Version: version, FromState: true, Compact: true}}, nil
	}
	body, err := encodeDoc(next)
	if err != nil {
		return nil, fmt.Errorf("projection %s: document %s: %w", p.spec.Name, docID, err)
	}
	if vs != nil && asDecoded(next) {
		vs.PutDecoded(scope, docID, projectionworker.Doc{Source: body, Version: version}, next)
	} else {
		store.Put(scope, docID, projectionworker.Doc{Source: body, Version: version})
	}
	return []projectionworker.Op{{Scope: scope, ID: docID, Version: version, Doc: body, Compact: true}}, nil
}

// applyUpdates evaluates delete_when and applies the event's updates to
// next, changing it through ed. It returns the document the event leaves
// (an empty one when it is deleted), whether it is deleted, and lazy — as
// Apply passed it, and false once an update puts a value that must be
// encoded now (deferredValue, a number that is not finite).
func (p *Projection) applyUpdates(vars *activation, e envelope.Envelope, ed fieldEditor, next map[string]any, lazy bool) (map[string]any, bool, bool, error) {
	if p.deleteIf != nil {
		v, err := p.eval(p.deleteIf, vars, e)
		if err != nil {
			return nil, false, false, err
		}
		deleted, ok := v.(bool)
		if !ok {
			return nil, false, false, p.evalErr(p.deleteIf, e, fmt.Errorf("delete_when must be a bool, got %T", v))
		}
		if deleted {
			return map[string]any{}, true, lazy, nil
		}
	}
	for i, u := range p.updates {
		if u.when != nil {
			v, err := p.eval(u.when, vars, e)
			if err != nil {
				return nil, false, false, err
			}
			b, ok := v.(bool)
			if !ok {
				return nil, false, false, p.evalErr(u.when, e, fmt.Errorf("when must be a bool, got %T", v))
			}
			if !b {
				continue
			}
		}
		var val any
		if u.value != nil {
			var err error
			if val, err = p.eval(u.value, vars, e); err != nil {
				return nil, false, false, err
			}
			if lazy {
				// val is the event's own (a CEL result, or a copy).
				val, lazy = deferredValue(val)
			}
		}
		finite, err := applyUpdate(ed, next, u, val)
		if err != nil {
			prog := u.value
			if prog == nil {
				prog = &program{what: fmt.Sprintf("updates[%d]", i), expr: Expr{Source: u.op + " " + joinPath(u.field), Pos: p.spec.Updates[i].Pos}}
			}
			return nil, false, false, p.evalErr(prog, e, err)
		}
		lazy = lazy && finite
	}
	return next, false, lazy, nil
}

// valueStore is a Store that keeps a document's decoded value between
// the events of a round (projectionworker.DocState): Apply changes the
// value in place through the store's journal (fieldEditor) and hands it
// back with the write, so that a document is decoded at most once per
// round — when it was read — and encoded once per round — when the
// round's write is built (PutValue, Op.FromState) — not once per event.
type valueStore interface {
	GetValue(ctx context.Context, scope, id string) (projectionworker.Doc, any, error)
	KeepValue(scope, id string, src json.RawMessage, v any)
	PutValue(scope, id string, v any, enc func(any) ([]byte, error))
	PutDecoded(scope, id string, d projectionworker.Doc, v any)
	fieldEditor
}

// fieldEditor changes a document value in place: through the DocState's
// journal for the round's kept value (undone if the event is rolled
// back), or directly (directEdits) for a value of the event's own.
type fieldEditor interface {
	SetField(m map[string]any, k string, v any)
	DeleteField(m map[string]any, k string)
}

// directEdits changes a value of the event's own in place.
type directEdits struct{}

func (directEdits) SetField(m map[string]any, k string, v any) { m[k] = v }
func (directEdits) DeleteField(m map[string]any, k string)     { delete(m, k) }

// current returns the document docID: the round's kept value (kept: the
// caller changes it only through vs), else decoded from its source (nil:
// an empty document) into a map of the caller's own.
func (p *Projection) current(ctx context.Context, store Store, vs valueStore, scope, docID string) (cur projectionworker.Doc, doc map[string]any, kept bool, err error) {
	if vs == nil {
		if cur, err = store.Get(ctx, scope, docID); err != nil {
			return cur, nil, false, err
		}
	} else {
		var v any
		if cur, v, err = vs.GetValue(ctx, scope, docID); err != nil {
			return cur, nil, false, err
		}
		if m, ok := v.(map[string]any); ok && m != nil {
			return cur, m, true, nil
		}
		if v != nil && cur.Source == nil {
			// A kept value that is not an object, not encoded yet: its bytes.
			if cur, err = store.Get(ctx, scope, docID); err != nil {
				return cur, nil, false, err
			}
		}
	}
	doc, err = p.decodeSource(docID, cur.Source)
	return cur, doc, false, err
}

// decodeSource decodes the document src (an empty one for nil).
func (p *Projection) decodeSource(docID string, src json.RawMessage) (map[string]any, error) {
	doc := map[string]any{}
	if src == nil {
		return doc, nil
	}
	if p.onDecode != nil {
		p.onDecode()
	}
	if err := decodeDoc(src, &doc); err != nil {
		return nil, fmt.Errorf("projection %s: document %s is not a JSON object: %w", p.spec.Name, docID, err)
	}
	return doc, nil
}

// eval evaluates one expression for the event; an expression that
// occurs several times in the projection (the same when: on several
// updates) is evaluated once per event (they see the same variables:
// the event, the key and the document before the event).
func (p *Projection) eval(pr *program, vars *activation, e envelope.Envelope) (any, error) {
	memo := pr.keyed && pr.shared.repeated && vars.key != ""
	if memo {
		if v, ok := vars.memo[pr.shared]; ok {
			// A copy of its own: the updates change the document's
			// values in place (append, merge), and the document lives on
			// in the round (valueStore), so no two of its places may
			// share a list or an object.
			return cloneValue(v), nil
		}
	}
	out, _, err := pr.prg.Eval(vars)
	if err != nil {
		return nil, p.evalErr(pr, e, err)
	}
	v, err := toNative(out)
	if err != nil {
		return nil, p.evalErr(pr, e, err)
	}
	if memo {
		if vars.memo == nil {
			vars.memo = map[*program]any{} // only for projections that share an expression
		}
		vars.memo[pr.shared] = v
		return cloneValue(v), nil // the memo keeps v as evaluated
	}
	return v, nil
}

// emptyDoc is the doc variable of expressions that do not read it.
var emptyDoc = map[string]any{}

// activation binds the expression variables without a map per
// evaluation (interpreter.Activation).
type activation struct {
	event map[string]any
	doc   map[string]any
	key   string
	memo  map[*program]any
}

// ResolveName binds event, doc and key.
func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "event":
		return a.event, true
	case "doc":
		return a.doc, true
	case "key":
		return a.key, true
	}
	return nil, false
}

// Parent is nil: there is no enclosing scope.
func (a *activation) Parent() interpreter.Activation { return nil }

func (p *Projection) evalErr(pr *program, e envelope.Envelope, err error) error {
	return &EvalError{Projection: p.spec.Name, What: pr.what, Expr: pr.expr, EventID: e.EventID, Err: err}
}

// eventVars is the event as the expressions see it: celexpr.EventVars,
// with the data decoded directly (decodeDoc: the values and errors of
// json.Unmarshal, without reflection; TestEventVarsEqualCelexpr).
func eventVars(e envelope.Envelope) (map[string]any, error) {
	return celexpr.EventVarsDecoding(e, decodeDoc)
}

// asKey turns a key or document id value into a string.
func asKey(v any) (string, error) {
	switch t := v.(type) {
	case string:
		if t == "" {
			return "", errors.New("the key is empty")
		}
		return t, nil
	case int64:
		return strconv.FormatInt(t, 10), nil
	case uint64:
		return strconv.FormatUint(t, 10), nil
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64), nil
	case nil:
		return "", errors.New("the key is null")
	}
	return "", fmt.Errorf("the key must be a string or a number, got %T", v)
}

// toNative converts a CEL value into JSON-able Go values (celexpr.ToNative).
func toNative(v ref.Val) (any, error) { return celexpr.ToNative(v) }

func toFloat(v any) (float64, bool) {
	switch t := v.(type) {
	case float64:
		return t, true
	case int64:
		return float64(t), true
	case uint64:
		return float64(t), true
	case int:
		return float64(t), true
	case json.Number:
		f, err := t.Float64()
		return f, err == nil
	}
	return 0, false
}

func cloneMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch t := v.(type) {
		case map[string]any:
			out[k] = cloneMap(t)
		case []any:
			out[k] = append([]any(nil), t...)
		default:
			out[k] = v
		}
	}
	return out
}

// asDecoded turns the document m, in place, into what its encoding
// decodes to, so that the round's next event sees the same value whether
// it takes m or decodes the bytes written (PutDecoded): a number an
// update set from CEL (int, uint) becomes the double JSON reads back — a
// CEL expression on it would otherwise behave differently (doc.n * 2.0
// has no overload for an int) depending on how the events fell into
// rounds — and an empty list or object held as nil becomes null. It
// reports false, leaving m to be dropped, when m holds a value the
// encoding does not give back as it is (a string that is not valid
// UTF-8, a type that is not JSON's).
func asDecoded(m map[string]any) bool {
	for k, v := range m {
		if !utf8.ValidString(k) {
			return false
		}
		d, ok := decodedValue(v)
		if !ok {
			return false
		}
		m[k] = d
	}
	return true
}

// decodedValue is v as its JSON encoding decodes to (asDecoded); lists
// and objects are changed in place.
func decodedValue(v any) (any, bool) {
	switch t := v.(type) {
	case nil, bool, float64:
		return v, true
	case string:
		return v, utf8.ValidString(t)
	case int64:
		return float64(t), true // rounds to nearest as ParseFloat does
	case int:
		return float64(t), true
	case uint64:
		return float64(t), true
	case map[string]any:
		if t == nil {
			return nil, true
		}
		return t, asDecoded(t)
	case []any:
		if t == nil {
			return nil, true
		}
		for i, e := range t {
			d, ok := decodedValue(e)
			if !ok {
				return nil, false
			}
			t[i] = d
		}
		return t, true
	}
	return nil, false
}

// cloneValue is a deep copy of a document value (objects and lists;
// other values are immutable).
func cloneValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = cloneValue(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = cloneValue(e)
		}
		return out
	}
	return v
}

func joinPath(p []string) string {
	s := ""
	for i, f := range p {
		if i > 0 {
			s += "."
		}
		s += f
	}
	return s
}

// applyUpdate applies one field update to doc, changing it through ed.
// finite is false when an increment left a number that is not finite
// (the document cannot be encoded: Apply encodes it now and fails).
func applyUpdate(ed fieldEditor, doc map[string]any, u update, val any) (finite bool, err error) {
	parent := doc
	for _, f := range u.field[:len(u.field)-1] {
		next, ok := parent[f].(map[string]any)
		if !ok {
			if parent[f] != nil && u.op != OpUnset {
				return true, fmt.Errorf("field %s: %q is not an object", joinPath(u.field), f)
			}
			if u.op == OpUnset {
				return true, nil
			}
			next = map[string]any{}
			ed.SetField(parent, f, next)
		}
		parent = next
	}
	leaf := u.field[len(u.field)-1]
	switch u.op {
	case OpSet:
		ed.SetField(parent, leaf, val)
	case OpUnset:
		ed.DeleteField(parent, leaf)
	case OpIncrement:
		by := any(int64(1))
		if u.value != nil {
			by = val
		}
		d, ok := toFloat(by)
		if !ok {
			return true, fmt.Errorf("increment %s by %v: not a number", joinPath(u.field), by)
		}
		cur := 0.0
		if old, present := parent[leaf]; present && old != nil {
			if cur, ok = toFloat(old); !ok {
				return true, fmt.Errorf("increment %s: the field holds %T, not a number", joinPath(u.field), old)
			}
		}
		sum := cur + d
		ed.SetField(parent, leaf, sum)
		return !math.IsInf(sum, 0) && !math.IsNaN(sum), nil
	case OpAppend:
		list, _ := parent[leaf].([]any)
		if old, present := parent[leaf]; present && old != nil && list == nil {
			return true, fmt.Errorf("append to %s: the field holds %T, not a list", joinPath(u.field), old)
		}
		ed.SetField(parent, leaf, append(list, val))
	case OpMerge:
		patch, ok := val.(map[string]any)
		if !ok {
			return true, fmt.Errorf("merge into %s: the value is %T, not an object", joinPath(u.field), val)
		}
		target, _ := parent[leaf].(map[string]any)
		ed.SetField(parent, leaf, mergePatch(ed, target, patch))
	}
	return true, nil
}

// mergePatch applies an RFC 7386 merge patch to target, changing it
// through ed.
func mergePatch(ed fieldEditor, target, patch map[string]any) map[string]any {
	if target == nil {
		target = map[string]any{}
	}
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			ed.DeleteField(target, k)
		case map[string]any:
			t, _ := target[k].(map[string]any)
			ed.SetField(target, k, mergePatch(ed, t, pv))
		default:
			ed.SetField(target, k, v)
		}
	}
	return target
}

// maxExact is 2^53: every integer of at most this magnitude is a double
// exactly, and encodes as the same digits as an integer and as a double.
const maxExact = 1 << 53

// exactFloat returns n as the double JSON reads its digits back as, and
// true, when that double encodes to the same digits (|n| ≤ 2^53); else n
// and false.
func exactFloat(n int64) (any, bool) {
	if n < -maxExact || n > maxExact {
		return n, false
	}
	return float64(n), true
}

// deferredValue is v — a value of the event's own, changed in place — as
// what its encoding decodes to (numbers as doubles, nil lists and objects
// as null), and true, when it encodes to the same bytes as v does now:
// integers of at most 2^53, finite doubles, valid UTF-8. Otherwise false
// (v may be changed in part, into values that still encode the same).
func deferredValue(v any) (any, bool) {
	switch t := v.(type) {
	case nil, bool:
		return v, true
	case float64:
		return v, !math.IsInf(t, 0) && !math.IsNaN(t)
	case string:
		return v, utf8.ValidString(t)
	case int64:
		return exactFloat(t)
	case int:
		return exactFloat(int64(t))
	case uint64:
		if t > maxExact {
			return v, false
		}
		return float64(t), true
	case map[string]any:
		if t == nil {
			return nil, true
		}
		for k, e := range t {
			if !utf8.ValidString(k) {
				return v, false
			}
			d, ok := deferredValue(e)
			if !ok {
				return v, false
			}
			t[k] = d
		}
		return t, true
	case []any:
		if t == nil {
			return nil, true
		}
		for i, e := range t {
			d, ok := deferredValue(e)
			if !ok {
				return v, false
			}
			t[i] = d
		}
		return t, true
	}
	return v, false
}

// Memory is an in-memory document store (sluice projection test, tests).
type Memory struct {
	Docs map[[2]string]projectionworker.Doc
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{Docs: map[[2]string]projectionworker.Doc{}} }

// Get returns the document, or a zero Doc.
func (m *Memory) Get(_ context.Context, scope, id string) (projectionworker.Doc, error) {
	return m.Docs[[2]string{scope, id}], nil
}

// Put stores the document.
func (m *Memory) Put(scope, id string, d projectionworker.Doc) { m.Docs[[2]string{scope, id}] = d }
