package schema

import (
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// Compatibility is a type's compatibility mode, as Confluent Schema
// Registry defines the modes (docs/schemas.md#compatibility-modes).
type Compatibility string

// The modes. BACKWARD: readers of the new version read the previous
// version's events. FORWARD: readers of the previous version read the new
// version's events. FULL: both. The TRANSITIVE variants check against every
// earlier version, not only the latest. NONE checks nothing.
const (
	Backward           Compatibility = "BACKWARD"
	BackwardTransitive Compatibility = "BACKWARD_TRANSITIVE"
	Forward            Compatibility = "FORWARD"
	ForwardTransitive  Compatibility = "FORWARD_TRANSITIVE"
	Full               Compatibility = "FULL"
	FullTransitive     Compatibility = "FULL_TRANSITIVE"
	None               Compatibility = "NONE"
)

// DefaultCompatibility is the mode of a type that names none.
const DefaultCompatibility = Backward

// Compatibilities lists the modes.
var Compatibilities = []Compatibility{Backward, BackwardTransitive, Forward, ForwardTransitive, Full, FullTransitive, None}

// ParseCompatibility reads a mode (case-insensitive); "" is the default.
func ParseCompatibility(s string) (Compatibility, error) {
	if s == "" {
		return DefaultCompatibility, nil
	}
	c := Compatibility(strings.ToUpper(s))
	if slices.Contains(Compatibilities, c) {
		return c, nil
	}
	return "", fmt.Errorf("compatibility %q: must be one of %v", s, Compatibilities)
}

func (c Compatibility) backward() bool {
	return c == Backward || c == BackwardTransitive || c == Full || c == FullTransitive
}
func (c Compatibility) forward() bool {
	return c == Forward || c == ForwardTransitive || c == Full || c == FullTransitive
}
func (c Compatibility) transitive() bool {
	return c == BackwardTransitive || c == ForwardTransitive || c == FullTransitive
}

// Version is one registered (or candidate) version of a type's schema.
type Version struct {
	Version int
	Schema  *Compiled
}

// CheckCompatibility checks candidate (which would be version next) against
// the earlier versions (ascending) under mode and returns every reason it
// breaks the mode, each naming the versions and the property, e.g. "v3
// removes required property `total` that v2 readers need". No reasons: the
// candidate is compatible.
func CheckCompatibility(mode Compatibility, candidate Version, earlier []Version) []string {
	if mode == None || len(earlier) == 0 {
		return nil
	}
	against := earlier
	if !mode.transitive() {
		against = earlier[len(earlier)-1:]
	}
	var out []string
	for _, old := range against {
		if mode.backward() {
			// New readers, old events: every old document must be a new one.
			out = append(out, readable(old, candidate, false)...)
		}
		if mode.forward() {
			// Old readers, new events.
			out = append(out, readable(candidate, old, true)...)
		}
	}
	return out
}

// readable returns why some document valid under writer may be invalid
// under reader (nothing: every writer document is a reader document).
// writerIsNew says the writer is the candidate (FORWARD), which words the
// reasons as what the new version does.
func readable(writer, reader Version, writerIsNew bool) []string {
	c := &checker{w: writer.Schema.doc, r: reader.Schema.doc, wv: writer.Version, rv: reader.Version, writerIsNew: writerIsNew}
	c.check(writer.Schema.doc, reader.Schema.doc, "", 0)
	return c.out
}

type checker struct {
	w, r        any // the roots, for local $refs
	wv, rv      int
	writerIsNew bool
	out         []string
}

func (c *checker) fail(path, format string, args ...any) {
	where := ""
	if path != "" {
		where = " (at " + path + ")"
	}
	c.out = append(c.out, fmt.Sprintf(format, args...)+where)
}

// newer and older name the candidate and the registered version.
func (c *checker) newer() string {
	if c.writerIsNew {
		return fmt.Sprintf("v%d", c.wv)
	}
	return fmt.Sprintf("v%d", c.rv)
}
func (c *checker) older() string {
	if c.writerIsNew {
		return fmt.Sprintf("v%d", c.rv)
	}
	return fmt.Sprintf("v%d", c.wv)
}

// annotations never constrain data.
var annotations = map[string]bool{"$schema": true, "$id": true, "$comment": true, "title": true, "description": true,
	"default": true, "examples": true, "deprecated": true, "readOnly": true, "writeOnly": true, "$defs": true, "definitions": true,
	"$anchor": true, "$vocabulary": true}

// handled are the keywords check compares; any other keyword that differs
// between the two schemas makes the pair unprovable, hence incompatible.
var handled = map[string]bool{"type": true, "enum": true, "const": true, "minimum": true, "maximum": true,
	"exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true, "minLength": true, "maxLength": true,
	"pattern": true, "format": true, "items": true, "minItems": true, "maxItems": true, "uniqueItems": true,
	"properties": true, "required": true, "additionalProperties": true, "minProperties": true, "maxProperties": true,
	"anyOf": true, "oneOf": true, "$ref": true}

const maxDepth = 64

// resolve follows a local $ref ("#/$defs/x", "#/definitions/x") in root.
func resolve(s any, root any) any {
	for range 16 {
		m, ok := s.(map[string]any)
		if !ok {
			return s
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return s
		}
		target := lookup(root, ref)
		if target == nil {
			return s
		}
		if len(m) == 1 {
			s = target
			continue
		}
		// $ref beside other keywords: the target's keywords, then these.
		merged := map[string]any{}
		if tm, ok := target.(map[string]any); ok {
			for k, v := range tm {
				merged[k] = v
			}
		}
		for k, v := range m {
			if k != "$ref" {
				merged[k] = v
			}
		}
		s = merged
	}
	return s
}

func lookup(root any, ref string) any {
	if ref == "#" {
		return root
	}
	for _, prefix := range []string{"#/$defs/", "#/definitions/"} {
		if name, ok := strings.CutPrefix(ref, prefix); ok && !strings.Contains(name, "/") {
			m, _ := root.(map[string]any)
			defs, _ := m[strings.TrimSuffix(strings.TrimPrefix(prefix, "#/"), "/")].(map[string]any)
			name = strings.NewReplacer("~1", "/", "~0", "~").Replace(name)
			return defs[name]
		}
	}
	return nil
}

// acceptsAll reports whether s admits every JSON value.
func acceptsAll(s any) bool {
	switch v := s.(type) {
	case bool:
		return v
	case map[string]any:
		for k := range v {
			if !annotations[k] {
				return false
			}
		}
		return true
	}
	return false
}

func isFalse(s any) bool { b, ok := s.(bool); return ok && !b }

// check appends a reason for every way a document valid under w may be
// invalid under r.
func (c *checker) check(w, r any, path string, depth int) {
	if depth > maxDepth {
		c.fail(path, "schemas nest deeper than %d levels; compatibility cannot be proven", maxDepth)
		return
	}
	w, r = resolve(w, c.w), resolve(r, c.r)
	if acceptsAll(r) || isFalse(w) {
		return
	}
	if isFalse(r) {
		c.fail(path, "%s accepts no value where %s accepts some", c.vr(), c.vw())
		return
	}
	wm, _ := w.(map[string]any)
	rm, _ := r.(map[string]any)
	if wm == nil {
		wm = map[string]any{} // true
	}
	// Combinations first: a writer's alternatives must each be readable.
	if alts, ok := alternatives(wm); ok {
		rest := without(wm, "anyOf", "oneOf")
		for i, a := range alts {
			c.check(mergeSchemas(rest, a), r, path, depth+1)
			_ = i
		}
		return
	}
	if alts, ok := alternatives(rm); ok {
		rest := without(rm, "anyOf", "oneOf")
		if len(rest) > 0 {
			c.check(wm, rest, path, depth+1)
		}
		for _, a := range alts {
			sub := &checker{w: c.w, r: c.r, wv: c.wv, rv: c.rv, writerIsNew: c.writerIsNew}
			sub.check(wm, a, path, depth+1)
			if len(sub.out) == 0 {
				return
			}
		}
		c.fail(path, "%s matches none of the alternatives (anyOf/oneOf) %s accepts", c.vw(), c.vr())
		return
	}
	for k, rv := range rm {
		if annotations[k] || handled[k] {
			continue
		}
		if !reflect.DeepEqual(wm[k], rv) {
			c.fail(path, "keyword %s differs between %s and %s; its compatibility cannot be proven", k, c.older(), c.newer())
		}
	}
	c.checkType(wm, rm, path)
	c.checkEnum(wm, rm, path)
	c.checkBounds(wm, rm, path)
	if !equalIfPresent(wm, rm, "pattern") {
		c.fail(path, "%s requires pattern %v, which %s does not guarantee", c.vr(), rm["pattern"], c.vw())
	}
	if !equalIfPresent(wm, rm, "format") {
		c.fail(path, "%s requires format %v, which %s does not guarantee", c.vr(), rm["format"], c.vw())
	}
	if rm["uniqueItems"] == true && wm["uniqueItems"] != true {
		c.fail(path, "%s requires unique items, which %s does not guarantee", c.vr(), c.vw())
	}
	if ri, ok := rm["items"]; ok {
		wi, ok := wm["items"]
		if !ok {
			wi = true
		}
		c.check(wi, ri, path+"/items", depth+1)
	}
	c.checkObject(wm, rm, path, depth)
}

// vw and vr word the writer and the reader for a reason.
func (c *checker) vw() string { return fmt.Sprintf("v%d", c.wv) }
func (c *checker) vr() string { return fmt.Sprintf("v%d", c.rv) }

func alternatives(m map[string]any) ([]any, bool) {
	for _, k := range []string{"anyOf", "oneOf"} {
		if a, ok := m[k].([]any); ok {
			return a, true
		}
	}
	return nil, false
}

func without(m map[string]any, keys ...string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}

// mergeSchemas is base with the keywords of alt (an alternative of base).
func mergeSchemas(base map[string]any, alt any) any {
	am, ok := alt.(map[string]any)
	if !ok {
		if len(base) == 0 {
			return alt
		}
		if isFalse(alt) {
			return false
		}
		return base
	}
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range am {
		out[k] = v
	}
	return out
}

func equalIfPresent(w, r map[string]any, k string) bool {
	rv, ok := r[k]
	return !ok || reflect.DeepEqual(w[k], rv)
}

// types returns the set of JSON types s admits (nil: all).
func types(m map[string]any) map[string]bool {
	switch t := m["type"].(type) {
	case string:
		return map[string]bool{t: true}
	case []any:
		out := map[string]bool{}
		for _, x := range t {
			if s, ok := x.(string); ok {
				out[s] = true
			}
		}
		return out
	}
	return nil
}

func (c *checker) checkType(w, r map[string]any, path string) {
	rt := types(r)
	if rt == nil {
		return
	}
	wt := types(w)
	if wt == nil {
		if _, hasEnum := w["enum"]; hasEnum {
			return // the enum check below decides
		}
		if _, hasConst := w["const"]; hasConst {
			return
		}
		c.fail(path, "%s restricts the type to %s, which %s leaves open", c.vr(), setString(rt), c.vw())
		return
	}
	var lost []string
	for t := range wt {
		if rt[t] || (t == "integer" && rt["number"]) {
			continue
		}
		lost = append(lost, t)
	}
	if len(lost) > 0 {
		sort.Strings(lost)
		c.fail(path, "%s changes the type from %s to %s: %s values of %s fail %s readers", c.newer(), setString(typesOf(c, w, r, true)), setString(typesOf(c, w, r, false)),
			strings.Join(lost, ", "), c.vw(), c.vr())
	}
}

// typesOf returns the older (old=true) or newer schema's types.
func typesOf(c *checker, w, r map[string]any, old bool) map[string]bool {
	if old == c.writerIsNew {
		return types(r)
	}
	return types(w)
}

func setString(s map[string]bool) string {
	var out []string
	for t := range s {
		out = append(out, t)
	}
	sort.Strings(out)
	return strings.Join(out, "|")
}

func (c *checker) checkEnum(w, r map[string]any, path string) {
	allowed, ok := r["enum"].([]any)
	if cv, isConst := r["const"]; isConst {
		allowed, ok = []any{cv}, true
	}
	if !ok {
		return
	}
	var produced []any
	if we, ok := w["enum"].([]any); ok {
		produced = we
	} else if wc, ok := w["const"]; ok {
		produced = []any{wc}
	} else {
		c.fail(path, "%s restricts the values to %s, which %s does not", c.vr(), jsonString(allowed), c.vw())
		return
	}
	for _, p := range produced {
		if !slices.ContainsFunc(allowed, func(a any) bool { return reflect.DeepEqual(a, p) }) {
			c.fail(path, "%s allows the value %s, which %s refuses", c.vw(), jsonString(p), c.vr())
		}
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// bound is a numeric keyword and whether a larger value is stricter.
type bound struct {
	kw       string
	stricter int // +1: a larger value is stricter (minimum); -1: a smaller one (maximum)
	what     string
}

var bounds = []bound{
	{"minimum", +1, "minimum"}, {"exclusiveMinimum", +1, "exclusive minimum"},
	{"maximum", -1, "maximum"}, {"exclusiveMaximum", -1, "exclusive maximum"},
	{"minLength", +1, "minimum length"}, {"maxLength", -1, "maximum length"},
	{"minItems", +1, "minimum number of items"}, {"maxItems", -1, "maximum number of items"},
	{"minProperties", +1, "minimum number of properties"}, {"maxProperties", -1, "maximum number of properties"},
}

func num(v any) (*big.Rat, bool) {
	var s string
	switch n := v.(type) {
	case json.Number:
		s = string(n)
	case float64:
		s = fmt.Sprint(n)
	default:
		return nil, false
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

func (c *checker) checkBounds(w, r map[string]any, path string) {
	for _, b := range bounds {
		rb, ok := num(r[b.kw])
		if !ok {
			continue
		}
		wb, ok := num(w[b.kw])
		if !ok {
			c.fail(path, "%s adds a %s of %s that %s does not have", c.vr(), b.what, rb.RatString(), c.vw())
			continue
		}
		if wb.Cmp(rb)*b.stricter < 0 {
			c.fail(path, "%s has a stricter %s (%s) than %s (%s)", c.vr(), b.what, rb.RatString(), c.vw(), wb.RatString())
		}
	}
	if rm, ok := num(r["multipleOf"]); ok {
		wm, ok := num(w["multipleOf"])
		if !ok || !new(big.Rat).Quo(wm, rm).IsInt() {
			c.fail(path, "%s requires multiples of %s, which %s does not guarantee", c.vr(), rm.RatString(), c.vw())
		}
	}
}

func required(m map[string]any) map[string]bool {
	out := map[string]bool{}
	if l, ok := m["required"].([]any); ok {
		for _, x := range l {
			if s, ok := x.(string); ok {
				out[s] = true
			}
		}
	}
	return out
}

func props(m map[string]any) map[string]any {
	p, _ := m["properties"].(map[string]any)
	return p
}

// additional is what a schema says of properties it does not name
// (true when absent: the open content model).
func additional(m map[string]any) any {
	if a, ok := m["additionalProperties"]; ok {
		return a
	}
	return true
}

func (c *checker) checkObject(w, r map[string]any, path string, depth int) {
	wp, rp := props(w), props(r)
	wreq, rreq := required(w), required(r)
	for _, p := range sortedKeys(rreq) {
		if wreq[p] {
			continue
		}
		_, declared := wp[p]
		switch {
		case c.writerIsNew && !declared:
			c.fail(path, "%s removes required property `%s` that %s readers need", c.newer(), p, c.older())
		case c.writerIsNew:
			c.fail(path, "%s makes property `%s` optional, but %s readers require it", c.newer(), p, c.older())
		case !declared:
			c.fail(path, "%s adds required property `%s` that %s events lack", c.newer(), p, c.older())
		default:
			c.fail(path, "%s requires property `%s`, which is optional in %s events", c.newer(), p, c.older())
		}
	}
	for _, p := range sortedKeys(rp) {
		sub := path + "/properties/" + p
		if ws, ok := wp[p]; ok {
			c.check(ws, rp[p], sub, depth+1)
			continue
		}
		// The reader names a property the writer does not.
		wa := resolve(additional(w), c.w)
		switch {
		case isFalse(wa):
			// closed writer: never produces it
		case acceptsAll(wa) && !acceptsAll(resolve(rp[p], c.r)):
			if c.writerIsNew {
				c.fail(path, "%s removes property `%s` but stays open, so its events may hold any `%s` that %s readers refuse", c.newer(), p, p, c.older())
			} else {
				c.fail(path, "%s adds property `%s` to an open content model: %s events may already hold a `%s` of any shape (close %s with additionalProperties: false first)", c.newer(), p, c.older(), p, c.older())
			}
		default:
			c.check(wa, rp[p], sub, depth+1)
		}
	}
	ra := resolve(additional(r), c.r)
	for _, p := range sortedKeys(wp) {
		if _, ok := rp[p]; ok {
			continue
		}
		// The writer names a property the reader does not.
		switch {
		case acceptsAll(ra):
		case isFalse(ra):
			if c.writerIsNew {
				c.fail(path, "%s adds property `%s`, which the closed content model of %s readers refuses", c.newer(), p, c.older())
			} else {
				c.fail(path, "%s removes property `%s` from a closed content model: %s events that hold it fail", c.newer(), p, c.older())
			}
		default:
			c.check(wp[p], ra, path+"/properties/"+p, depth+1)
		}
	}
	if _, ok := r["additionalProperties"]; ok && !acceptsAll(ra) {
		wa := resolve(additional(w), c.w)
		if !isFalse(wa) {
			if isFalse(ra) {
				c.fail(path, "%s closes the content model (additionalProperties: false) that %s leaves open", c.vr(), c.vw())
			} else {
				c.check(wa, ra, path+"/additionalProperties", depth+1)
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
