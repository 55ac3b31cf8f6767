package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/shared/envelope"
)

// Operation is what a request does (docs/security.md, "Permissions").
type Operation string

// The operations a grant may name.
const (
	OpAppend    Operation = "append"     // POST /v1/streams/…/events
	OpRead      Operation = "read"       // stream, log, instance and command-status reads
	OpSubscribe Operation = "subscribe"  // the Server-Sent Events subscriptions
	OpCommand   Operation = "command"    // create, update, delete, batch of instances
	OpAdminRead Operation = "admin_read" // the admin API's reads and the console
	OpAdminAct  Operation = "admin_act"  // the admin API's actions
)

// Operations are every operation, in the order the docs list them.
var Operations = []Operation{OpAppend, OpRead, OpSubscribe, OpCommand, OpAdminRead, OpAdminAct}

// ParseOperation returns the operation named s ("*" is not one: a grant
// spells "*" as every operation).
func ParseOperation(s string) (Operation, error) {
	op := Operation(strings.TrimSpace(s))
	if slices.Contains(Operations, op) {
		return op, nil
	}
	return "", fmt.Errorf("unknown operation %q (want one of %s, or *)", s, joinOps(Operations))
}

func joinOps(ops []Operation) string {
	s := make([]string, len(ops))
	for i, o := range ops {
		s[i] = string(o)
	}
	return strings.Join(s, ", ")
}

// Resource is what an operation acts on: one aggregate's stream (Type,
// ID), or, with Prefix, every aggregate of Type whose id starts with ID (a
// create without an instance id, a batch, a log filtered by type). An
// admin operation's resource is the zero Resource.
type Resource struct {
	Type   string
	ID     string
	Prefix bool
}

// String names the resource as a pattern granting exactly it would:
// db:{db}/{class}/{instance} for instances, stream:{type}/{id} for others.
func (r Resource) String() string {
	star := ""
	if r.Prefix {
		star = "*"
	}
	switch {
	case r.Type == "":
		return "*"
	case r.Type == envelope.AggregateTypeInstance:
		parts := strings.SplitN(r.ID, ":", 3)
		if len(parts) == 3 {
			s := "db:" + parts[0] + "/" + parts[1]
			if parts[2] != "" || !r.Prefix {
				s += "/" + parts[2]
			}
			return s + star
		}
		return "db:" + r.ID + star
	}
	if r.ID == "" && r.Prefix {
		return "stream:" + r.Type
	}
	return "stream:" + r.Type + "/" + r.ID + star
}

// Pattern is a parsed resource pattern (docs/security.md, "Resource
// patterns"):
//
//   - everything
//     db:{db}[/{class}[/{id}]]   instances (aggregate type Instance) of a db, a class, an id
//     stream:{type}[/{id}]       the streams of an aggregate type, an aggregate id
//
// Each part is a glob in which only * is special (any run of characters,
// ":" and "/" included); a missing part is *.
type Pattern struct {
	raw  string
	kind byte     // '*', 'd' (db), 's' (stream)
	p    []string // db, class, instance id globs; or type, id globs
}

// ErrPattern is wrapped by every error of ParsePattern.
var ErrPattern = errors.New("invalid resource pattern")

// MaxPatternLen bounds a pattern's length.
const MaxPatternLen = 1024

// ParsePattern parses a resource pattern.
func ParsePattern(s string) (Pattern, error) {
	if len(s) > MaxPatternLen {
		return Pattern{}, fmt.Errorf("%w: longer than %d bytes", ErrPattern, MaxPatternLen)
	}
	if err := envelope.CheckText(s, "resource"); err != nil || strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return Pattern{}, fmt.Errorf("%w %q: no white space or control characters", ErrPattern, s)
	}
	if s == "*" {
		return Pattern{raw: s, kind: '*'}, nil
	}
	kind, rest, ok := strings.Cut(s, ":")
	if !ok || rest == "" {
		return Pattern{}, fmt.Errorf("%w %q: want *, db:{db}[/{class}[/{id}]] or stream:{type}[/{id}]", ErrPattern, s)
	}
	switch kind {
	case "db":
		parts := strings.SplitN(rest, "/", 3)
		for i, p := range parts {
			if p == "" {
				return Pattern{}, fmt.Errorf("%w %q: empty part", ErrPattern, s)
			}
			if i < 2 && strings.Contains(p, ":") {
				return Pattern{}, fmt.Errorf("%w %q: a db or class name holds no ':'", ErrPattern, s)
			}
		}
		for len(parts) < 3 {
			parts = append(parts, "*")
		}
		return Pattern{raw: s, kind: 'd', p: parts}, nil
	case "stream":
		typ, id, hasID := strings.Cut(rest, "/")
		if typ == "" || hasID && id == "" {
			return Pattern{}, fmt.Errorf("%w %q: empty part", ErrPattern, s)
		}
		if strings.Contains(typ, ":") {
			return Pattern{}, fmt.Errorf("%w %q: an aggregate type holds no ':'", ErrPattern, s)
		}
		if !hasID {
			id = "*"
		}
		return Pattern{raw: s, kind: 's', p: []string{typ, id}}, nil
	}
	return Pattern{}, fmt.Errorf("%w %q: unknown kind %q (want *, db: or stream:)", ErrPattern, s, kind)
}

// String returns the pattern as written.
func (p Pattern) String() string { return p.raw }

