package esserver

import (
	"math"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
)

// qnode is a parsed query.
type qnode interface{}

type (
	qMatchAll  struct{ boost float64 }
	qMatchNone struct{}
	qTerm      struct {
		field           string
		value           any
		boost           float64
		caseInsensitive bool
	}
	qTerms struct {
		field  string
		values []any
		boost  float64
	}
	qMatch struct {
		field    string
		query    any
		operator string
		msm      any
		phrase   bool
		prefix   bool
		lenient  bool // a value the field's type cannot take matches nothing
		boost    float64
	}
	qMultiMatch struct {
		fields   []string
		query    any
		operator string
		phrase   bool
		boost    float64
	}
	qRange struct {
		field          string
		gt, gte        any
		lt, lte        any
		format         string
		boost          float64
		hasLo, hasHi   bool
		loIncl, hiIncl bool
	}
	qIDs    struct{ ids []string }
	qExists struct{ field string }
	qPrefix struct {
		field           string
		value           string
		caseInsensitive bool
	}
	qWildcard struct {
		field           string
		value           string
		caseInsensitive bool
	}
	qRegexp struct {
		field string
		value string
	}
	qBool struct {
		must, filter, should, mustNot []qnode
		msm                           any
		boost                         float64
	}
	qConstant struct {
		filter qnode
		boost  float64
	}
	qDisMax      struct{ queries []qnode }
	qQueryString struct {
		query     string
		fields    []string
		defaultOp string
		simple    bool
	}
)

func errUnknownQuery(name string) *esError {
	return errParsing("unknown query [%s]", name).with("line", 1).with("col", 1)
}

