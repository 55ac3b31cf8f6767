package esserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// fieldMapping is one node of an index mapping. Objects have Properties;
// leaves have a Type.
type fieldMapping struct {
	Type        string
	Properties  map[string]*fieldMapping
	Fields      map[string]*fieldMapping
	Format      string
	Store       bool
	IgnoreAbove int
	Dynamic     string         // objects only: "", "true", "false", "strict", "runtime"
	Params      map[string]any // other parameters, rendered back verbatim
}

func (f *fieldMapping) isObject() bool {
	return f.Type == "" || f.Type == "object" || f.Type == "nested"
}

// disabled reports `enabled: false` (an object field, or the whole
// mapping): Elasticsearch keeps the value in _source but neither parses,
// validates, maps nor indexes what is inside it, whatever its JSON type.
func (f *fieldMapping) disabled() bool {
	switch v := f.Params["enabled"].(type) {
	case bool:
		return !v
	case string:
		return v == "false"
	}
	return false
}

var knownFieldTypes = map[string]bool{
	"text": true, "keyword": true, "long": true, "integer": true, "short": true, "byte": true,
	"double": true, "float": true, "half_float": true, "scaled_float": true, "unsigned_long": true,
	"boolean": true, "date": true, "date_nanos": true, "object": true, "nested": true,
	"flattened": true, "ip": true, "binary": true, "constant_keyword": true, "wildcard": true,
	"match_only_text": true, "search_as_you_type": true, "version": true, "geo_point": true,
	"geo_shape": true, "point": true, "shape": true, "integer_range": true, "long_range": true,
	"float_range": true, "double_range": true, "date_range": true, "ip_range": true,
	"alias": true, "token_count": true, "completion": true, "percolator": true, "join": true,
	"rank_feature": true, "rank_features": true, "dense_vector": true, "sparse_vector": true,
	"semantic_text": true, "histogram": true, "aggregate_metric_double": true, "passthrough": true,
}

var knownRuntimeTypes = map[string]bool{
	"keyword": true, "long": true, "double": true, "date": true, "boolean": true, "ip": true,
	"geo_point": true, "composite": true, "lookup": true,
}

func isNumericType(t string) bool {
	switch t {
	case "long", "integer", "short", "byte", "double", "float", "half_float", "scaled_float", "unsigned_long", "token_count":
		return true
	}
	return false
}

func isIntegerType(t string) bool {
	switch t {
	case "long", "integer", "short", "byte", "unsigned_long", "token_count":
		return true
	}
	return false
}

func isDateType(t string) bool { return t == "date" || t == "date_nanos" }

func isKeywordLike(t string) bool {
	switch t {
	case "keyword", "constant_keyword", "wildcard", "version", "ip", "flattened":
		return true
	}
	return false
}

func isTextType(t string) bool {
	return t == "text" || t == "match_only_text" || t == "search_as_you_type"
}

func mappingFailure(inner *esError) *esError {
	e := errMapperParsing("Failed to parse mapping: %s", inner.Reason)
	e.CausedBy = inner
	e.RootCause = []*esError{inner}
	return e
}

// parseMappings parses the "mappings" object of a create-index or
// put-mapping request into a root mapping.
func parseMappings(v any) (*fieldMapping, *esError) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errMapperParsing("Failed to parse mapping: Expected map for property [mappings] but got a %s", goKind(v))
	}
	root := &fieldMapping{Properties: map[string]*fieldMapping{}, Params: map[string]any{}}
	for k, val := range m {
		switch k {
		case "properties":
			props, ok := val.(map[string]any)
			if !ok {
				return nil, mappingFailure(errMapperParsing("Expected map for property [properties] but got a %s", goKind(val)))
			}
			if err := parseProperties(root, props); err != nil {
				return nil, err
			}
		case "dynamic":
			s, _ := asString(val)
			switch s {
			case "true", "false", "strict", "runtime":
				root.Dynamic = s
			default:
				return nil, mappingFailure(errMapperParsing("Could not convert [dynamic.dynamic] to boolean"))
			}
		case "runtime":
			rt, ok := val.(map[string]any)
			if !ok {
				return nil, mappingFailure(errMapperParsing("Expected map for runtime fields but got a %s", goKind(val)))
			}
			for name, def := range rt {
				d, ok := def.(map[string]any)
				if !ok {
					return nil, mappingFailure(errMapperParsing("Expected map for runtime field [%s] definition but got a %s", name, goKind(def)))
				}
				t, _ := d["type"].(string)
				if !knownRuntimeTypes[t] {
					return nil, mappingFailure(errMapperParsing("The mapper type [%s] declared on runtime field [%s] does not exist. It might have been created within a future version or requires a plugin to be installed. Check the documentation.", t, name))
				}
			}
			root.Params[k] = val
		default:
			root.Params[k] = val
		}
	}
	return root, nil
}

