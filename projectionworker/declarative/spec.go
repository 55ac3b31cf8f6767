package declarative

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/shared/celexpr"
)

// Spec is one projection as declared in YAML.
//
//	name: order_totals            # [a-z0-9][a-z0-9_-]{0,62}
//	version: 1                    # a new version rebuilds (blue/green)
//	scope: shop                   # the {db} part of the index names
//	event_types: [ORDER_PLACED]   # source event types
//	aggregate_types: [Order]      # optional filter
//	key: event.data.customer_id   # CEL: the document's key (a string)
//	document_id: '"c-" + key'     # CEL, optional (default: key)
//	updates:
//	  - increment: total          # set | unset | increment | append | merge
//	    by: event.data.amount     # value: for set, append, merge
//	    when: event.event_type == "ORDER_PLACED"
//	delete_when: event.event_type == "CUSTOMER_DELETED"
//	mappings: {properties: {total: {type: double}}}
//	settings: {number_of_shards: 1}
//	cost_limit: 10000             # CEL cost units per expression
//	upcast: latest                # events upcast to their type's latest schema version
type Spec struct {
	File           string
	Name           string
	Version        int
	Scope          string
	EventTypes     []string
	AggregateTypes []string
	Key            Expr
	DocumentID     Expr
	Updates        []UpdateSpec
	DeleteWhen     Expr
	Mappings       map[string]any
	Settings       map[string]any
	CostLimit      uint64
	// Upcast is how the projection reads events: UpcastStored ("", the
	// default: as stored) or UpcastLatest (each upcast to its type's latest
	// registered schema version first; docs/schemas.md#upcasting-on-read).
	Upcast string
}

// Values of upcast:.
const (
	UpcastStored = "stored"
	UpcastLatest = "latest"
)

// Expr is an expression and where it was written (celexpr.Expr).
type Expr = celexpr.Expr

// Pos is a position in a YAML file (1-based; celexpr.Pos). Quoted tells
// that the scalar was quoted (the expression then starts one column later).
type Pos = celexpr.Pos

// Update operations.
const (
	OpSet       = "set"
	OpUnset     = "unset"
	OpIncrement = "increment"
	OpAppend    = "append"
	OpMerge     = "merge"
)

// UpdateSpec is one field update.
type UpdateSpec struct {
	Op    string
	Field string // dotted path in the document
	Value Expr   // set, append, merge: the value; increment: by (default 1)
	When  Expr   // optional condition
	Pos   Pos
}

// Error is a problem of a projections file, at a position.
type Error struct {
	Pos Pos
	Msg string
}

func (e *Error) Error() string { return e.Pos.String() + ": " + e.Msg }

// LoadFiles reads a projections file, or every *.yaml and *.yml file of a
// directory (in name order). A file holds one projection, a list of them,
// or {projections: [...]}; several YAML documents are allowed.
func LoadFiles(path string) ([]Spec, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("declarative: %w", err)
	}
	files := []string{path}
	if fi.IsDir() {
		files = nil
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("declarative: %w", err)
		}
		for _, e := range entries {
			if n := e.Name(); !e.IsDir() && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				files = append(files, filepath.Join(path, n))
			}
		}
		sort.Strings(files)
	}
	var out []Spec
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("declarative: %w", err)
		}
		specs, err := Parse(f, b)
		if err != nil {
			return nil, err
		}
		out = append(out, specs...)
	}
	seen := map[string]string{}
	for _, s := range out {
		if prev, dup := seen[s.Name]; dup {
			return nil, fmt.Errorf("declarative: projection %q is declared twice (%s and %s)", s.Name, prev, s.File)
		}
		seen[s.Name] = s.File
	}
	return out, nil
}

// Parse reads the projections of one file's text.
func Parse(file string, b []byte) ([]Spec, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var out []Spec
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("declarative: %s: %w", file, err)
		}
		if len(doc.Content) == 0 {
			continue
		}
		root := doc.Content[0]
		var items []*yaml.Node
		switch {
		case root.Kind == yaml.SequenceNode:
			items = root.Content
		case root.Kind == yaml.MappingNode && lookup(root, "projections") != nil:
			for i := 0; i < len(root.Content); i += 2 {
				if root.Content[i].Value != "projections" {
					return nil, errAt(file, root.Content[i], "unknown key %q (a file holds projections: [...], a list, or one projection)", root.Content[i].Value)
				}
			}
			list := lookup(root, "projections")
			if list.Kind != yaml.SequenceNode {
				return nil, errAt(file, list, "projections must be a list")
			}
			items = list.Content
		default:
			items = []*yaml.Node{root}
		}
		for _, n := range items {
			s, err := parseSpec(file, n)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	}
	return out, nil
}

func lookup(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func posOf(file string, n *yaml.Node) Pos {
	return Pos{File: file, Line: n.Line, Column: n.Column, Quoted: n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0}
}

func errAt(file string, n *yaml.Node, format string, args ...any) error {
	return &Error{Pos: posOf(file, n), Msg: fmt.Sprintf(format, args...)}
}

func scalar(file string, n *yaml.Node, what string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", errAt(file, n, "%s must be a scalar", what)
	}
	return n.Value, nil
}

func expr(file string, n *yaml.Node, what string) (Expr, error) {
	s, err := scalar(file, n, what)
	if err != nil {
		return Expr{}, err
	}
	if strings.TrimSpace(s) == "" {
		return Expr{}, errAt(file, n, "%s must not be empty", what)
	}
	return Expr{Source: s, Pos: posOf(file, n)}, nil
}

