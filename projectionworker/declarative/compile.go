package declarative

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"

	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/celexpr"
	"github.com/sluicehq/sluice/shared/envelope"
)

// DefaultCostLimit bounds one evaluation of one expression (CEL cost
// units: roughly one per operation, plus the size of strings and lists
// touched). A projection may set cost_limit.
const DefaultCostLimit = celexpr.DefaultCostLimit

// program is one compiled expression and where it came from.
type program struct {
	what string // "key", "updates[2].by", …
	expr Expr
	prg  cel.Program
	// shared is the first program with the same source: the memo key of
	// an evaluation within one event. keyed: evaluated after the key.
	// repeated (on a shared program): another program has its source.
	shared   *program
	keyed    bool
	repeated bool
}

// update is one compiled field update.
type update struct {
	op    string
	field []string
	value *program // nil for unset (and increment without by: 1)
	when  *program
}

// Projection is a compiled declarative projection: a
// projectionworker.Stateful projection.
type Projection struct {
	spec     Spec
	types    map[string]bool
	aggTypes map[string]bool
	key      *program
	docID    *program
	deleteIf *program
	updates  []update
	usesDoc  bool // some expression reads the doc variable
	// upcaster brings events to their latest schema version (upcast:
	// latest); set by UseUpcaster.
	upcaster Upcaster
	// onDecode, when set (by tests), is called each time Apply decodes a
	// document from JSON.
	onDecode func()
	// encodeEachEvent, when set (by tests), makes Apply encode the
	// document after every event, as before the round encoded it once.
	encodeEachEvent bool
}

var (
	_ projectionworker.Stateful     = (*Projection)(nil)
	_ projectionworker.Upcasting    = (*Projection)(nil)
	_ projectionworker.RoundLocator = (*Projection)(nil)
)

// Upcaster brings an event to its type's latest schema version:
// *schema.Registry (Latest; docs/schemas.md#upcasting-on-read).
type Upcaster interface {
	Latest(ctx context.Context, e envelope.Envelope) (envelope.Envelope, error)
}

// UseUpcaster sets the schema registry a projection with upcast: latest
// reads events through (the projection worker's wiring does, and
// sluice projection test). Call it before the projection runs.
func (p *Projection) UseUpcaster(u Upcaster) { p.upcaster = u }

// Upcasts reports whether the projection reads events upcast to their
// type's latest schema version (upcast: latest).
func (p *Projection) Upcasts() bool { return p.spec.Upcast == UpcastLatest }

// Upcast returns e as the projection reads it (projectionworker.Upcasting):
// unchanged, or with upcast: latest, upcast to its type's latest schema
// version. The error names the projection; the upcaster's own error
// (*schema.UpcastError, *schema.UnavailableError) is wrapped.
func (p *Projection) Upcast(ctx context.Context, e envelope.Envelope) (envelope.Envelope, error) {
	if !p.Upcasts() {
		return e, nil
	}
	if p.upcaster == nil {
		return e, fmt.Errorf("projection %s declares upcast: latest but runs without the schema registry", p.spec.Name)
	}
	out, err := p.upcaster.Latest(ctx, e)
	if err != nil {
		return e, fmt.Errorf("projection %s: %w", p.spec.Name, err)
	}
	return out, nil
}