func goKind(v any) string {
	switch v.(type) {
	case string:
		return "java.lang.String"
	case bool:
		return "java.lang.Boolean"
	case []any:
		return "java.util.ArrayList"
	case json.Number, float64, int:
		return "java.lang.Integer"
	}
	return "null"
}

func parseProperties(parent *fieldMapping, props map[string]any) *esError {
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		def, ok := props[name].(map[string]any)
		if !ok {
			return mappingFailure(errMapperParsing("Expected map for property [fields] on field [%s] but got a %s", name, goKind(props[name])))
		}
		if strings.TrimSpace(name) == "" {
			inner := errIllegalArgument("field name cannot be an empty string")
			return mappingFailure(inner)
		}
		fm, err := parseField(name, def)
		if err != nil {
			return err
		}
		// Dotted names define object paths.
		target := parent
		parts := strings.Split(name, ".")
		for _, p := range parts[:len(parts)-1] {
			if p == "" {
				return mappingFailure(errIllegalArgument("field name cannot contain only whitespaces or empty path segments: [%s]", name))
			}
			target = target.objectChild(p)
		}
		leaf := parts[len(parts)-1]
		if existing := target.Properties[leaf]; existing != nil {
			if err := mergeField(leaf, existing, fm); err != nil {
				return err
			}
		} else {
			target.Properties[leaf] = fm
		}
	}
	return nil
}

func parseField(name string, def map[string]any) (*fieldMapping, *esError) {
	fm := &fieldMapping{Params: map[string]any{}}
	t, hasType := def["type"]
	if hasType {
		ts, ok := t.(string)
		if !ok || !knownFieldTypes[ts] {
			s, _ := asString(t)
			return nil, mappingFailure(errMapperParsing("The mapper type [%s] declared on field [%s] does not exist. It might have been created within a future version or requires a plugin to be installed. Check the documentation.", s, name))
		}
		fm.Type = ts
	} else if _, hasProps := def["properties"]; !hasProps {
		// Neither type nor properties: an object with no sub-fields.
		fm.Type = ""
	}
	if fm.Type == "object" {
		fm.Type = ""
	}
	for k, v := range def {
		switch k {
		case "type":
		case "properties":
			props, ok := v.(map[string]any)
			if !ok {
				return nil, mappingFailure(errMapperParsing("Expected map for property [properties] on field [%s] but got a %s", name, goKind(v)))
			}
			if fm.Properties == nil {
				fm.Properties = map[string]*fieldMapping{}
			}
			if err := parseProperties(fm, props); err != nil {
				return nil, err
			}
		case "fields":
			fields, ok := v.(map[string]any)
			if !ok {
				return nil, mappingFailure(errMapperParsing("Expected map for property [fields] on field [%s] but got a %s", name, goKind(v)))
			}
			fm.Fields = map[string]*fieldMapping{}
			for sub, sdef := range fields {
				sm, ok := sdef.(map[string]any)
				if !ok {
					return nil, mappingFailure(errMapperParsing("Expected map for property [fields] on field [%s] but got a %s", sub, goKind(sdef)))
				}
				if _, ok := sm["type"]; !ok {
					sm = mergeMaps(sm, map[string]any{"type": "text"})
				}
				sf, err := parseField(sub, sm)
				if err != nil {
					return nil, err
				}
				fm.Fields[sub] = sf
			}
		case "format":
			fm.Format, _ = v.(string)
			fm.Params[k] = v
		case "store":
			b, _ := asString(v)
			fm.Store = b == "true"
			fm.Params[k] = v
		case "ignore_above":
			n, _ := toInt(v)
			fm.IgnoreAbove = int(n)
			fm.Params[k] = v
		case "dynamic":
			s, _ := asString(v)
			fm.Dynamic = s
		default:
			fm.Params[k] = v
		}
	}
	if fm.isObject() && fm.Properties == nil {
		fm.Properties = map[string]*fieldMapping{}
	}
	return fm, nil
}