// parseQuery parses a query DSL object.
func parseQuery(m map[string]any) (qnode, *esError) {
	if len(m) == 0 {
		return qMatchAll{boost: 1}, nil
	}
	if len(m) > 1 {
		keys := sortedKeys(m)
		return nil, errParsing("[%s] malformed query, expected [END_OBJECT] but found [FIELD_NAME]", keys[0])
	}
	for name, body := range m {
		return parseQueryType(name, body)
	}
	return nil, nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func boostOf(m map[string]any) float64 {
	if b, ok := toFloat(m["boost"]); ok {
		return b
	}
	return 1
}

// singleField extracts {"field": value-or-object} bodies.
func singleField(qname string, body any) (string, any, *esError) {
	m, ok := body.(map[string]any)
	if !ok {
		return "", nil, errParsing("[%s] query malformed, no start_object after query name", qname)
	}
	var field string
	var val any
	n := 0
	for k, v := range m {
		if k == "boost" || k == "_name" {
			continue
		}
		field, val = k, v
		n++
	}
	if n == 0 {
		return "", nil, errIllegalArgument("query doesn't support multiple fields, found none")
	}
	if n > 1 {
		return "", nil, errParsing("[%s] query doesn't support multiple fields, found [%s] and [%s]", qname, sortedKeys(m)[0], sortedKeys(m)[1])
	}
	return field, val, nil
}

// queryParams lists the parameters Elasticsearch 8's parsers take inside
// a field's object for the queries that check them here; any other key is
// refused as Elasticsearch refuses it, rather than silently ignored (a
// misspelt "operator" would change what matches).
var queryParams = map[string][]string{
	"term": {"value", "term", "boost", "_name", "case_insensitive"},
	"match": {"query", "analyzer", "boost", "fuzziness", "prefix_length", "max_expansions", "operator",
		"fuzzy_rewrite", "fuzzy_transpositions", "lenient", "zero_terms_query", "minimum_should_match",
		"auto_generate_synonyms_phrase_query", "_name"},
	"match_phrase":        {"query", "analyzer", "boost", "slop", "zero_terms_query", "_name"},
	"match_phrase_prefix": {"query", "analyzer", "boost", "slop", "max_expansions", "zero_terms_query", "_name"},
	"match_bool_prefix": {"query", "analyzer", "operator", "minimum_should_match", "fuzziness", "prefix_length",
		"max_expansions", "fuzzy_transpositions", "fuzzy_rewrite", "boost", "_name"},
	"exists":   {"field", "boost", "_name"},
	"prefix":   {"value", "prefix", "boost", "rewrite", "case_insensitive", "_name"},
	"wildcard": {"value", "wildcard", "boost", "rewrite", "case_insensitive", "_name"},
	"regexp":   {"value", "flags", "flags_value", "max_determinized_states", "case_insensitive", "boost", "rewrite", "_name"},
}

// checkQueryParams refuses a key of m that query qname does not take,
// with Elasticsearch's "[qname] query does not support [key]".
func checkQueryParams(qname string, m map[string]any) *esError {
	allowed := queryParams[qname]
	for _, k := range sortedKeys(m) {
		if !slices.Contains(allowed, k) {
			return errParsing("[%s] query does not support [%s]", qname, k)
		}
	}
	return nil
}

func parseQueryType(name string, body any) (qnode, *esError) {
	switch name {
	case "match_all":
		return parseMatchAllQuery(body)
	case "match_none":
		return qMatchNone{}, nil
	case "term":
		return parseTermQuery(name, body)
	case "terms":
		return parseTermsQuery(body)
	case "match", "match_phrase", "match_phrase_prefix", "match_bool_prefix":
		return parseMatchQuery(name, body)
	case "multi_match":
		return parseMultiMatchQuery(body)
	case "range":
		return parseRangeQuery(name, body)
	case "ids":
		return parseIDsQuery(body)
	case "exists":
		return parseExistsQuery(body)
	case "prefix", "wildcard", "regexp":
		return parsePatternQuery(name, body)
	case "bool":
		return parseBoolQuery(body)
	case "constant_score":
		return parseConstantScoreQuery(body)
	case "dis_max":
		return parseDisMaxQuery(body)
	case "boosting":
		return parseBoostingQuery(body)
	case "function_score", "script_score":
		return parseScoreQuery(body)
	case "nested":
		return parseNestedQuery(body)
	case "query_string", "simple_query_string":
		return parseQueryStringQuery(name, body)
	}
	return nil, errUnknownQuery(name)
}

// parseMatchAllQuery parses match_all: every document, with a boost.
func parseMatchAllQuery(body any) (qnode, *esError) {
	obj, isObj := body.(map[string]any)
	if !isObj {
		return nil, errParsing("[match_all] query malformed, no start_object after query name")
	}
	return qMatchAll{boost: boostOf(obj)}, nil
}

// parseTermQuery parses term: one field equal to one value, {"f": v} or {"f": {"value": v}}.
func parseTermQuery(name string, body any) (qnode, *esError) {
	f, v, err := singleField(name, body)
	if err != nil {
		return nil, err
	}
	q := qTerm{field: f, value: v, boost: 1}
	if vm, ok := v.(map[string]any); ok {
		if err := checkQueryParams("term", vm); err != nil {
			return nil, err
		}
		q.value = vm["value"]
		if t, ok := vm["term"]; ok && q.value == nil {
			q.value = t
		}
		q.boost = boostOf(vm)
		q.caseInsensitive, _ = vm["case_insensitive"].(bool)
		if q.value == nil {
			return nil, errParsing("[term] query does not support [%s]", f)
		}
	}
	if _, isArr := q.value.([]any); isArr {
		return nil, errParsing("[term] query does not support array of values")
	}
	return q, nil
}

// parseTermsQuery parses terms: one field equal to any of a list of values.
func parseTermsQuery(body any) (qnode, *esError) {
	obj, isObj := body.(map[string]any)
	if !isObj {
		return nil, errParsing("[terms] query malformed, no start_object after query name")
	}
	q := qTerms{boost: boostOf(obj)}
	n := 0
	for k, v := range obj {
		if k == "boost" || k == "_name" {
			continue
		}
		arr, ok := v.([]any)
		if !ok {
			return nil, errParsing("[terms] query does not support [%s]", k)
		}
		q.field, q.values = k, arr
		n++
	}
	if n != 1 {
		return nil, errParsing("[terms] query requires exactly one field")
	}
	return q, nil
}

// parseMatchQuery parses match and its phrase and prefix forms on one field.
func parseMatchQuery(name string, body any) (qnode, *esError) {
	f, v, err := singleField(name, body)
	if err != nil {
		return nil, err
	}
	q := qMatch{field: f, query: v, operator: "or", boost: 1, phrase: name == "match_phrase" || name == "match_phrase_prefix", prefix: strings.HasSuffix(name, "_prefix")}
	if vm, ok := v.(map[string]any); ok {
		if err := checkQueryParams(name, vm); err != nil {
			return nil, err
		}
		q.query = vm["query"]
		if q.query == nil {
			return nil, errParsing("[%s] requires query value", name)
		}
		if op, ok := vm["operator"].(string); ok {
			q.operator = strings.ToLower(op)
			if q.operator != "and" && q.operator != "or" {
				return nil, errIllegalArgument("operator needs to be either [and] or [or], but was [%s]", op)
			}
		}
		q.msm = vm["minimum_should_match"]
		q.lenient, _ = parseBoolValue(vm["lenient"])
		q.boost = boostOf(vm)
	}
	return q, nil
}

// parseMultiMatchQuery parses multi_match: a match over several fields.
func parseMultiMatchQuery(body any) (qnode, *esError) {
	obj, isObj := body.(map[string]any)
	if !isObj {
		return nil, errParsing("[multi_match] query malformed")
	}
	q := qMultiMatch{query: obj["query"], operator: "or", boost: boostOf(obj)}
	if q.query == nil {
		return nil, errIllegalArgument("[multi_match] requires query value")
	}
	q.fields, _ = stringList(obj["fields"])
	if op, ok := obj["operator"].(string); ok {
		q.operator = strings.ToLower(op)
	}
	if t, _ := obj["type"].(string); t == "phrase" || t == "phrase_prefix" {
		q.phrase = true
	}
	return q, nil
}

// parseRangeQuery parses range: bounds on one field (gt, gte, from, lt, lte, to).
func parseRangeQuery(name string, body any) (qnode, *esError) {
	f, v, err := singleField(name, body)
	if err != nil {
		return nil, err
	}
	vm, ok := v.(map[string]any)
	if !ok {
		return nil, errParsing("[range] query malformed, no start_object after query name")
	}
	q := qRange{field: f, boost: boostOf(vm), loIncl: true, hiIncl: true}
	for k, b := range vm {
		switch k {
		case "gt":
			q.gt, q.hasLo, q.loIncl = b, b != nil, false
		case "gte":
			q.gte, q.hasLo, q.loIncl = b, b != nil, true
		case "from":
			q.gte, q.hasLo = b, b != nil
		case "lt":
			q.lt, q.hasHi, q.hiIncl = b, b != nil, false
		case "lte":
			q.lte, q.hasHi, q.hiIncl = b, b != nil, true
		case "to":
			q.lte, q.hasHi = b, b != nil
		case "format":
			q.format, _ = b.(string)
		case "boost", "_name", "time_zone", "relation":
		case "include_lower", "include_upper":
		default:
			return nil, errParsing("[range] query does not support [%s]", k)
		}
	}
	if il, ok := vm["include_lower"].(bool); ok {
		q.loIncl = il
	}
	if iu, ok := vm["include_upper"].(bool); ok {
		q.hiIncl = iu
	}
	return q, nil
}

// parseIDsQuery parses ids: documents by _id.
func parseIDsQuery(body any) (qnode, *esError) {
	obj, isObj := body.(map[string]any)
	if !isObj {
		return nil, errParsing("[ids] query malformed, no start_object after query name")
	}
	for _, k := range sortedKeys(obj) {
		if k != "values" && k != "boost" && k != "_name" {
			return nil, errXContent("[ids] unknown field [%s]", k)
		}
	}
	vals, ok := obj["values"].([]any)
	if !ok && obj["values"] != nil {
		return nil, errParsing("[ids] failed to parse field [values]")
	}
	q := qIDs{}
	for _, v := range vals {
		s, _ := asString(v)
		q.ids = append(q.ids, s)
	}
	return q, nil
}

// parseExistsQuery parses exists: documents with a value in a field.
func parseExistsQuery(body any) (qnode, *esError) {
	obj, isObj := body.(map[string]any)
	if !isObj {
		return nil, errParsing("[exists] query malformed, no start_object after query name")
	}
	if err := checkQueryParams("exists", obj); err != nil {
		return nil, err
	}
	f, _ := obj["field"].(string)
	if f == "" {
		return nil, errParsing("[exists] must be provided with a [field]")
	}
	return qExists{field: f}, nil
}

// parsePatternQuery parses prefix, wildcard and regexp on one field.
func parsePatternQuery(name string, body any) (qnode, *esError) {
	f, v, err := singleField(name, body)
	if err != nil {
		return nil, err
	}
	ci := false
	if vm, ok := v.(map[string]any); ok {
		if err := checkQueryParams(name, vm); err != nil {
			return nil, err
		}
		ci, _ = vm["case_insensitive"].(bool)
		if x, ok := vm["value"]; ok {
			v = x
		} else if x, ok := vm[name]; ok && name != "regexp" {
			v = x // "prefix": {"f": {"prefix": ...}}, "wildcard": {"f": {"wildcard": ...}}
		}
	}
	s, ok := asString(v)
	if !ok {
		return nil, errParsing("[%s] query does not support [%s]", name, f)
	}
	switch name {
	case "prefix":
		return qPrefix{field: f, value: s, caseInsensitive: ci}, nil
	case "wildcard":
		return qWildcard{field: f, value: s, caseInsensitive: ci}, nil
	}
	return qRegexp{field: f, value: s}, nil
}

// parseBoolQuery parses bool: must, filter, should and must_not clauses.
func parseBoolQuery(body any) (qnode, *esError) {
	obj, isObj := body.(map[string]any)
	if !isObj {
		return nil, errParsing("[bool] query malformed, no start_object after query name")
	}
	q := qBool{boost: boostOf(obj), msm: obj["minimum_should_match"]}
	for k, v := range obj {
		var dst *[]qnode
		switch k {
		case "must":
			dst = &q.must
		case "filter":
			dst = &q.filter
		case "should":
			dst = &q.should
		case "must_not", "mustNot":
			dst = &q.mustNot
		case "minimum_should_match", "boost", "_name", "adjust_pure_negative":
			continue
		default:
			return nil, errParsing("[bool] query does not support [%s]", k)
		}
		clauses, err := parseClauses(v)
		if err != nil {
			return nil, err
		}
		*dst = append(*dst, clauses...)
	}
	return q, nil
}

// parseConstantScoreQuery parses constant_score: its filter, at a constant score.
func parseConstantScoreQuery(body any) (qnode, *esError) {
	obj, isObj := body.(map[string]any)
	if !isObj {
		return nil, errParsing("[constant_score] query malformed")
	}
	fm, ok := obj["filter"].(map[string]any)
	if !ok {
		return nil, errParsing("[constant_score] requires a 'filter' element")
	}
	inner, err := parseQuery(fm)
	if err != nil {
		return nil, err
	}
	return qConstant{filter: inner, boost: boostOf(obj)}, nil
}

// parseDisMaxQuery parses dis_max: the best of several queries.
func parseDisMaxQuery(body any) (qnode, *esError) {
	obj, _ := body.(map[string]any)
	arr, _ := obj["queries"].([]any)
	q := qDisMax{}
	for _, a := range arr {
		am, ok := a.(map[string]any)
		if !ok {
			return nil, errParsing("[dis_max] queries must be objects")
		}
		inner, err := parseQuery(am)
		if err != nil {
			return nil, err
		}
		q.queries = append(q.queries, inner)
	}
	return q, nil
}

// parseBoostingQuery parses boosting: its positive query (the negative one only scores).
func parseBoostingQuery(body any) (qnode, *esError) {
	obj, _ := body.(map[string]any)
	pm, ok := obj["positive"].(map[string]any)
	if !ok {
		return nil, errParsing("[boosting] query requires 'positive' query")
	}
	return parseQuery(pm)
}

// parseScoreQuery parses function_score and script_score: their query (match_all without one); the scoring is not modelled.
func parseScoreQuery(body any) (qnode, *esError) {
	obj, _ := body.(map[string]any)
	qm, ok := obj["query"].(map[string]any)
	if !ok {
		return qMatchAll{boost: 1}, nil
	}
	return parseQuery(qm)
}

// parseNestedQuery parses nested: its query.
func parseNestedQuery(body any) (qnode, *esError) {
	obj, _ := body.(map[string]any)
	qm, ok := obj["query"].(map[string]any)
	if !ok {
		return nil, errParsing("[nested] requires 'query' field")
	}
	return parseQuery(qm)
}

// parseQueryStringQuery parses query_string and simple_query_string.
func parseQueryStringQuery(name string, body any) (qnode, *esError) {
	obj, isObj := body.(map[string]any)
	if !isObj {
		return nil, errParsing("[%s] query malformed", name)
	}
	qs, ok := obj["query"].(string)
	if !ok {
		return nil, errParsing("[%s] must be provided with a [query]", name)
	}
	q := qQueryString{query: qs, simple: name == "simple_query_string", defaultOp: "or"}
	if df, ok := obj["default_field"].(string); ok {
		q.fields = []string{df}
	}
	if fs, ok := stringList(obj["fields"]); ok && len(fs) > 0 {
		q.fields = fs
	}
	if op, ok := obj["default_operator"].(string); ok {
		q.defaultOp = strings.ToLower(op)
	}
	return q, nil
}

func parseClauses(v any) ([]qnode, *esError) {
	switch t := v.(type) {
	case map[string]any:
		q, err := parseQuery(t)
		if err != nil {
			return nil, err
		}
		return []qnode{q}, nil
	case []any:
		var out []qnode
		for _, e := range t {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, errParsing("[bool] query malformed, expected object in clause array")
			}
			if len(m) == 0 {
				continue
			}
			q, err := parseQuery(m)
			if err != nil {
				return nil, err
			}
			out = append(out, q)
		}
		return out, nil
	case nil:
		return nil, nil
	}
	return nil, errParsing("[bool] query malformed, clauses must be objects or arrays")
}