// newEnv is the expression environment, shared/celexpr's (the one of the
// schema registry's upcasters too): event (the envelope as JSON:
// event_id, event_type, kind, aggregate_type, aggregate_id,
// sequence_number, position, occurred_at, schema_version, data,
// metadata), plus doc (the document before the event; {} when there is
// none) and key (the document's key; "" while the key itself is
// evaluated). CEL's standard functions and the strings extension are
// available; nothing reaches outside the event and the document.
func newEnv() (*cel.Env, error) {
	return celexpr.NewEnv(
		cel.Variable("doc", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("key", cel.StringType),
	)
}

// Compile compiles specs. Every error names the file, the YAML line and
// column, and the position inside the expression; nothing is compiled
// later, at run time.
func Compile(specs []Spec) ([]*Projection, error) {
	env, err := newEnv()
	if err != nil {
		return nil, fmt.Errorf("declarative: %w", err)
	}
	out := make([]*Projection, 0, len(specs))
	for _, s := range specs {
		p, err := compileOne(env, s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func compileOne(env *cel.Env, s Spec) (*Projection, error) {
	if err := projectionworker.ValidateName(s.Name); err != nil {
		return nil, &Error{Pos: Pos{File: s.File, Line: 1, Column: 1}, Msg: err.Error()}
	}
	if err := projectionworker.ValidateName(s.Scope); err != nil {
		return nil, &Error{Pos: Pos{File: s.File, Line: 1, Column: 1}, Msg: "scope: " + err.Error()}
	}
	p := &Projection{spec: s, types: map[string]bool{}, aggTypes: map[string]bool{}}
	for _, t := range s.EventTypes {
		p.types[t] = true
	}
	for _, t := range s.AggregateTypes {
		p.aggTypes[t] = true
	}
	var err error
	if p.key, err = compileExpr(env, s, "key", s.Key); err != nil {
		return nil, err
	}
	bySource := map[string]*program{}
	share := func(pr *program) {
		pr.keyed = true
		if first, ok := bySource[pr.expr.Source]; ok {
			pr.shared, first.repeated = first, true
		} else {
			bySource[pr.expr.Source], pr.shared = pr, pr
		}
		if refersTo(pr.expr.Source, "doc") {
			p.usesDoc = true
		}
	}
	if s.DocumentID.Source != "" {
		if p.docID, err = compileExpr(env, s, "document_id", s.DocumentID); err != nil {
			return nil, err
		}
		share(p.docID)
	}
	if s.DeleteWhen.Source != "" {
		if p.deleteIf, err = compileExpr(env, s, "delete_when", s.DeleteWhen); err != nil {
			return nil, err
		}
		share(p.deleteIf)
	}
	for i, u := range s.Updates {
		cu := update{op: u.Op, field: strings.Split(u.Field, ".")}
		name := fmt.Sprintf("updates[%d]", i)
		if u.Value.Source != "" {
			what := name + ".value"
			if u.Op == OpIncrement {
				what = name + ".by"
			}
			if cu.value, err = compileExpr(env, s, what, u.Value); err != nil {
				return nil, err
			}
			share(cu.value)
		}
		if u.When.Source != "" {
			if cu.when, err = compileExpr(env, s, name+".when", u.When); err != nil {
				return nil, err
			}
			share(cu.when)
		}
		p.updates = append(p.updates, cu)
	}
	return p, nil
}

// compileExpr compiles one expression (celexpr.Compile); an error points
// at the expression in the file: the scalar's YAML position, moved by the
// position inside the expression for a one-line plain or quoted scalar.
func compileExpr(env *cel.Env, s Spec, what string, e Expr) (*program, error) {
	prg, err := celexpr.Compile(env, e, s.CostLimit)
	if err != nil {
		var ce *celexpr.CompileError
		if !errors.As(err, &ce) {
			return nil, &Error{Pos: e.Pos, Msg: fmt.Sprintf("projection %s: %s: %v", s.Name, what, err)}
		}
		return nil, &Error{Pos: ce.Pos, Msg: fmt.Sprintf("projection %s: %s: expression %q, line %d column %d: %s", s.Name, what, e.Source, ce.Line, ce.Column, ce.Msg)}
	}
	return &program{what: what, expr: e, prg: prg}, nil
}

// Name is the projection's name.
func (p *Projection) Name() string { return p.spec.Name }

// Version is the declared version.
func (p *Projection) Version() int { return p.spec.Version }

// Spec returns the declaration.
func (p *Projection) Spec() Spec { return p.spec }

// Handles domain events of the declared types (and aggregate types).
func (p *Projection) Handles(e envelope.Envelope) bool {
	return e.Kind == envelope.KindDomain && p.types[e.EventType] && (len(p.aggTypes) == 0 || p.aggTypes[e.AggregateType])
}

// Template is the declared mapping and settings, with the fields sluice
// keeps: deleted (the read alias hides tombstones) and sluice (not
// indexed).
func (p *Projection) Template() projectionworker.Template {
	mappings := map[string]any{}
	for k, v := range p.spec.Mappings {
		mappings[k] = v
	}
	props := map[string]any{}
	if m, ok := mappings["properties"].(map[string]any); ok {
		for k, v := range m {
			props[k] = v
		}
	}
	props["deleted"] = map[string]any{"type": "boolean"}
	props["sluice"] = map[string]any{"type": "object", "enabled": false}
	mappings["properties"] = props
	settings := p.spec.Settings
	if settings == nil {
		settings = map[string]any{"number_of_shards": 1}
	}
	return projectionworker.Template{Settings: settings, Mappings: mappings,
		ReadFilter: map[string]any{"term": map[string]any{"deleted": false}}}
}

// EventTypes are the declared source event types, sorted.
func (p *Projection) EventTypes() []string {
	out := make([]string, 0, len(p.types))
	for t := range p.types {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// refersTo reports whether the expression source may read the variable
// name (an identifier occurrence outside string literals is enough; a
// false positive only costs a copy of the document).
func refersTo(src, name string) bool {
	for i := 0; i+len(name) <= len(src); i++ {
		if src[i:i+len(name)] != name {
			continue
		}
		before := i == 0 || !isIdent(src[i-1])
		after := i+len(name) == len(src) || !isIdent(src[i+len(name)])
		if before && after {
			return true
		}
	}
	return false
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