func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func typeName(f *fieldMapping) string {
	if f.Type == "" {
		return "object"
	}
	return f.Type
}

// mergeField merges an update into an existing field mapping.
func mergeField(name string, existing, upd *fieldMapping) *esError {
	if typeName(existing) != typeName(upd) {
		return errIllegalArgument("mapper [%s] cannot be changed from type [%s] to [%s]", name, typeName(existing), typeName(upd))
	}
	if existing.isObject() {
		for k, v := range upd.Properties {
			if cur := existing.Properties[k]; cur != nil {
				if err := mergeField(name+"."+k, cur, v); err != nil {
					return err
				}
			} else {
				existing.Properties[k] = v
			}
		}
		if upd.Dynamic != "" {
			existing.Dynamic = upd.Dynamic
		}
		return nil
	}
	for k, v := range upd.Params {
		existing.Params[k] = v
	}
	if upd.Format != "" {
		existing.Format = upd.Format
	}
	existing.Store = existing.Store || upd.Store
	if upd.IgnoreAbove != 0 {
		existing.IgnoreAbove = upd.IgnoreAbove
	}
	for k, v := range upd.Fields {
		if existing.Fields == nil {
			existing.Fields = map[string]*fieldMapping{}
		}
		existing.Fields[k] = v
	}
	return nil
}

// mergeRoot merges a parsed put-mapping body into the index's root mapping.
func mergeRoot(root, upd *fieldMapping) *esError {
	// Validate first on a copy so a failure leaves the mapping untouched.
	cp := cloneMapping(root)
	for k, v := range upd.Properties {
		if cur := cp.Properties[k]; cur != nil {
			if err := mergeField(k, cur, v); err != nil {
				return err
			}
		} else {
			cp.Properties[k] = v
		}
	}
	if upd.Dynamic != "" {
		cp.Dynamic = upd.Dynamic
	}
	for k, v := range upd.Params {
		cp.Params[k] = v
	}
	*root = *cp
	return nil
}

func cloneMapping(f *fieldMapping) *fieldMapping {
	if f == nil {
		return nil
	}
	c := *f
	if f.Properties != nil {
		c.Properties = make(map[string]*fieldMapping, len(f.Properties))
		for k, v := range f.Properties {
			c.Properties[k] = cloneMapping(v)
		}
	}
	if f.Fields != nil {
		c.Fields = make(map[string]*fieldMapping, len(f.Fields))
		for k, v := range f.Fields {
			c.Fields[k] = cloneMapping(v)
		}
	}
	if f.Params != nil {
		c.Params = make(map[string]any, len(f.Params))
		for k, v := range f.Params {
			c.Params[k] = v
		}
	}
	return &c
}

// render returns the JSON form of a field mapping.
func (f *fieldMapping) render() map[string]any {
	out := map[string]any{}
	for k, v := range f.Params {
		out[k] = v
	}
	if f.isObject() {
		if f.Type == "nested" {
			out["type"] = "nested"
		}
		if f.Dynamic != "" {
			out["dynamic"] = f.Dynamic
		}
		if len(f.Properties) > 0 {
			props := map[string]any{}
			for k, v := range f.Properties {
				props[k] = v.render()
			}
			out["properties"] = props
		}
		return out
	}
	out["type"] = f.Type
	if len(f.Fields) > 0 {
		fields := map[string]any{}
		for k, v := range f.Fields {
			fields[k] = v.render()
		}
		out["fields"] = fields
	}
	return out
}

// lookupField resolves a dotted field name to its mapping. Multi-fields
// ("title.keyword") resolve to the sub-field with srcPath naming the parent.
func (f *fieldMapping) lookupField(name string) (fm *fieldMapping, srcPath string) {
	if f == nil {
		return nil, ""
	}
	parts := strings.Split(name, ".")
	cur := f
	for i := 0; i < len(parts); i++ {
		if cur.Properties != nil {
			// Try the longest dotted key first is unnecessary: mappings are
			// expanded to objects on parse.
			if next := cur.Properties[parts[i]]; next != nil {
				cur = next
				continue
			}
		}
		if cur.Fields != nil && i == len(parts)-1 {
			if sub := cur.Fields[parts[i]]; sub != nil {
				return sub, strings.Join(parts[:i], ".")
			}
		}
		return nil, ""
	}
	if cur == f {
		return nil, ""
	}
	return cur, name
}