// --- compilation ---------------------------------------------------------------

type matcher func(e *docEntry) (bool, float64)

type compileCtx struct {
	ix  *index
	now time.Time
}

func errQueryShard(ix *index, format string, args ...any) *esError {
	return newErr(http.StatusBadRequest, "query_shard_exception", format, args...).
		with("index_uuid", ix.uuid).with("index", ix.name)
}

// field kinds
const (
	kText = iota
	kKeyword
	kNumeric
	kDate
	kBool
	kID
	kIndex
	kUnmapped
	kObject
	kOther
)

type fieldAcc struct {
	kind        int
	fm          *fieldMapping
	src         string
	ignoreAbove int
	nanos       bool
	integer     bool
}

func (c *compileCtx) field(name string) *fieldAcc {
	switch name {
	case "_id":
		return &fieldAcc{kind: kID}
	case "_index":
		return &fieldAcc{kind: kIndex}
	}
	fm, src := c.ix.mapping.lookupField(name)
	if fm == nil {
		return &fieldAcc{kind: kUnmapped, src: name}
	}
	a := &fieldAcc{fm: fm, src: src, ignoreAbove: fm.IgnoreAbove}
	switch {
	case fm.isObject():
		a.kind = kObject
	case isTextType(fm.Type):
		a.kind = kText
	case isKeywordLike(fm.Type):
		a.kind = kKeyword
	case isNumericType(fm.Type):
		a.kind = kNumeric
		a.integer = isIntegerType(fm.Type)
	case isDateType(fm.Type):
		a.kind = kDate
		a.nanos = fm.Type == "date_nanos"
	case fm.Type == "boolean":
		a.kind = kBool
	default:
		a.kind = kOther
	}
	return a
}

