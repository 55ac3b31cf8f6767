package esserver

import (
	"strings"
)

// sourceFilter selects which parts of _source are returned.
type sourceFilter struct {
	disabled bool
	includes []string
	excludes []string
}

func (f *sourceFilter) isNoop() bool {
	return f == nil || (!f.disabled && len(f.includes) == 0 && len(f.excludes) == 0)
}

// sourceFilterFromParams reads _source, _source_includes and
// _source_excludes query parameters. explicitTrue reports _source=true.
func sourceFilterFromParams(rq *request) (f *sourceFilter, explicit bool, err *esError) {
	f = &sourceFilter{}
	if v, ok := rq.q["_source"]; ok {
		switch v[0] {
		case "true", "":
			explicit = true
		case "false":
			f.disabled = true
			explicit = true
		default:
			f.includes = splitComma(v[0])
			explicit = true
		}
	}
	for _, k := range []string{"_source_includes", "_source_include"} {
		if v, ok := rq.q[k]; ok {
			f.includes = splitComma(v[0])
			f.disabled = false
			explicit = true
		}
	}
	for _, k := range []string{"_source_excludes", "_source_exclude"} {
		if v, ok := rq.q[k]; ok {
			f.excludes = splitComma(v[0])
			explicit = true
		}
	}
	return f, explicit, nil
}

// sourceFilterFromBody parses a _source value from a request body.
func sourceFilterFromBody(v any) (*sourceFilter, *esError) {
	f := &sourceFilter{}
	switch t := v.(type) {
	case nil:
		return nil, nil
	case bool:
		f.disabled = !t
	case string:
		if t == "true" || t == "false" {
			f.disabled = t == "false"
		} else {
			f.includes = []string{t}
		}
	case []any:
		l, ok := stringList(t)
		if !ok {
			return nil, errParsing("Unknown key for a VALUE_NUMBER in [_source].")
		}
		f.includes = l
	case map[string]any:
		for k, val := range t {
			l, ok := stringList(val)
			if !ok {
				return nil, errParsing("Unknown key for a %s in [%s].", jsonKind(val), k)
			}
			if s, isStr := val.(string); isStr {
				l = []string{s}
			}
			switch k {
			case "includes", "include":
				f.includes = l
			case "excludes", "exclude":
				f.excludes = l
			default:
				return nil, errParsing("Unknown key for a %s in [%s].", jsonKind(val), k)
			}
		}
	default:
		return nil, errParsing("Unknown key for a %s in [_source].", jsonKind(v))
	}
	return f, nil
}

// apply returns the filtered source object (nil when disabled).
func (f *sourceFilter) apply(src map[string]any) map[string]any {
	if f == nil {
		return src
	}
	if f.disabled {
		return nil
	}
	if len(f.includes) == 0 && len(f.excludes) == 0 {
		return src
	}
	out, _ := filterObject(src, "", f.includes, f.excludes, len(f.includes) == 0)
	if out == nil {
		out = map[string]any{}
	}
	return out
}

func pathMatchesAny(path string, pats []string) bool {
	for _, p := range pats {
		if globMatch(p, path) {
			return true
		}
	}
	return false
}

// mayMatchBelow reports whether a pattern could match a descendant of path.
func mayMatchBelow(path string, pats []string) bool {
	pre := path + "."
	for _, p := range pats {
		lit := p
		if i := strings.IndexByte(p, '*'); i >= 0 {
			lit = p[:i]
			if strings.HasPrefix(pre, lit) || strings.HasPrefix(lit, pre) {
				return true
			}
			continue
		}
		if strings.HasPrefix(lit, pre) {
			return true
		}
	}
	return false
}

func filterObject(m map[string]any, prefix string, inc, exc []string, included bool) (map[string]any, bool) {
	out := map[string]any{}
	for k, v := range m {
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		if pathMatchesAny(path, exc) {
			continue
		}
		in := included || pathMatchesAny(path, inc)
		fv, keep := filterValue(v, path, inc, exc, in)
		if keep {
			out[k] = fv
		}
	}
	if len(out) == 0 && !included {
		return nil, false
	}
	return out, true
}

func filterValue(v any, path string, inc, exc []string, included bool) (any, bool) {
	switch t := v.(type) {
	case map[string]any:
		if !included && !mayMatchBelow(path, inc) {
			return nil, false
		}
		if len(exc) == 0 && included {
			return t, true
		}
		return filterObject(t, path, inc, exc, included)
	case []any:
		if !included && !mayMatchBelow(path, inc) {
			return nil, false
		}
		var out []any
		for _, e := range t {
			if fv, keep := filterValue(e, path, inc, exc, included); keep {
				out = append(out, fv)
			}
		}
		if out == nil {
			if included {
				return []any{}, true
			}
			return nil, false
		}
		return out, true
	}
	return v, included
}

// extractValues returns the values at a dotted path in a source object,
// flattening arrays. Keys containing dots are matched too.
func extractValues(src map[string]any, path string) []any {
	var out []any
	collectValues(src, path, &out)
	return out
}

func collectValues(v any, path string, out *[]any) {
	switch t := v.(type) {
	case map[string]any:
		if path == "" {
			*out = append(*out, t)
			return
		}
		if val, ok := t[path]; ok {
			collectValues(val, "", out)
		}
		// try every split point: "a.b.c" -> t["a"]["b.c"], t["a.b"]["c"]
		for i := 0; i < len(path); i++ {
			if path[i] != '.' {
				continue
			}
			if sub, ok := t[path[:i]]; ok {
				collectValues(sub, path[i+1:], out)
			}
		}
	case []any:
		for _, e := range t {
			collectValues(e, path, out)
		}
	case nil:
	default:
		if path == "" {
			*out = append(*out, t)
		}
	}
}