// dynamicResult records what indexing a document would add to the mapping.
type mappingUpdate struct {
	path string
	fm   *fieldMapping
}

// applyDynamic walks a document source, validates values against the
// mapping and returns the new fields it introduces (not yet applied).
func applyDynamic(root *fieldMapping, src map[string]any, id string) ([]mappingUpdate, *esError) {
	if root.disabled() {
		return nil, nil
	}
	var ups []mappingUpdate
	err := walkDynamic(root, root, "", src, id, &ups, root.Dynamic)
	return ups, err
}

func walkDynamic(root, obj *fieldMapping, prefix string, src map[string]any, id string, ups *[]mappingUpdate, dyn string) *esError {
	if obj.Dynamic != "" {
		dyn = obj.Dynamic
	}
	for k, v := range src {
		if k == "" || strings.TrimSpace(k) == "" {
			return errDocParsing("field name cannot be an empty string")
		}
		if strings.HasPrefix(k, "_") && prefix == "" && isMetadataField(k) {
			return errDocParsing("Field [%s] is a metadata field and cannot be added inside a document. Use the index API request parameters.", k)
		}
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		// Dotted keys address nested objects.
		target := obj
		leaf := k
		if strings.Contains(k, ".") {
			parts := strings.Split(k, ".")
			for _, p := range parts[:len(parts)-1] {
				if target == nil || target.Properties == nil {
					target = nil
					break
				}
				target = target.Properties[p]
			}
			leaf = parts[len(parts)-1]
		}
		var fm *fieldMapping
		if target != nil && target.Properties != nil {
			fm = target.Properties[leaf]
		}
		if fm == nil {
			// Pending dynamic updates from earlier values of this doc.
			for _, u := range *ups {
				if u.path == path {
					fm = u.fm
					break
				}
			}
		}
		if err := checkValue(root, fm, path, v, id, ups, dyn); err != nil {
			return err
		}
	}
	return nil
}

func isMetadataField(k string) bool {
	switch k {
	case "_id", "_index", "_source", "_routing", "_seq_no", "_primary_term", "_version", "_field_names", "_ignored", "_doc_count", "_tier", "_data_stream_timestamp", "_nested_path", "_feature", "_tsid", "_type":
		return true
	}
	return false
}

func checkValue(root, fm *fieldMapping, path string, v any, id string, ups *[]mappingUpdate, dyn string) *esError {
	if fm != nil && fm.disabled() {
		return nil // enabled: false: kept in _source only, nothing mapped inside
	}
	switch val := v.(type) {
	case nil:
		return nil
	case []any:
		for _, e := range val {
			if err := checkValue(root, fm, path, e, id, ups, dyn); err != nil {
				return err
			}
			if fm == nil {
				for _, u := range *ups {
					if u.path == path {
						fm = u.fm
						break
					}
				}
			}
		}
		return nil
	case map[string]any:
		if fm == nil {
			switch dyn {
			case "strict":
				return strictErr(path)
			case "false", "runtime":
				return nil
			}
			fm = &fieldMapping{Properties: map[string]*fieldMapping{}}
			*ups = append(*ups, mappingUpdate{path, fm})
		}
		if !fm.isObject() {
			if fm.Type == "flattened" || fm.Type == "sparse_vector" || fm.Type == "rank_features" || fm.Type == "geo_point" || fm.Type == "geo_shape" || strings.HasSuffix(fm.Type, "_range") || fm.Type == "aggregate_metric_double" || fm.Type == "histogram" || fm.Type == "completion" || fm.Type == "join" || fm.Type == "percolator" || fm.Type == "semantic_text" || fm.Type == "passthrough" || fm.Type == "shape" || fm.Type == "point" {
				return nil
			}
			return errDocParsing("failed to parse field [%s] of type [%s] in document with id '%s'. Preview of field's value: '%s'", path, fm.Type, id, previewValue(v))
		}
		return walkDynamic(root, fm, path, val, id, ups, dyn)
	}
	if fm == nil {
		switch dyn {
		case "strict":
			return strictErr(path)
		case "false", "runtime":
			return nil
		}
		nf := dynamicLeaf(root, v)
		if err := validateLeaf(nf, path, v, id); err != nil {
			return err // 1e999 maps as float and is refused, as on a mapped field
		}
		*ups = append(*ups, mappingUpdate{path, nf})
		return nil
	}
	if fm.isObject() {
		return errDocParsing("object mapping for [%s] tried to parse field [%s] as object, but found a concrete value", path, path)
	}
	if err := validateLeaf(fm, path, v, id); err != nil {
		return err
	}
	return nil
}