func stringList(file string, n *yaml.Node, what string) ([]string, error) {
	if n.Kind == yaml.ScalarNode {
		return []string{n.Value}, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, errAt(file, n, "%s must be a list of strings", what)
	}
	var out []string
	for _, c := range n.Content {
		v, err := scalar(file, c, what)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func parseSpec(file string, n *yaml.Node) (Spec, error) {
	s := Spec{File: file, Scope: "default", CostLimit: DefaultCostLimit}
	if n.Kind != yaml.MappingNode {
		return s, errAt(file, n, "a projection must be a mapping")
	}
	var err error
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "name":
			s.Name, err = scalar(file, v, "name")
		case "version":
			err = v.Decode(&s.Version)
			if err != nil || s.Version < 1 {
				err = errAt(file, v, "version must be an integer >= 1")
			}
		case "scope":
			s.Scope, err = scalar(file, v, "scope")
		case "event_types":
			s.EventTypes, err = stringList(file, v, "event_types")
		case "aggregate_types":
			s.AggregateTypes, err = stringList(file, v, "aggregate_types")
		case "key":
			s.Key, err = expr(file, v, "key")
		case "document_id":
			s.DocumentID, err = expr(file, v, "document_id")
		case "delete_when":
			s.DeleteWhen, err = expr(file, v, "delete_when")
		case "updates":
			if v.Kind != yaml.SequenceNode {
				err = errAt(file, v, "updates must be a list")
				break
			}
			for _, u := range v.Content {
				us, uerr := parseUpdate(file, u)
				if uerr != nil {
					return s, uerr
				}
				s.Updates = append(s.Updates, us)
			}
		case "mappings":
			if err = v.Decode(&s.Mappings); err != nil {
				err = errAt(file, v, "mappings must be a mapping: %v", err)
			}
		case "settings":
			if err = v.Decode(&s.Settings); err != nil {
				err = errAt(file, v, "settings must be a mapping: %v", err)
			}
		case "cost_limit":
			if err = v.Decode(&s.CostLimit); err != nil || s.CostLimit == 0 {
				err = errAt(file, v, "cost_limit must be an integer >= 1")
			}
		case "upcast":
			if s.Upcast, err = scalar(file, v, "upcast"); err == nil && s.Upcast != UpcastLatest && s.Upcast != UpcastStored {
				err = errAt(file, v, "upcast must be %q (events upcast to their type's latest schema version) or %q (the default), got %q", UpcastLatest, UpcastStored, s.Upcast)
			}
		default:
			err = errAt(file, k, "unknown key %q", k.Value)
		}
		if err != nil {
			return s, err
		}
	}
	switch {
	case s.Name == "":
		return s, errAt(file, n, "name is required")
	case s.Version == 0:
		return s, errAt(file, n, "projection %s: version is required", s.Name)
	case len(s.EventTypes) == 0:
		return s, errAt(file, n, "projection %s: event_types is required", s.Name)
	case s.Key.Source == "":
		return s, errAt(file, n, "projection %s: key is required", s.Name)
	case len(s.Updates) == 0 && s.DeleteWhen.Source == "":
		return s, errAt(file, n, "projection %s: updates (or delete_when) is required", s.Name)
	}
	return s, nil
}

func parseUpdate(file string, n *yaml.Node) (UpdateSpec, error) {
	u := UpdateSpec{Pos: posOf(file, n)}
	if n.Kind != yaml.MappingNode {
		return u, errAt(file, n, "an update must be a mapping such as {set: field, value: expression}")
	}
	var valueKey *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case OpSet, OpUnset, OpIncrement, OpAppend, OpMerge:
			if u.Op != "" {
				return u, errAt(file, k, "an update has one operation; %s and %s given", u.Op, k.Value)
			}
			u.Op = k.Value
			f, err := scalar(file, v, k.Value)
			if err != nil {
				return u, err
			}
			if f == "" || strings.HasPrefix(f, ".") || strings.HasSuffix(f, ".") || strings.Contains(f, "..") {
				return u, errAt(file, v, "field %q must be a dotted path of non-empty names", f)
			}
			if f == "sluice" || strings.HasPrefix(f, "sluice.") || f == "deleted" {
				return u, errAt(file, v, "field %q is kept by sluice", f)
			}
			u.Field = f
		case "value", "by":
			e, err := expr(file, v, k.Value)
			if err != nil {
				return u, err
			}
			u.Value, valueKey = e, k
		case "when":
			e, err := expr(file, v, "when")
			if err != nil {
				return u, err
			}
			u.When = e
		default:
			return u, errAt(file, k, "unknown key %q in an update", k.Value)
		}
	}
	switch {
	case u.Op == "":
		return u, errAt(file, n, "an update needs one of set, unset, increment, append, merge")
	case u.Op == OpUnset && valueKey != nil:
		return u, errAt(file, valueKey, "unset takes no value")
	case u.Op == OpIncrement && valueKey != nil && valueKey.Value != "by":
		return u, errAt(file, valueKey, "increment takes by:, not value:")
	case u.Op != OpIncrement && valueKey != nil && valueKey.Value == "by":
		return u, errAt(file, valueKey, "%s takes value:, not by:", u.Op)
	case (u.Op == OpSet || u.Op == OpAppend || u.Op == OpMerge) && valueKey == nil:
		return u, errAt(file, n, "%s needs value:", u.Op)
	}
	return u, nil
}