// Match reports whether the pattern covers r: every aggregate r names
// (with Prefix: at least one of them; the exact aggregate is checked
// again once known). The zero Resource (admin) is covered by * only.
func (p Pattern) Match(r Resource) bool {
	switch p.kind {
	case '*':
		return true
	case 0:
		return false
	}
	if r.Type == "" {
		return false
	}
	switch p.kind {
	case 'd':
		if r.Type != envelope.AggregateTypeInstance {
			return false
		}
		parts := strings.SplitN(r.ID, ":", 3)
		for i, part := range parts {
			last := i == len(parts)-1
			if last && r.Prefix {
				return globPrefix(p.p[i], part)
			}
			if !last || len(parts) == 3 {
				if !glob(p.p[i], part) {
					return false
				}
				continue
			}
			// An instance id without its parts: not an instance aggregate.
			return false
		}
		return true
	case 's':
		if !glob(p.p[0], r.Type) {
			return false
		}
		if r.Prefix {
			return globPrefix(p.p[1], r.ID)
		}
		return glob(p.p[1], r.ID)
	}
	return false
}

// glob reports whether s matches pattern g, where * matches any run of
// bytes and every other byte itself. Linear in len(g)·len(s) at worst.
func glob(g, s string) bool {
	gi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case gi < len(g) && g[gi] == '*':
			star, mark = gi, si
			gi++
		case gi < len(g) && g[gi] == s[si]:
			gi++
			si++
		case star >= 0:
			gi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for gi < len(g) && g[gi] == '*' {
		gi++
	}
	return gi == len(g)
}

// globPrefix reports whether some string beginning with prefix matches g.
func globPrefix(g, prefix string) bool {
	// States are positions in g; a * may absorb any byte.
	cur := map[int]bool{0: true}
	closure := func(m map[int]bool) {
		for changed := true; changed; {
			changed = false
			for i := range m {
				if i < len(g) && g[i] == '*' && !m[i+1] {
					m[i+1] = true
					changed = true
				}
			}
		}
	}
	closure(cur)
	for i := 0; i < len(prefix); i++ {
		next := map[int]bool{}
		for st := range cur {
			if st < len(g) && g[st] == '*' {
				next[st] = true
			}
			if st < len(g) && g[st] == prefix[i] {
				next[st+1] = true
			}
		}
		if len(next) == 0 {
			return false
		}
		closure(next)
		cur = next
	}
	return len(cur) > 0 // the rest of g can be written out after prefix
}

// Grant allows operations on the resources a pattern covers.
type Grant struct {
	Ops      []Operation `json:"ops"`
	Resource string      `json:"resource"`
	pattern  Pattern
}

// ParseGrant reads the command-line form "op[,op…]=pattern", where op may
// be * (every operation): "append,read=stream:Order/eu-*".
func ParseGrant(s string) (Grant, error) {
	ops, res, ok := strings.Cut(s, "=")
	if !ok {
		return Grant{}, fmt.Errorf("grant %q: want op[,op…]=pattern, e.g. append,read=db:orders", s)
	}
	g := Grant{Resource: res}
	for _, o := range strings.Split(ops, ",") {
		if strings.TrimSpace(o) == "*" {
			g.Ops = append(g.Ops, Operations...)
			continue
		}
		op, err := ParseOperation(o)
		if err != nil {
			return Grant{}, fmt.Errorf("grant %q: %w", s, err)
		}
		g.Ops = append(g.Ops, op)
	}
	return g.compile()
}

// compile checks the grant and parses its pattern.
func (g Grant) compile() (Grant, error) {
	if len(g.Ops) == 0 {
		return Grant{}, fmt.Errorf("grant on %q names no operation", g.Resource)
	}
	for _, op := range g.Ops {
		if !slices.Contains(Operations, op) {
			return Grant{}, fmt.Errorf("grant on %q: unknown operation %q", g.Resource, op)
		}
	}
	p, err := ParsePattern(g.Resource)
	if err != nil {
		return Grant{}, err
	}
	g.pattern = p
	slices.Sort(g.Ops)
	g.Ops = slices.Compact(g.Ops)
	return g, nil
}

// CheckAdminScope refuses a new grant of admin_read or admin_act on a
// pattern other than *: the admin resources are covered by * only, so
// such a grant would open nothing (a key made with it answered 403 on the
// admin API, where its maker expected a scoped operator). Keys already
// stored with one still load and rotate. Every operation (the op *, as in
// "*=db:orders") is let through: it asks for all that the pattern covers.
func CheckAdminScope(g Grant) error {
	// Every operation is told by the set of ops, not their count: a
	// grant read from JSON may repeat one (six admin_act are not *).
	if g.Resource == "*" || !slices.ContainsFunc(Operations, func(op Operation) bool { return !slices.Contains(g.Ops, op) }) {
		return nil
	}
	for _, op := range g.Ops {
		if op == OpAdminRead || op == OpAdminAct {
			return fmt.Errorf("grant on %q: %s applies to the pattern * only (the admin API is not scoped by db or stream)", g.Resource, op)
		}
	}
	return nil
}

// CompileGrants checks grants (read from JSON) and prepares them for
// matching.
func CompileGrants(gs []Grant) ([]Grant, error) {
	out := make([]Grant, len(gs))
	for i, g := range gs {
		c, err := g.compile()
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

// String is the command-line form.
func (g Grant) String() string { return joinOpsComma(g.Ops) + "=" + g.Resource }

func joinOpsComma(ops []Operation) string {
	if len(ops) == len(Operations) {
		return "*"
	}
	return strings.ReplaceAll(joinOps(ops), ", ", ",")
}