func strictErr(path string) *esError {
	parent := "_doc"
	leaf := path
	if i := strings.LastIndex(path, "."); i >= 0 {
		parent = path[:i]
		leaf = path[i+1:]
	}
	return newErr(http.StatusBadRequest, "strict_dynamic_mapping_exception",
		"[1:2] mapping set to strict, dynamic introduction of [%s] within [%s] is not allowed", leaf, parent)
}

func previewValue(v any) string {
	switch t := v.(type) {
	case string:
		return t
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

func dynamicLeaf(root *fieldMapping, v any) *fieldMapping {
	switch t := v.(type) {
	case bool:
		return &fieldMapping{Type: "boolean", Params: map[string]any{}}
	case json.Number:
		if strings.ContainsAny(string(t), ".eE") {
			return &fieldMapping{Type: "float", Params: map[string]any{}}
		}
		return &fieldMapping{Type: "long", Params: map[string]any{}}
	case float64:
		if t == float64(int64(t)) {
			return &fieldMapping{Type: "long", Params: map[string]any{}}
		}
		return &fieldMapping{Type: "float", Params: map[string]any{}}
	case string:
		if dd, ok := root.Params["date_detection"]; !ok || fmt.Sprint(dd) != "false" {
			if len(t) >= 10 && t[4] == '-' && t[7] == '-' {
				if _, err := parseISO(t, true); err == nil {
					return &fieldMapping{Type: "date", Params: map[string]any{}}
				}
			}
		}
		if nd := fmt.Sprint(root.Params["numeric_detection"]); nd == "true" {
			if _, ok := toInt(t); ok {
				return &fieldMapping{Type: "long", Params: map[string]any{}}
			}
			if _, ok := toFloat(t); ok {
				return &fieldMapping{Type: "float", Params: map[string]any{}}
			}
		}
	}
	return &fieldMapping{
		Type:   "text",
		Params: map[string]any{},
		Fields: map[string]*fieldMapping{
			"keyword": {Type: "keyword", IgnoreAbove: 256, Params: map[string]any{"ignore_above": 256}},
		},
	}
}

func validateLeaf(fm *fieldMapping, path string, v any, id string) *esError {
	bad := func(cause string) *esError {
		e := errDocParsing("failed to parse field [%s] of type [%s] in document with id '%s'. Preview of field's value: '%s'", path, fm.Type, id, previewValue(v))
		if cause != "" {
			e.CausedBy = errIllegalArgument("%s", cause)
		}
		return e
	}
	switch {
	case isNumericType(fm.Type):
		if s, ok := v.(string); ok && strings.TrimSpace(s) == "" {
			return nil
		}
		if _, ok := v.(bool); ok {
			return bad("Current token (VALUE_TRUE) not numeric, can not use numeric value accessors")
		}
		f, ok := toFloat(v)
		if !ok || math.IsInf(f, 0) { // Go reads "inf" too, Java's parser does not
			if nf, isNF := nonFinite(v); isNF && !isIntegerType(fm.Type) {
				return bad(fmt.Sprintf("[%s] supports only finite values, but got [%s]", fm.Type, nf))
			}
			return bad(fmt.Sprintf("For input string: \"%s\"", previewValue(v)))
		}
		if isIntegerType(fm.Type) {
			lim := map[string][2]float64{"integer": {-2147483648, 2147483647}, "short": {-32768, 32767}, "byte": {-128, 127}}
			if r, ok := lim[fm.Type]; ok && (f < r[0] || f > r[1]) {
				return bad(fmt.Sprintf("Value [%s] is out of range for %s", previewValue(v), map[string]string{"integer": "an integer", "short": "a short", "byte": "a byte"}[fm.Type]))
			}
		}
	case fm.Type == "boolean":
		switch t := v.(type) {
		case bool:
		case string:
			if t != "true" && t != "false" && t != "" {
				return bad(fmt.Sprintf("Failed to parse value [%s] as only [true] or [false] are allowed.", t))
			}
		default:
			return bad("")
		}
	case isDateType(fm.Type):
		if _, _, err := parseDateValue(v, fm); err != nil {
			e := bad("")
			e.CausedBy = errIllegalArgument("failed to parse date field [%s] with format [%s]", previewValue(v), dateFormatOf(fm))
			return e
		}
	}
	return nil
}

// nonFinite reports a value Elasticsearch's Java parser reads as a
// non-finite double, and how its refusal names it: a JSON number or
// numeric string beyond float64's range (1e999: "Infinity", "-Infinity"),
// or a string Double.parseDouble reads as one ("Infinity", "NaN", with an
// optional sign). Go's own spellings ("inf") are not among them. It is
// asked only of a value toFloat refused or read as infinite.
func nonFinite(v any) (string, bool) {
	var s string
	switch n := v.(type) {
	case json.Number:
		s = string(n)
	case string:
		s = strings.TrimSpace(n)
		sign, lit := "", s
		if lit != "" && (lit[0] == '+' || lit[0] == '-') {
			if lit[0] == '-' {
				sign = "-"
			}
			lit = lit[1:]
		}
		switch lit {
		case "Infinity":
			return sign + "Infinity", true
		case "NaN":
			return "NaN", true
		}
	default:
		return "", false
	}
	f, err := strconv.ParseFloat(s, 64)
	if !errors.Is(err, strconv.ErrRange) || !math.IsInf(f, 0) {
		return "", false
	}
	if f < 0 {
		return "-Infinity", true
	}
	return "Infinity", true
}

func dateFormatOf(fm *fieldMapping) string {
	if fm != nil && fm.Format != "" {
		return fm.Format
	}
	return "strict_date_optional_time||epoch_millis"
}

// objectChild returns the object field name of m, made (or given
// properties) when it has none: one step down a dotted path.
func (m *fieldMapping) objectChild(name string) *fieldMapping {
	child := m.Properties[name]
	if child == nil {
		child = &fieldMapping{Properties: map[string]*fieldMapping{}}
		m.Properties[name] = child
	}
	if child.Properties == nil {
		child.Properties = map[string]*fieldMapping{}
	}
	return child
}

// fieldCount is the number of mappers under fm as
// index.mapping.total_fields.limit counts them: every object and leaf
// field, and every multi-field.
func fieldCount(fm *fieldMapping) int {
	n := 0
	for _, c := range fm.Properties {
		n += 1 + len(c.Fields) + fieldCount(c)
	}
	return n
}

// checkFieldLimit applies index.mapping.total_fields.limit (default 1000)
// to the fields a document would add, as Elasticsearch does while it
// parses the document: over the limit the document is refused, or, with
// index.mapping.total_fields.ignore_dynamic_beyond_limit, the new fields
// that do not fit stay in _source only (taken in path order, so parents
// before their children and the same ones every time).
func checkFieldLimit(ix *index, ups []mappingUpdate) ([]mappingUpdate, *esError) {
	limit, err := settingInt(ix.settings.flat, "index.mapping.total_fields.limit", 1000, 0)
	if err != nil {
		return nil, err
	}
	have, add := fieldCount(ix.mapping), 0
	for _, u := range ups {
		add += 1 + len(u.fm.Fields)
	}
	if int64(have+add) <= limit {
		return ups, nil
	}
	if ignore, _ := parseBoolValue(ix.settings.flat["index.mapping.total_fields.ignore_dynamic_beyond_limit"]); ignore {
		sorted := slices.Clone(ups)
		slices.SortFunc(sorted, func(a, b mappingUpdate) int { return strings.Compare(a.path, b.path) })
		var kept []mappingUpdate
		for _, u := range sorted {
			n := 1 + len(u.fm.Fields)
			if int64(have+n) > limit {
				break
			}
			have += n
			kept = append(kept, u)
		}
		return kept, nil
	}
	reason := fmt.Sprintf("Limit of total fields [%d] has been exceeded while adding new fields [%d]", limit, add)
	e := errDocParsing("failed to parse: %s", reason)
	e.CausedBy = errIllegalArgument("%s", reason)
	return nil, e
}

// applyUpdates installs dynamic mapping updates into the root mapping.
// A path from a document's field names slices the document's source, which
// the mapping outlives: its names are cut from a copy of their own.
func applyUpdates(root *fieldMapping, ups []mappingUpdate) {
	for _, u := range ups {
		parts := strings.Split(strings.Clone(u.path), ".")
		cur := root
		for _, p := range parts[:len(parts)-1] {
			cur = cur.objectChild(p)
		}
		leaf := parts[len(parts)-1]
		if cur.Properties[leaf] == nil {
			cur.Properties[leaf] = u.fm
		}
	}
}