// values returns the scalar values of the field in a document.
func (a *fieldAcc) values(ix *index, e *docEntry) []any {
	switch a.kind {
	case kID:
		return []any{e.id}
	case kIndex:
		return []any{ix.name}
	case kUnmapped:
		return nil
	}
	vals := extractValues(e.parsed, a.src)
	out := vals[:0:0]
	for _, v := range vals {
		if v == nil {
			continue
		}
		if _, isMap := v.(map[string]any); isMap && a.kind != kObject {
			continue
		}
		if a.ignoreAbove > 0 {
			if s, ok := v.(string); ok && len([]rune(s)) > a.ignoreAbove {
				continue
			}
		}
		out = append(out, v)
	}
	return out
}

// analyze is a simplified standard analyzer: split on anything that is not
// a letter or digit, lowercase.
func analyze(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

func parseBoolValue(v any) (bool, bool) {
	switch t := v.(type) {
	case bool:
		return t, true
	case string:
		switch t {
		case "true":
			return true, true
		case "false", "":
			return false, true
		}
	}
	return false, false
}

// termPredicate builds an exact-value predicate for one field and value.
func (c *compileCtx) termPredicate(a *fieldAcc, value any, ci bool) (func(v any) bool, *esError) {
	switch a.kind {
	case kUnmapped, kObject:
		return nil, nil
	case kText:
		want, _ := asString(value)
		if ci {
			want = strings.ToLower(want)
		}
		return func(v any) bool {
			s, ok := v.(string)
			if !ok {
				s, _ = asString(v)
			}
			for _, t := range analyze(s) {
				if t == want {
					return true
				}
			}
			return false
		}, nil
	case kNumeric:
		want, ok := toFloat(value)
		if !ok {
			s, _ := asString(value)
			return nil, errQueryShard(c.ix, "failed to create query: For input string: \"%s\"", s)
		}
		if a.integer && want != math.Trunc(want) {
			return func(any) bool { return false }, nil
		}
		isFloat := a.fm != nil && (a.fm.Type == "float" || a.fm.Type == "half_float")
		return func(v any) bool {
			f, ok := toFloat(v)
			if isFloat {
				return ok && float32(f) == float32(want)
			}
			return ok && f == want
		}, nil
	case kDate:
		t, err := c.dateBound(a, value, "", false)
		if err != nil {
			return nil, err
		}
		return func(v any) bool {
			dt, _, perr := parseDateValue(v, a.fm)
			return perr == nil && dt.Equal(t)
		}, nil
	case kBool:
		want, ok := parseBoolValue(value)
		if !ok {
			s, _ := asString(value)
			return nil, errQueryShard(c.ix, "failed to create query: Can't parse boolean value [%s], expected [true] or [false]", s)
		}
		return func(v any) bool {
			b, ok := parseBoolValue(v)
			return ok && b == want
		}, nil
	}
	want, _ := asString(value)
	return func(v any) bool {
		s, ok := asString(v)
		if ci {
			return ok && strings.EqualFold(s, want)
		}
		return ok && s == want
	}, nil
}

func (c *compileCtx) dateBound(a *fieldAcc, v any, format string, roundUp bool) (time.Time, *esError) {
	fm := a.fm
	if format != "" {
		cp := *fm
		cp.Format = format
		fm = &cp
	}
	var t time.Time
	var err error
	if s, ok := v.(string); ok {
		t, _, err = dateMath(s, c.now, roundUp, fm)
	} else {
		t, _, err = parseDateValue(v, fm)
	}
	if err != nil {
		return time.Time{}, errQueryShard(c.ix, "failed to create query: failed to parse date field [%v] with format [%s]", v, dateFormatOf(fm))
	}
	return t, nil
}

func anyValue(ix *index, a *fieldAcc, pred func(any) bool) func(e *docEntry) bool {
	if pred == nil {
		return func(*docEntry) bool { return false }
	}
	return func(e *docEntry) bool {
		for _, v := range a.values(ix, e) {
			if pred(v) {
				return true
			}
		}
		return false
	}
}

func constMatcher(f func(*docEntry) bool, score float64) matcher {
	return func(e *docEntry) (bool, float64) {
		if f(e) {
			return true, score
		}
		return false, 0
	}
}

// compile turns a parsed query into a matcher, one compile step per kind
// of query.
func (c *compileCtx) compile(q qnode) (matcher, *esError) {
	switch t := q.(type) {
	case qMatchAll:
		return func(*docEntry) (bool, float64) { return true, t.boost }, nil
	case qMatchNone:
		return func(*docEntry) (bool, float64) { return false, 0 }, nil
	case qTerm:
		a := c.field(t.field)
		pred, err := c.termPredicate(a, t.value, t.caseInsensitive)
		if err != nil {
			return nil, err
		}
		return constMatcher(anyValue(c.ix, a, pred), t.boost), nil
	case qTerms:
		return c.compileTerms(t)
	case qMatch:
		m, err := c.compileMatch(t.field, t.query, t.operator, t.msm, t.phrase, t.prefix, t.boost)
		if err != nil && t.lenient {
			return func(*docEntry) (bool, float64) { return false, 0 }, nil
		}
		return m, err
	case qMultiMatch:
		return c.compileMultiMatch(t)
	case qRange:
		return c.compileRange(t)
	case qIDs:
		set := make(map[string]bool, len(t.ids))
		for _, id := range t.ids {
			set[id] = true
		}
		return func(e *docEntry) (bool, float64) { return set[e.id], 1 }, nil
	case qExists:
		return c.compileExists(t), nil
	case qPrefix:
		return c.compilePrefix(t), nil
	case qWildcard:
		return c.compileRegexp(t.field, "^"+wildcardToRegexp(t.value, t.caseInsensitive)+"$")
	case qRegexp:
		if int64(len([]rune(t.value))) > c.ix.settings.maxRegexLength {
			return nil, errIllegalArgument("The length of regex [%d] used in the Regexp Query request has exceeded the allowed maximum of [%d]. This maximum can be set by changing the [index.max_regex_length] index level setting.", len([]rune(t.value)), c.ix.settings.maxRegexLength)
		}
		return c.compileRegexp(t.field, "^(?:"+t.value+")$")
	case qBool:
		return c.compileBool(t)
	case qConstant:
		inner, err := c.compile(t.filter)
		if err != nil {
			return nil, err
		}
		return func(e *docEntry) (bool, float64) {
			ok, _ := inner(e)
			return ok, t.boost
		}, nil
	case qDisMax:
		return c.compileDisMax(t)
	case qQueryString:
		return c.compileQueryString(t)
	}
	return nil, errIllegalArgument("unsupported query %T", q)
}

// compileTerms matches a document with any of the terms (at most
// index.max_terms_count of them).
func (c *compileCtx) compileTerms(t qTerms) (matcher, *esError) {
	ix := c.ix
	if int64(len(t.values)) > ix.settings.maxTermsCount {
		return nil, errIllegalArgument("The number of terms [%d] used in the Terms Query request has exceeded the allowed maximum of [%d]. This maximum can be set by changing the [index.max_terms_count] index level setting.", len(t.values), ix.settings.maxTermsCount)
	}
	a := c.field(t.field)
	var preds []func(any) bool
	for _, v := range t.values {
		p, err := c.termPredicate(a, v, false)
		if err != nil {
			return nil, err
		}
		if p != nil {
			preds = append(preds, p)
		}
	}
	return constMatcher(anyValue(ix, a, func(v any) bool {
		for _, p := range preds {
			if p(v) {
				return true
			}
		}
		return false
	}), t.boost), nil
}

// compileMultiMatch is a match on each field (all of them by default),
// any of which may hit.
func (c *compileCtx) compileMultiMatch(t qMultiMatch) (matcher, *esError) {
	fields := t.fields
	if len(fields) == 0 {
		fields = []string{"*"}
	}
	var ms []matcher
	for _, f := range c.expandFields(fields) {
		m, err := c.compileMatch(f, t.query, t.operator, nil, t.phrase, false, t.boost)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	return anyOf(ms), nil
}

// compileExists matches a document with a value in any mapped field the
// pattern names.
func (c *compileCtx) compileExists(t qExists) matcher {
	ix := c.ix
	names := c.expandFields([]string{t.field})
	var accs []*fieldAcc
	for _, n := range names {
		accs = append(accs, c.field(n))
	}
	return func(e *docEntry) (bool, float64) {
		for _, a := range accs {
			if a.kind == kUnmapped {
				continue
			}
			if len(a.values(ix, e)) > 0 {
				return true, 1
			}
		}
		return false, 0
	}
}

// compilePrefix matches a string value starting with the prefix.
func (c *compileCtx) compilePrefix(t qPrefix) matcher {
	a := c.field(t.field)
	want := t.value
	return constMatcher(anyValue(c.ix, a, c.stringPred(a, func(s string) bool {
		if t.caseInsensitive {
			return strings.HasPrefix(strings.ToLower(s), strings.ToLower(want))
		}
		return strings.HasPrefix(s, want)
	})), 1)
}

// compileRegexp matches a string value of field against the anchored
// regular expression expr (a wildcard or regexp query).
func (c *compileCtx) compileRegexp(field, expr string) (matcher, *esError) {
	a := c.field(field)
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, errQueryShard(c.ix, "failed to create query: %s", err.Error())
	}
	return constMatcher(anyValue(c.ix, a, c.stringPred(a, re.MatchString)), 1), nil
}

// compileDisMax scores a document by its best-matching query (anyOf).
func (c *compileCtx) compileDisMax(t qDisMax) (matcher, *esError) {
	var ms []matcher
	for _, iq := range t.queries {
		m, err := c.compile(iq)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	return anyOf(ms), nil
}

// stringPred adapts a string predicate to the field kind (text fields match
// per token).
func (c *compileCtx) stringPred(a *fieldAcc, p func(string) bool) func(any) bool {
	if a.kind == kUnmapped {
		return nil
	}
	if a.kind == kText {
		return func(v any) bool {
			s, _ := asString(v)
			for _, t := range analyze(s) {
				if p(t) {
					return true
				}
			}
			return false
		}
	}
	return func(v any) bool {
		s, ok := asString(v)
		return ok && p(s)
	}
}

func wildcardToRegexp(w string, ci bool) string {
	var b strings.Builder
	if ci {
		b.WriteString("(?i)")
	}
	for _, r := range w {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	return b.String()
}

func anyOf(ms []matcher) matcher {
	return func(e *docEntry) (bool, float64) {
		hit, score := false, 0.0
		for _, m := range ms {
			if ok, s := m(e); ok {
				hit = true
				score = math.Max(score, s)
			}
		}
		return hit, score
	}
}

// expandFields expands field patterns ("*", "title*", "a.b") against the
// mapping's leaf fields.
func (c *compileCtx) expandFields(patterns []string) []string {
	var leaves []string
	var walk func(prefix string, f *fieldMapping)
	walk = func(prefix string, f *fieldMapping) {
		for k, v := range f.Properties {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			if v.isObject() {
				walk(p, v)
				continue
			}
			leaves = append(leaves, p)
		}
	}
	walk("", c.ix.mapping)
	sort.Strings(leaves)
	var out []string
	for _, p := range patterns {
		if i := strings.IndexByte(p, '^'); i >= 0 {
			p = p[:i]
		}
		if !strings.Contains(p, "*") {
			out = append(out, p)
			continue
		}
		for _, l := range leaves {
			if globMatch(p, l) {
				out = append(out, l)
			}
		}
	}
	return out
}

func (c *compileCtx) compileMatch(field string, query any, operator string, msm any, phrase, prefix bool, boost float64) (matcher, *esError) {
	ix := c.ix
	a := c.field(field)
	if a.kind != kText {
		if a.kind == kUnmapped || a.kind == kObject {
			return func(*docEntry) (bool, float64) { return false, 0 }, nil
		}
		if a.kind == kNumeric || a.kind == kDate || a.kind == kBool {
			if s, ok := query.(string); ok && strings.TrimSpace(s) == "" {
				return func(*docEntry) (bool, float64) { return false, 0 }, nil
			}
		}
		pred, err := c.termPredicate(a, query, false)
		if err != nil {
			return nil, err
		}
		if prefix {
			want, _ := asString(query)
			pred = c.stringPred(a, func(s string) bool { return strings.HasPrefix(s, want) })
		}
		return constMatcher(anyValue(ix, a, pred), boost), nil
	}
	qs, _ := asString(query)
	tokens := analyze(qs)
	if len(tokens) == 0 {
		return func(*docEntry) (bool, float64) { return false, 0 }, nil
	}
	if phrase {
		return func(e *docEntry) (bool, float64) {
			for _, v := range a.values(ix, e) {
				s, _ := asString(v)
				if containsPhrase(analyze(s), tokens, prefix) {
					return true, boost * float64(len(tokens))
				}
			}
			return false, 0
		}, nil
	}
	need := 1
	if operator == "and" {
		need = len(tokens)
	}
	if msm != nil {
		need = minimumShouldMatch(msm, len(tokens))
	}
	if need < 1 {
		need = 1
	}
	return func(e *docEntry) (bool, float64) {
		vals := a.values(ix, e)
		if len(vals) == 0 {
			return false, 0
		}
		have := map[string]int{}
		total := 0
		for _, v := range vals {
			s, _ := asString(v)
			for _, t := range analyze(s) {
				have[t]++
				total++
			}
		}
		matched := 0
		score := 0.0
		for _, t := range tokens {
			if n := have[t]; n > 0 {
				matched++
				score += (1 + math.Log(float64(n))) / math.Sqrt(float64(total))
			}
		}
		if matched >= need {
			return true, boost * (0.2 + score)
		}
		return false, 0
	}, nil
}

func containsPhrase(doc, phrase []string, prefix bool) bool {
	for i := 0; i+len(phrase) <= len(doc); i++ {
		ok := true
		for j, p := range phrase {
			d := doc[i+j]
			if prefix && j == len(phrase)-1 {
				if !strings.HasPrefix(d, p) {
					ok = false
					break
				}
				continue
			}
			if d != p {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// minimumShouldMatch interprets "2", "-1", "75%", "-25%" and integers.
func minimumShouldMatch(v any, n int) int {
	s, _ := asString(v)
	s = strings.TrimSpace(s)
	if s == "" {
		return 0
	}
	if strings.HasSuffix(s, "%") {
		p, ok := toFloat(strings.TrimSuffix(s, "%"))
		if !ok {
			return 0
		}
		r := int(math.Floor(float64(n) * math.Abs(p) / 100))
		if p < 0 {
			return n - r
		}
		return r
	}
	k, ok := toInt(s)
	if !ok {
		return 0
	}
	if k < 0 {
		return n + int(k)
	}
	return int(k)
}

func (c *compileCtx) compileBool(t qBool) (matcher, *esError) {
	compileAll := func(qs []qnode) ([]matcher, *esError) {
		out := make([]matcher, 0, len(qs))
		for _, q := range qs {
			m, err := c.compile(q)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
		return out, nil
	}
	must, err := compileAll(t.must)
	if err != nil {
		return nil, err
	}
	filter, err := compileAll(t.filter)
	if err != nil {
		return nil, err
	}
	should, err := compileAll(t.should)
	if err != nil {
		return nil, err
	}
	mustNot, err := compileAll(t.mustNot)
	if err != nil {
		return nil, err
	}
	need := 0
	if len(should) > 0 && len(must) == 0 && len(filter) == 0 {
		need = 1
	}
	if t.msm != nil {
		need = minimumShouldMatch(t.msm, len(should))
	}
	onlyNegative := len(must) == 0 && len(filter) == 0 && len(should) == 0
	return func(e *docEntry) (bool, float64) {
		score := 0.0
		for _, m := range must {
			ok, s := m(e)
			if !ok {
				return false, 0
			}
			score += s
		}
		for _, m := range filter {
			if ok, _ := m(e); !ok {
				return false, 0
			}
		}
		for _, m := range mustNot {
			if ok, _ := m(e); ok {
				return false, 0
			}
		}
		matched := 0
		for _, m := range should {
			if ok, s := m(e); ok {
				matched++
				score += s
			}
		}
		if matched < need {
			return false, 0
		}
		if onlyNegative {
			score = 0
		}
		return true, score * t.boost
	}, nil
}

func (c *compileCtx) compileRange(t qRange) (matcher, *esError) {
	ix := c.ix
	a := c.field(t.field)
	lo, hi := t.gte, t.lte
	if t.gt != nil {
		lo = t.gt
	}
	if t.lt != nil {
		hi = t.lt
	}
	switch a.kind {
	case kUnmapped, kObject:
		return func(*docEntry) (bool, float64) { return false, 0 }, nil
	case kNumeric:
		var lf, hf float64
		var ok bool
		if t.hasLo {
			if lf, ok = toFloat(lo); !ok {
				return nil, errQueryShard(ix, "failed to create query: For input string: \"%v\"", lo)
			}
		}
		if t.hasHi {
			if hf, ok = toFloat(hi); !ok {
				return nil, errQueryShard(ix, "failed to create query: For input string: \"%v\"", hi)
			}
		}
		return constMatcher(anyValue(ix, a, func(v any) bool {
			f, ok := toFloat(v)
			if !ok {
				return false
			}
			return inRange(cmpFloat(f, lf), cmpFloat(f, hf), t)
		}), t.boost), nil
	case kDate:
		var lt, ht time.Time
		var err *esError
		if t.hasLo {
			// gt rounds up, gte rounds down
			if lt, err = c.dateBound(a, lo, t.format, !t.loIncl); err != nil {
				return nil, err
			}
		}
		if t.hasHi {
			// lte rounds up, lt rounds down
			if ht, err = c.dateBound(a, hi, t.format, t.hiIncl); err != nil {
				return nil, err
			}
		}
		return constMatcher(anyValue(ix, a, func(v any) bool {
			dt, _, perr := parseDateValue(v, a.fm)
			if perr != nil {
				return false
			}
			return inRange(dt.Compare(lt), dt.Compare(ht), t)
		}), t.boost), nil
	}
	ls, _ := asString(lo)
	hs, _ := asString(hi)
	return constMatcher(anyValue(ix, a, c.stringPred(a, func(s string) bool {
		return inRange(strings.Compare(s, ls), strings.Compare(s, hs), t)
	})), t.boost), nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func inRange(cmpLo, cmpHi int, t qRange) bool {
	if t.hasLo {
		if cmpLo < 0 || (cmpLo == 0 && !t.loIncl) {
			return false
		}
	}
	if t.hasHi {
		if cmpHi > 0 || (cmpHi == 0 && !t.hiIncl) {
			return false
		}
	}
	return true
}

// --- query_string -------------------------------------------------------------

type qsTok struct {
	text   string
	quoted bool
}

func tokenizeQS(s string) []qsTok {
	var toks []qsTok
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(' || c == ')':
			toks = append(toks, qsTok{text: string(c)})
			i++
		case c == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			end := j
			if end > len(s) {
				end = len(s)
			}
			toks = append(toks, qsTok{text: s[i+1 : end], quoted: true})
			i = j + 1
		default:
			j := i
			for j < len(s) {
				ch := s[j]
				if ch == '\\' && j+1 < len(s) {
					j += 2
					continue
				}
				if ch == ' ' || ch == '\t' || ch == '\n' || ch == '(' || ch == ')' {
					break
				}
				if ch == '"' && j > i && s[j-1] == ':' {
					// field:"phrase"
					k := j + 1
					for k < len(s) && s[k] != '"' {
						k++
					}
					j = k + 1
					if j > len(s) {
						j = len(s)
					}
					break
				}
				if ch == '/' && (j == i || s[j-1] == ':') {
					k := j + 1
					for k < len(s) && s[k] != '/' {
						if s[k] == '\\' {
							k++
						}
						k++
					}
					j = k + 1
					if j > len(s) {
						j = len(s)
					}
					break
				}
				j++
			}
			toks = append(toks, qsTok{text: s[i:j]})
			i = j
		}
	}
	return toks
}

type qsParser struct {
	c    *compileCtx
	toks []qsTok
	pos  int
	def  []string
	and  bool
}

func (c *compileCtx) compileQueryString(t qQueryString) (matcher, *esError) {
	fields := t.fields
	if len(fields) == 0 {
		fields = []string{"*"}
	}
	p := &qsParser{c: c, toks: tokenizeQS(t.query), def: fields, and: t.defaultOp == "and"}
	if len(p.toks) == 0 {
		return func(*docEntry) (bool, float64) { return false, 0 }, nil
	}
	m, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (p *qsParser) peek() (qsTok, bool) {
	if p.pos >= len(p.toks) {
		return qsTok{}, false
	}
	return p.toks[p.pos], true
}

func (p *qsParser) parseOr() (matcher, *esError) {
	type clause struct {
		m        matcher
		required bool
		negated  bool
	}
	var clauses []clause
	nextRequired := false
	for {
		tok, ok := p.peek()
		if !ok || tok.text == ")" {
			break
		}
		if !tok.quoted {
			switch tok.text {
			case "AND", "&&":
				p.pos++
				if len(clauses) > 0 {
					clauses[len(clauses)-1].required = !clauses[len(clauses)-1].negated
				}
				nextRequired = true
				continue
			case "OR", "||":
				p.pos++
				continue
			}
		}
		neg, req := false, nextRequired || p.and
		nextRequired = false
		if !tok.quoted {
			switch {
			case tok.text == "NOT" || tok.text == "!":
				p.pos++
				neg = true
			case strings.HasPrefix(tok.text, "-") && len(tok.text) > 1:
				p.toks[p.pos].text = tok.text[1:]
				neg = true
			case strings.HasPrefix(tok.text, "+") && len(tok.text) > 1:
				p.toks[p.pos].text = tok.text[1:]
				req = true
			}
		}
		m, err := p.parseClause()
		if err != nil {
			return nil, err
		}
		clauses = append(clauses, clause{m: m, required: req && !neg, negated: neg})
	}
	return func(e *docEntry) (bool, float64) {
		score := 0.0
		anyOpt, optHit := false, false
		for _, cl := range clauses {
			ok, s := cl.m(e)
			switch {
			case cl.negated:
				if ok {
					return false, 0
				}
			case cl.required:
				if !ok {
					return false, 0
				}
				score += s
			default:
				anyOpt = true
				if ok {
					optHit = true
					score += s
				}
			}
		}
		hasRequired := false
		for _, cl := range clauses {
			if cl.required || cl.negated {
				hasRequired = true
			}
		}
		if anyOpt && !optHit && !hasRequired {
			return false, 0
		}
		if !anyOpt && !hasRequired {
			return false, 0
		}
		return true, score + 0.0001
	}, nil
}

func (p *qsParser) parseClause() (matcher, *esError) {
	tok, _ := p.peek()
	p.pos++
	if tok.text == "(" && !tok.quoted {
		m, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		if t, ok := p.peek(); ok && t.text == ")" {
			p.pos++
		}
		return m, nil
	}
	fields := p.def
	text := tok.text
	quoted := tok.quoted
	if !quoted && !strings.HasPrefix(text, "/") {
		if i := indexUnescaped(text, ':'); i > 0 {
			fields = []string{unescapeQS(text[:i])}
			text = text[i+1:]
			if strings.HasPrefix(text, "\"") && strings.HasSuffix(text, "\"") && len(text) >= 2 {
				text = text[1 : len(text)-1]
				quoted = true
			}
			if text == "" {
				// field:(group)
				if t, ok := p.peek(); ok && t.text == "(" {
					saved := p.def
					p.def = fields
					p.pos++
					m, err := p.parseOr()
					p.def = saved
					if err != nil {
						return nil, err
					}
					if t, ok := p.peek(); ok && t.text == ")" {
						p.pos++
					}
					return m, nil
				}
			}
		}
	}
	c := p.c
	names := c.expandFields(fields)
	var ms []matcher
	switch {
	case !quoted && len(text) >= 2 && text[0] == '/' && text[len(text)-1] == '/':
		re := text[1 : len(text)-1]
		for _, f := range names {
			m, err := c.compile(qRegexp{field: f, value: re})
			if err != nil {
				return nil, err
			}
			ms = append(ms, m)
		}
		if len(names) == 0 {
			if _, err := c.compile(qRegexp{field: "_none_", value: re}); err != nil {
				return nil, err
			}
		}
	case !quoted && text == "*":
		for _, f := range names {
			m, _ := c.compile(qExists{field: f})
			ms = append(ms, m)
		}
	case !quoted && strings.ContainsAny(text, "*?"):
		for _, f := range names {
			a := c.field(f)
			pat := text
			if a.kind == kText {
				pat = strings.ToLower(pat)
			}
			m, err := c.compile(qWildcard{field: f, value: unescapeQS(pat)})
			if err != nil {
				return nil, err
			}
			ms = append(ms, m)
		}
	default:
		val := unescapeQS(text)
		for _, f := range names {
			a := c.field(f)
			if a.kind == kNumeric {
				if _, ok := toFloat(val); !ok {
					continue
				}
			}
			if a.kind == kDate {
				if _, _, err := parseDateValue(val, a.fm); err != nil {
					continue
				}
			}
			if a.kind == kBool {
				if _, ok := parseBoolValue(val); !ok {
					continue
				}
			}
			m, err := c.compileMatch(f, val, "and", nil, quoted, false, 1)
			if err != nil {
				return nil, err
			}
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		return func(*docEntry) (bool, float64) { return false, 0 }, nil
	}
	return anyOf(ms), nil
}

func indexUnescaped(s string, ch byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			continue
		}
		if s[i] == ch {
			return i
		}
	}
	return -1
}

func unescapeQS(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
