package esserver

import (
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

type sortSpec struct {
	field        string
	desc         bool
	missing      any // nil: _last
	unmappedType string
	format       string
	numericType  string
	mode         string
}

type fieldReq struct {
	field  string
	format string
}

type searchReq struct {
	count          bool
	query          qnode
	postFilter     qnode
	from, size     int64
	sizeSet        bool
	sort           []sortSpec
	source         *sourceFilter
	trackTotal     int64 // -1: accurate; 0: disabled; n: up to n
	searchAfter    []any
	storedFields   []string
	hasStored      bool
	docvalueFields []fieldReq
	fields         []fieldReq
	scriptFields   int
	rescoreWindow  int64
	minScore       *float64
	trackScores    bool
	version        bool
	seqNoPT        bool
	scroll         bool
	terminateAfter int64
	restTotalInt   bool
	unbounded      bool // internal callers: no result window
}

func parseFieldReqs(v any, name string) ([]fieldReq, *esError) {
	arr, ok := v.([]any)
	if !ok {
		if s, isStr := v.(string); isStr {
			return []fieldReq{{field: s}}, nil
		}
		return nil, errParsing("[%s] must be an array", name)
	}
	var out []fieldReq
	for _, e := range arr {
		switch t := e.(type) {
		case string:
			out = append(out, fieldReq{field: t})
		case map[string]any:
			f, _ := t["field"].(string)
			if f == "" {
				return nil, errParsing("[%s] entries require a [field]", name)
			}
			fmtS, _ := t["format"].(string)
			out = append(out, fieldReq{field: f, format: fmtS})
		default:
			return nil, errParsing("[%s] entries must be strings or objects", name)
		}
	}
	return out, nil
}

func parseSortValue(v any) ([]sortSpec, *esError) {
	switch t := v.(type) {
	case string:
		return parseSortString(t), nil
	case map[string]any:
		var out []sortSpec
		for _, k := range sortedKeys(t) {
			spec := sortSpec{field: k, desc: k == "_score"}
			switch o := t[k].(type) {
			case string:
				switch strings.ToLower(o) {
				case "asc":
					spec.desc = false
				case "desc":
					spec.desc = true
				default:
					return nil, errIllegalArgument("Unknown SortOrder [%s]", o)
				}
			case map[string]any:
				for ok, ov := range o {
					switch ok {
					case "order":
						s, _ := ov.(string)
						switch strings.ToLower(s) {
						case "asc":
							spec.desc = false
						case "desc":
							spec.desc = true
						default:
							return nil, errIllegalArgument("Unknown SortOrder [%s]", s)
						}
					case "missing":
						spec.missing = ov
					case "unmapped_type":
						spec.unmappedType, _ = ov.(string)
					case "format":
						spec.format, _ = ov.(string)
					case "numeric_type":
						spec.numericType, _ = ov.(string)
					case "mode":
						spec.mode, _ = ov.(string)
					case "nested", "nested_path", "nested_filter":
					default:
						return nil, errParsing("[field_sort] unknown field [%s]", ok)
					}
				}
			default:
				return nil, errParsing("[sort] malformed sort for field [%s]", k)
			}
			out = append(out, spec)
		}
		return out, nil
	case []any:
		var out []sortSpec
		for _, e := range t {
			s, err := parseSortValue(e)
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	}
	return nil, errParsing("[sort] malformed sort")
}

func parseSortString(s string) []sortSpec {
	var out []sortSpec
	for _, part := range splitComma(s) {
		spec := sortSpec{field: part, desc: part == "_score"}
		if i := strings.LastIndexByte(part, ':'); i > 0 {
			spec.field = part[:i]
			spec.desc = strings.EqualFold(part[i+1:], "desc")
		}
		out = append(out, spec)
	}
	return out
}

// parseSearchBody reads a search (or count) request body, one key at a
// time (parseBodyKey).
func parseSearchBody(body map[string]any, count bool) (*searchReq, *esError) {
	sr := &searchReq{count: count, size: 10, trackTotal: 10000}
	for k, v := range body {
		if count {
			switch k {
			case "query":
			case "min_score", "terminate_after":
			default:
				return nil, errParsing("request does not support [%s]", k)
			}
		}
		if err := sr.parseBodyKey(k, v); err != nil {
			return nil, err
		}
	}
	return sr, nil
}

// parseBodyKey reads one key of a search body into sr: the queries, the
// paging and order, the fields returned, the scoring; aggregations are
// refused, a few keys accepted and ignored, any other one refused.
func (sr *searchReq) parseBodyKey(k string, v any) *esError {
	switch k {
	case "query", "post_filter":
		return sr.parseBodyQuery(k, v)
	case "from", "size", "sort", "track_total_hits", "search_after":
		return sr.parseBodyPaging(k, v)
	case "_source", "stored_fields", "docvalue_fields", "fields", "script_fields":
		return sr.parseBodyFields(k, v)
	case "rescore", "min_score", "track_scores", "version", "seq_no_primary_term", "terminate_after":
		return sr.parseBodyScoring(k, v)
	case "aggs", "aggregations":
		return errIllegalArgument("aggregations are not supported by the sluice test server")
	case "timeout", "highlight", "explain", "profile", "stats", "ext", "runtime_mappings", "indices_boost", "collapse", "suggest", "_name":
		// Accepted and ignored.
		return nil
	default:
		return errParsing("Unknown key for a %s in [%s].", jsonKind(v), k).with("line", 1).with("col", 1)
	}
}

// parseBodyQuery reads query and post_filter.
func (sr *searchReq) parseBodyQuery(k string, v any) *esError {
	switch k {
	case "query":
		m, ok := v.(map[string]any)
		if !ok {
			return errParsing("[query] failed to parse field [query]")
		}
		q, err := parseQuery(m)
		if err != nil {
			return err
		}
		sr.query = q
	case "post_filter":
		m, ok := v.(map[string]any)
		if !ok {
			return errParsing("[post_filter] must be an object")
		}
		q, err := parseQuery(m)
		if err != nil {
			return err
		}
		sr.postFilter = q
	}
	return nil
}

// parseBodyPaging reads from, size, sort, track_total_hits and
// search_after.
func (sr *searchReq) parseBodyPaging(k string, v any) *esError {
	switch k {
	case "from":
		n, ok := toInt(v)
		if !ok {
			return errParsing("[from] must be a number")
		}
		sr.from = n
	case "size":
		n, ok := toInt(v)
		if !ok {
			return errParsing("[size] must be a number")
		}
		sr.size, sr.sizeSet = n, true
	case "sort":
		s, err := parseSortValue(v)
		if err != nil {
			return err
		}
		sr.sort = s
	case "track_total_hits":
		switch t := v.(type) {
		case bool:
			if t {
				sr.trackTotal = -1
			} else {
				sr.trackTotal = 0
			}
		default:
			n, ok := toInt(v)
			if !ok {
				return errParsing("[track_total_hits] must be a boolean or a number")
			}
			if n < -1 {
				return errIllegalArgument("[track_total_hits] parameter must be positive or equals to -1, got %d", n)
			}
			sr.trackTotal = n
		}
	case "search_after":
		arr, ok := v.([]any)
		if !ok {
			return errParsing("[search_after] must be an array")
		}
		sr.searchAfter = arr
	}
	return nil
}

// parseBodyFields reads what a hit returns: _source, stored_fields,
// docvalue_fields, fields and script_fields.
func (sr *searchReq) parseBodyFields(k string, v any) *esError {
	switch k {
	case "_source":
		f, err := sourceFilterFromBody(v)
		if err != nil {
			return err
		}
		sr.source = f
	case "stored_fields":
		l, ok := stringList(v)
		if !ok {
			return errParsing("[stored_fields] must be a string or an array of strings")
		}
		sr.storedFields, sr.hasStored = l, true
	case "docvalue_fields":
		f, err := parseFieldReqs(v, k)
		if err != nil {
			return err
		}
		sr.docvalueFields = f
	case "fields":
		f, err := parseFieldReqs(v, k)
		if err != nil {
			return err
		}
		sr.fields = f
	case "script_fields":
		m, ok := v.(map[string]any)
		if !ok {
			return errParsing("[script_fields] must be an object")
		}
		sr.scriptFields = len(m)
	}
	return nil
}

// parseBodyScoring reads rescore, min_score, track_scores, version,
// seq_no_primary_term and terminate_after.
func (sr *searchReq) parseBodyScoring(k string, v any) *esError {
	switch k {
	case "rescore":
		arr, ok := v.([]any)
		if !ok {
			arr = []any{v}
		}
		for _, r := range arr {
			if rm, ok := r.(map[string]any); ok {
				if w, ok := toInt(rm["window_size"]); ok && w > sr.rescoreWindow {
					sr.rescoreWindow = w
				}
			}
		}
	case "min_score":
		f, ok := toFloat(v)
		if !ok {
			return errParsing("[min_score] must be a number")
		}
		sr.minScore = &f
	case "track_scores":
		sr.trackScores, _ = v.(bool)
	case "version":
		sr.version, _ = v.(bool)
	case "seq_no_primary_term":
		sr.seqNoPT, _ = v.(bool)
	case "terminate_after":
		n, _ := toInt(v)
		sr.terminateAfter = n
	}
	return nil
}

// applyParams merges URL parameters into the search request.
func (sr *searchReq) applyParams(rq *request) *esError {
	if v := rq.param("terminate_after"); v != "" {
		n, ok := toInt(v)
		if !ok {
			return errIllegalArgument("Failed to parse int parameter [terminate_after] with value [%s]", v)
		}
		sr.terminateAfter = n
	}
	if sr.terminateAfter < 0 {
		return errIllegalArgument("terminateAfter must be > 0")
	}
	if q := rq.param("q"); q != "" {
		qs := qQueryString{query: q, defaultOp: strings.ToLower(rq.param("default_operator"))}
		if qs.defaultOp == "" {
			qs.defaultOp = "or"
		}
		if df := rq.param("df"); df != "" {
			qs.fields = []string{df}
		}
		sr.query = qs
	}
	if sr.count {
		return nil
	}
	if v := rq.param("from"); v != "" {
		n, ok := toInt(v)
		if !ok {
			return errIllegalArgument("Failed to parse int parameter [from] with value [%s]", v)
		}
		sr.from = n
	}
	if v := rq.param("size"); v != "" {
		n, ok := toInt(v)
		if !ok {
			return errIllegalArgument("Failed to parse int parameter [size] with value [%s]", v)
		}
		sr.size, sr.sizeSet = n, true
	}
	if sr.from < 0 {
		return errIllegalArgument("[from] parameter cannot be negative, found [%d]", sr.from)
	}
	if sr.size < 0 {
		return errIllegalArgument("[size] parameter cannot be negative, found [%d]", sr.size)
	}
	if v := rq.param("sort"); v != "" {
		sr.sort = parseSortString(v)
	}
	if f, explicit, _ := sourceFilterFromParams(rq); explicit {
		if sr.source != nil && !rq.has("_source") && len(f.includes) == 0 && len(f.excludes) == 0 {
			// keep body filter
		} else {
			sr.source = f
		}
	}
	if v, ok := rq.q["track_total_hits"]; ok {
		switch v[0] {
		case "", "true":
			sr.trackTotal = -1
		case "false":
			sr.trackTotal = 0
		default:
			n, ok := toInt(v[0])
			if !ok {
				return errIllegalArgument("Failed to parse int parameter [track_total_hits] with value [%s]", v[0])
			}
			if n < -1 {
				return errIllegalArgument("[track_total_hits] parameter must be positive or equals to -1, got %d", n)
			}
			sr.trackTotal = n
		}
	}
	rti, err := rq.boolParam("rest_total_hits_as_int", false)
	if err != nil {
		return err
	}
	sr.restTotalInt = rti
	if rti {
		if _, ok := rq.q["track_total_hits"]; !ok && sr.trackTotal == 10000 {
			sr.trackTotal = -1
		}
		if sr.trackTotal > 0 {
			return errIllegalArgument("[rest_total_hits_as_int] cannot be used if the tracking of total hits is not accurate, got %d", sr.trackTotal)
		}
	}
	if v := rq.param("stored_fields"); v != "" {
		sr.storedFields, sr.hasStored = splitComma(v), true
	}
	if v := rq.param("docvalue_fields"); v != "" {
		for _, f := range splitComma(v) {
			sr.docvalueFields = append(sr.docvalueFields, fieldReq{field: f})
		}
	}
	if err := sr.applyFlagParams(rq); err != nil {
		return err
	}
	if rq.param("scroll") != "" {
		sr.scroll = true
	}
	return nil
}

// applyFlagParams reads the boolean parameters and search_type, refusing
// values Elasticsearch refuses.
func (sr *searchReq) applyFlagParams(rq *request) *esError {
	for _, p := range []struct {
		name string
		dst  *bool
	}{{"track_scores", &sr.trackScores}, {"version", &sr.version}, {"seq_no_primary_term", &sr.seqNoPT}} {
		b, err := rq.boolParam(p.name, false)
		if err != nil {
			return err
		}
		if b {
			*p.dst = true
		}
	}
	switch st := rq.param("search_type"); st {
	case "", "query_then_fetch", "dfs_query_then_fetch":
	default:
		return errIllegalArgument("No search type for [%s]", st)
	}
	return nil
}

type searchTarget struct {
	ix      *index
	filters []map[string]any // alias filters, OR-ed; nil: unfiltered
	pos     int
}

// searchTargets resolves the search expression to indices with the alias
// filters that apply to each.
func (s *Server) searchTargets(expr string, o resolveOpts) ([]searchTarget, *esError) {
	names, err := s.resolveIndices(expr, o)
	if err != nil {
		return nil, err
	}
	parts := splitComma(expr)
	out := make([]searchTarget, 0, len(names))
	for i, n := range names {
		ix := s.indices[n]
		t := searchTarget{ix: ix, pos: i}
		unfiltered := len(parts) == 0
		var filters []map[string]any
		for _, p := range parts {
			if strings.HasPrefix(p, "-") {
				continue
			}
			if p == "_all" || globMatch(p, n) {
				unfiltered = true
				break
			}
			for an, meta := range ix.aliases {
				if globMatch(p, an) {
					if meta.filter == nil {
						unfiltered = true
					} else {
						filters = append(filters, meta.filter)
					}
				}
			}
		}
		if !unfiltered {
			t.filters = filters
		}
		out = append(out, t)
	}
	return out, nil
}

type hit struct {
	t     *searchTarget
	e     *docEntry
	score float64
	keys  []sortKey
}

type sortKey struct {
	missing bool
	isInt   bool
	i       int64
	f       float64
	s       string
	isStr   bool
	out     any
}

func (s *Server) handleSearch(rq *request, expr string, count bool) response {
	body, err := decodeObject(rq.body)
	if err != nil {
		return errResp(err)
	}
	sr, err := parseSearchBody(body, count)
	if err != nil {
		return errResp(err)
	}
	if err := sr.applyParams(rq); err != nil {
		return errResp(err)
	}
	if sr.query == nil {
		sr.query = qMatchAll{boost: 1}
	}
	if len(sr.searchAfter) > 0 && sr.from > 0 {
		// SearchRequest.validate, before any shard: paging is search_after's job.
		return errResp(errValidation("[from] parameter must be set to 0 when [search_after] is used"))
	}
	if len(sr.searchAfter) > 0 && len(sr.sort) > 0 && len(sr.searchAfter) != len(sr.sort) {
		return errResp(errIllegalArgument("search_after has %d value(s) but sort has %d.", len(sr.searchAfter), len(sr.sort)))
	}
	o, err := s.resolveOptsFrom(rq, resolveOpts{allowNoIndices: true})
	if err != nil {
		return errResp(err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	targets, err := s.searchTargets(expr, o)
	if err != nil {
		return errResp(err)
	}
	hits, total, err := s.execute(sr, targets)
	if err != nil {
		return errResp(err)
	}
	shards := 0
	for _, t := range targets {
		shards += t.ix.settings.shards
		t.ix.stats.queryTotal.Add(1)
	}
	shardsBody := newOrderedMap().Set("total", shards).Set("successful", shards).Set("skipped", 0).Set("failed", 0)
	if count {
		return ok(newOrderedMap().Set("count", total).Set("_shards", shardsBody))
	}
	return ok(s.renderSearch(rq, sr, hits, total, shardsBody))
}

// execute runs the query over the targets and returns the sorted page of
// hits and the total number of matches.
func (s *Server) execute(sr *searchReq, targets []searchTarget) ([]*hit, int, *esError) {
	now := s.now()
	if !sr.count && len(sr.sort) > 0 {
		if err := checkSortFields(sr, targets); err != nil {
			return nil, 0, searchPhaseFailure(err)
		}
	}
	var all []*hit
	for i := range targets {
		t := &targets[i]
		ix := t.ix
		if !sr.count && !sr.unbounded {
			if err := checkLimits(sr, ix); err != nil {
				return nil, 0, searchPhaseFailure(err)
			}
		}
		c := &compileCtx{ix: ix, now: now}
		m, err := c.compile(sr.query)
		if err != nil {
			return nil, 0, searchPhaseFailure(err)
		}
		var filter matcher
		if t.filters != nil {
			var fs []matcher
			for _, fq := range t.filters {
				pq, perr := parseQuery(fq)
				if perr != nil {
					return nil, 0, searchPhaseFailure(perr)
				}
				fm, cerr := c.compile(pq)
				if cerr != nil {
					return nil, 0, searchPhaseFailure(cerr)
				}
				fs = append(fs, fm)
			}
			filter = anyOf(fs)
		}
		var post matcher
		if sr.postFilter != nil {
			if post, err = c.compile(sr.postFilter); err != nil {
				return nil, 0, searchPhaseFailure(err)
			}
		}
		for _, e := range ix.visible {
			okm, score := m(e)
			if !okm {
				continue
			}
			if filter != nil {
				if fok, _ := filter(e); !fok {
					continue
				}
			}
			if post != nil {
				if pok, _ := post(e); !pok {
					continue
				}
			}
			if sr.minScore != nil && score < *sr.minScore {
				continue
			}
			all = append(all, &hit{t: t, e: e, score: score})
		}
	}
	if sr.terminateAfter > 0 && int64(len(all)) > sr.terminateAfter {
		sortHits(all, nil)
		all = all[:sr.terminateAfter]
	}
	total := len(all)
	if sr.count {
		return nil, total, nil
	}
	if len(sr.sort) > 0 {
		for _, h := range all {
			keys, err := sortKeys(h, sr.sort)
			if err != nil {
				return nil, 0, searchPhaseFailure(err)
			}
			h.keys = keys
		}
	}
	sortHits(all, sr.sort)
	if len(sr.searchAfter) > 0 {
		after, err := afterKeys(sr, targets)
		if err != nil {
			return nil, 0, err
		}
		var kept []*hit
		for _, h := range all {
			if compareKeys(h, after, sr.sort) > 0 {
				kept = append(kept, h)
			}
		}
		all = kept
	}
	from := int(sr.from)
	if from > len(all) {
		from = len(all)
	}
	end := from + int(sr.size)
	if end > len(all) || end < from {
		end = len(all)
	}
	return all[from:end], total, nil
}

func checkLimits(sr *searchReq, ix *index) *esError {
	st := ix.settings
	if sr.scroll {
		if sr.size > st.maxResultWindow {
			return errIllegalArgument("Batch size is too large, size must be less than or equal to: [%d] but was [%d]. Scroll batch sizes cost as much memory as result windows so they are controlled by the [index.max_result_window] index level setting.", st.maxResultWindow, sr.size)
		}
		return errIllegalArgument("scroll searches are not supported by the sluice test server; use search_after")
	}
	if sr.from+sr.size > st.maxResultWindow {
		return errIllegalArgument("Result window is too large, from + size must be less than or equal to: [%d] but was [%d]. See the scroll api for a more efficient way to request large data sets. This limit can be set by changing the [index.max_result_window] index level setting.", st.maxResultWindow, sr.from+sr.size)
	}
	if sr.rescoreWindow > st.maxResultWindow {
		return errIllegalArgument("Rescore window [%d] is too large. It must be less than [%d]. This prevents allocating massive heaps for storing the results to be rescored. This limit can be set by changing the [index.max_rescore_window] index level setting.", sr.rescoreWindow, st.maxResultWindow)
	}
	if int64(len(sr.docvalueFields)) > st.maxDocvalueFields {
		return errIllegalArgument("Trying to retrieve too many docvalue_fields. Must be less than or equal to: [%d] but was [%d]. This limit can be set by changing the [index.max_docvalue_fields_search] index level setting.", st.maxDocvalueFields, len(sr.docvalueFields))
	}
	if int64(sr.scriptFields) > st.maxScriptFields {
		return errIllegalArgument("Trying to retrieve too many script_fields. Must be less than or equal to: [%d] but was [%d]. This limit can be set by changing the [index.max_script_fields] index level setting.", st.maxScriptFields, sr.scriptFields)
	}
	if sr.scriptFields > 0 {
		return errIllegalArgument("script_fields are not supported by the sluice test server")
	}
	return nil
}

func sortHits(hs []*hit, specs []sortSpec) {
	sort.SliceStable(hs, func(i, j int) bool {
		a, b := hs[i], hs[j]
		if len(specs) == 0 {
			if a.score != b.score {
				return a.score > b.score
			}
		} else if c := compareKeys(a, b.keys, specs); c != 0 {
			return c < 0
		}
		if a.t.pos != b.t.pos {
			return a.t.pos < b.t.pos
		}
		return a.e.order < b.e.order
	})
}

// compareKeys compares hit a's keys with keys (another hit's or the
// search_after values) in sort order.
func compareKeys(a *hit, keys []sortKey, specs []sortSpec) int {
	for i, sp := range specs {
		x, y := a.keys[i], keys[i]
		if x.missing || y.missing {
			if x.missing && y.missing {
				continue
			}
			first := sp.missing == "_first"
			if x.missing == first {
				return -1
			}
			return 1
		}
		var c int
		switch {
		case x.isStr || y.isStr:
			c = strings.Compare(x.s, y.s)
		case x.isInt && y.isInt:
			c = cmpInt(x.i, y.i)
		default:
			c = cmpFloat(x.f, y.f)
		}
		if sp.desc {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func intKey(v int64) sortKey     { return sortKey{isInt: true, i: v, f: float64(v), out: v} }
func floatKey(v float64) sortKey { return sortKey{f: v, out: v} }

// sortFieldError is Elasticsearch's refusal to sort index ix on field a,
// or nil when it can.
func sortFieldError(ix *index, a *fieldAcc, sp sortSpec) *esError {
	switch a.kind {
	case kUnmapped:
		if sp.unmappedType != "" {
			return nil
		}
		return errQueryShard(ix, "No mapping found for [%s] in order to sort on", sp.field)
	case kText:
		return errIllegalArgument("Text fields are not optimised for operations that require per-document field data like aggregations and sorting, so these operations are disabled by default. Please use a keyword field instead. Alternatively, set fielddata=true on [%s] in order to load field data by uninverting the inverted index. Note that this can use significant memory.", sp.field)
	case kObject:
		return errIllegalArgument("Fielddata is not supported on field [%s] of type [object]", sp.field)
	case kID:
		// indices.id_field_data.enabled is false by default since 8.0.
		return errIllegalArgument("Fielddata access on the _id field is disallowed, you can re-enable it by updating the dynamic cluster setting: indices.id_field_data.enabled")
	}
	return nil
}

// checkSortFields refuses a sort that no target index can run, before any
// document is looked at: Elasticsearch builds the sort on every shard, so
// an unmapped sort field fails even on an empty index (a new read model's
// first search). When some target can sort, hits of the others fail
// (sortKeys), as before.
func checkSortFields(sr *searchReq, targets []searchTarget) *esError {
	var first *esError
	for i := range targets {
		ix := targets[i].ix
		c := &compileCtx{ix: ix}
		var err *esError
		for _, sp := range sr.sort {
			if sp.field == "_score" || sp.field == "_doc" || sp.field == "_shard_doc" {
				continue
			}
			if err = sortFieldError(ix, c.field(sp.field), sp); err != nil {
				break
			}
		}
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

func sortKeys(h *hit, specs []sortSpec) ([]sortKey, *esError) {
	keys := make([]sortKey, len(specs))
	ix := h.t.ix
	c := &compileCtx{ix: ix}
	for i, sp := range specs {
		switch sp.field {
		case "_score":
			keys[i] = floatKey(h.score)
			continue
		case "_doc", "_shard_doc":
			keys[i] = intKey(h.e.order)
			continue
		}
		a := c.field(sp.field)
		if a.kind == kUnmapped && sp.unmappedType != "" {
			keys[i] = missingKey(sp, sp.unmappedType, sp.desc)
			continue
		}
		if err := sortFieldError(ix, a, sp); err != nil {
			return nil, err
		}
		vals := a.values(ix, h.e)
		var cands []sortKey
		for _, v := range vals {
			k, ok := valueKey(a, v, sp)
			if ok {
				cands = append(cands, k)
			}
		}
		if len(cands) == 0 {
			typ := ""
			if a.fm != nil {
				typ = a.fm.Type
			}
			if a.kind == kKeyword || a.kind == kOther || a.kind == kID || a.kind == kIndex {
				typ = "keyword"
			}
			keys[i] = missingKey(sp, typ, sp.desc)
			continue
		}
		best := cands[0]
		useMax := sp.desc
		switch sp.mode {
		case "min":
			useMax = false
		case "max":
			useMax = true
		}
		for _, k := range cands[1:] {
			var cmp int
			switch {
			case k.isStr:
				cmp = strings.Compare(k.s, best.s)
			case k.isInt && best.isInt:
				cmp = cmpInt(k.i, best.i)
			default:
				cmp = cmpFloat(k.f, best.f)
			}
			if (useMax && cmp > 0) || (!useMax && cmp < 0) {
				best = k
			}
		}
		keys[i] = best
	}
	return keys, nil
}

// valueKey converts a field value to its sort key.
func valueKey(a *fieldAcc, v any, sp sortSpec) (sortKey, bool) {
	switch a.kind {
	case kNumeric:
		if a.integer {
			if n, ok := toInt(v); ok {
				return intKey(n), true
			}
			f, ok := toFloat(v)
			if !ok {
				return sortKey{}, false
			}
			return intKey(int64(f)), true
		}
		f, ok := toFloat(v)
		if !ok {
			return sortKey{}, false
		}
		if a.fm.Type == "float" || a.fm.Type == "half_float" {
			f = float64(float32(f))
		}
		return floatKey(f), true
	case kDate:
		t, _, err := parseDateValue(v, a.fm)
		if err != nil {
			return sortKey{}, false
		}
		return dateKey(t, a, sp), true
	case kBool:
		b, ok := parseBoolValue(v)
		if !ok {
			return sortKey{}, false
		}
		if b {
			return intKey(1), true
		}
		return intKey(0), true
	}
	s, ok := asString(v)
	if !ok {
		return sortKey{}, false
	}
	return sortKey{isStr: true, s: s, out: s}, true
}

func dateKey(t time.Time, a *fieldAcc, sp sortSpec) sortKey {
	nanos := a.nanos
	switch sp.numericType {
	case "date":
		nanos = false
	case "date_nanos":
		nanos = true
	}
	var k sortKey
	if nanos {
		k = intKey(t.UnixNano())
	} else {
		k = intKey(t.UnixMilli())
	}
	// compare at nanosecond precision across mixed indices
	k.isInt, k.i = true, t.UnixNano()
	k.f = float64(k.i)
	if sp.format != "" {
		k.out = formatDate(t, sp.format, a.nanos)
	} else if nanos {
		k.out = t.UnixNano()
	} else {
		k.out = t.UnixMilli()
	}
	return k
}

// missingKey returns the key for a document without a value.
func missingKey(sp sortSpec, typ string, desc bool) sortKey {
	if sp.missing != nil && sp.missing != "_last" && sp.missing != "_first" {
		if n, ok := toInt(sp.missing); ok {
			return intKey(n)
		}
		if f, ok := toFloat(sp.missing); ok {
			return floatKey(f)
		}
		s, _ := asString(sp.missing)
		return sortKey{isStr: true, s: s, out: s}
	}
	first := sp.missing == "_first"
	high := first == desc // value that sorts last in asc is high
	switch {
	case typ == "integer" || typ == "short" || typ == "byte":
		if high {
			return intKey(math.MaxInt32)
		}
		return intKey(math.MinInt32)
	case typ == "long" || typ == "unsigned_long" || ((typ == "date" || typ == "date_nanos" || typ == "boolean") && sp.format == ""):
		if high {
			return intKey(math.MaxInt64)
		}
		return intKey(math.MinInt64)
	case typ == "double" || typ == "float" || typ == "half_float" || typ == "scaled_float":
		if high {
			return sortKey{f: math.Inf(1), out: "Infinity"}
		}
		return sortKey{f: math.Inf(-1), out: "-Infinity"}
	}
	return sortKey{missing: true, out: nil}
}

// afterKeys converts search_after values into sort keys using the first
// target whose mapping knows each sort field.
func afterKeys(sr *searchReq, targets []searchTarget) ([]sortKey, *esError) {
	if len(sr.sort) == 0 {
		return nil, errIllegalArgument("search_after requires a sort")
	}
	keys := make([]sortKey, len(sr.sort))
	for i, sp := range sr.sort {
		v := sr.searchAfter[i]
		if v == nil {
			keys[i] = sortKey{missing: true}
			continue
		}
		var a *fieldAcc
		for _, t := range targets {
			c := &compileCtx{ix: t.ix}
			if fa := c.field(sp.field); fa.kind != kUnmapped {
				a = fa
				break
			}
		}
		switch {
		case sp.field == "_score":
			f, _ := toFloat(v)
			keys[i] = floatKey(f)
		case sp.field == "_doc" || sp.field == "_shard_doc":
			n, _ := toInt(v)
			keys[i] = intKey(n)
		case a != nil && a.kind == kDate:
			k, err := afterDateKey(a, v, sp)
			if err != nil {
				return nil, err
			}
			keys[i] = k
		case a != nil && (a.kind == kNumeric || a.kind == kBool):
			if n, ok := toInt(v); ok && (a.integer || a.kind == kBool) {
				keys[i] = intKey(n)
			} else if f, ok := toFloat(v); ok {
				keys[i] = floatKey(f)
			} else {
				return nil, searchPhaseFailure(errIllegalArgument("Failed to parse search_after value for field [%s].", sp.field))
			}
		default:
			if s, ok := v.(string); ok {
				keys[i] = sortKey{isStr: true, s: s}
			} else if n, ok := toInt(v); ok {
				keys[i] = intKey(n)
			} else if f, ok := toFloat(v); ok {
				keys[i] = floatKey(f)
			} else {
				s, _ := asString(v)
				keys[i] = sortKey{isStr: true, s: s}
			}
		}
	}
	return keys, nil
}

func afterDateKey(a *fieldAcc, v any, sp sortSpec) (sortKey, *esError) {
	nanos := a.nanos
	switch sp.numericType {
	case "date":
		nanos = false
	case "date_nanos":
		nanos = true
	}
	var t time.Time
	switch x := v.(type) {
	case string:
		format := sp.format
		if format == "" {
			format = dateFormatOf(a.fm)
		}
		pt, _, err := parseDateFormats(x, format)
		if err != nil {
			e := newErr(http.StatusBadRequest, "parse_exception", "failed to parse date field [%s] with format [%s]", x, format)
			return sortKey{}, searchPhaseFailure(e)
		}
		t = pt
	default:
		n, ok := toInt(x)
		if !ok {
			return sortKey{}, searchPhaseFailure(errIllegalArgument("failed to parse date field [%v]", v))
		}
		if nanos {
			t = time.Unix(0, n).UTC()
		} else {
			t = time.UnixMilli(n).UTC()
		}
	}
	return sortKey{isInt: true, i: t.UnixNano(), f: float64(t.UnixNano())}, nil
}

// renderSearch builds the search response body.
func (s *Server) renderSearch(rq *request, sr *searchReq, hits []*hit, total int, shards *orderedMap) *orderedMap {
	scored := len(sr.sort) == 0 || sr.trackScores
	for _, sp := range sr.sort {
		if sp.field == "_score" {
			scored = true
		}
	}
	var maxScore any
	if scored && len(hits) > 0 {
		m := math.Inf(-1)
		for _, h := range hits {
			m = math.Max(m, h.score)
		}
		maxScore = m
	}
	if scored && total > 0 && len(hits) == 0 && sr.size == 0 {
		maxScore = nil
	}
	out := make([]any, 0, len(hits))
	for _, h := range hits {
		out = append(out, renderHit(sr, h, scored))
	}
	hitsBody := newOrderedMap()
	switch {
	case sr.trackTotal == 0:
		if sr.restTotalInt {
			hitsBody.Set("total", -1)
		}
	case sr.restTotalInt:
		hitsBody.Set("total", total)
	default:
		rel := "eq"
		v := int64(total)
		if sr.trackTotal > 0 && v > sr.trackTotal {
			v, rel = sr.trackTotal, "gte"
		}
		hitsBody.Set("total", newOrderedMap().Set("value", v).Set("relation", rel))
	}
	hitsBody.Set("max_score", maxScore)
	hitsBody.Set("hits", out)
	return newOrderedMap().
		Set("took", s.took(rq)).
		Set("timed_out", false).
		Set("_shards", shards).
		Set("hits", hitsBody)
}

func renderHit(sr *searchReq, h *hit, scored bool) *orderedMap {
	ix := h.t.ix
	e := h.e
	m := newOrderedMap().Set("_index", ix.name).Set("_id", e.id)
	if sr.version {
		m.Set("_version", e.version)
	}
	if sr.seqNoPT {
		m.Set("_seq_no", e.seqNo).Set("_primary_term", e.primaryTerm)
	}
	if scored {
		m.Set("_score", h.score)
	} else {
		m.Set("_score", nil)
	}
	src := sr.source
	if sr.hasStored && src == nil {
		src = &sourceFilter{disabled: true}
		for _, f := range sr.storedFields {
			if f == "_source" {
				src = nil
			}
		}
	}
	switch {
	case src != nil && src.disabled:
	case src.isNoop():
		m.Set("_source", rawSource(e.source))
	default:
		m.Set("_source", src.apply(e.parsed))
	}
	fields := map[string]any{}
	if sr.hasStored {
		for k, v := range storedFields(ix, e, sr.storedFields) {
			fields[k] = v
		}
	}
	c := &compileCtx{ix: ix}
	for _, fr := range append(append([]fieldReq{}, sr.docvalueFields...), sr.fields...) {
		for _, name := range c.expandFields([]string{fr.field}) {
			if vals := fieldValues(c, name, fr.format, e); len(vals) > 0 {
				fields[name] = vals
			}
		}
	}
	if len(fields) > 0 {
		m.Set("fields", fields)
	}
	if len(sr.sort) > 0 {
		vals := make([]any, len(h.keys))
		for i, k := range h.keys {
			vals[i] = k.out
		}
		m.Set("sort", vals)
	}
	return m
}

// fieldValues renders doc-value style field values for fields and
// docvalue_fields.
func fieldValues(c *compileCtx, name, format string, e *docEntry) []any {
	a := c.field(name)
	if a.kind == kUnmapped || a.kind == kObject {
		return nil
	}
	vals := a.values(c.ix, e)
	out := make([]any, 0, len(vals))
	for _, v := range vals {
		switch a.kind {
		case kNumeric:
			f, ok := toFloat(v)
			if !ok {
				continue
			}
			var nv any = f
			if a.integer {
				nv = int64(f)
				if n, ok := toInt(v); ok {
					nv = n
				}
			} else if a.fm.Type == "float" || a.fm.Type == "half_float" {
				nv = float64(float32(f))
			}
			if format != "" {
				out = append(out, decimalFormat(f, format))
				continue
			}
			out = append(out, nv)
		case kDate:
			t, _, err := parseDateValue(v, a.fm)
			if err != nil {
				continue
			}
			f := format
			if f == "" {
				f = dateFormatOf(a.fm)
			}
			out = append(out, formatDate(t, f, a.nanos))
		case kBool:
			b, _ := parseBoolValue(v)
			out = append(out, b)
		default:
			s, _ := asString(v)
			out = append(out, s)
		}
	}
	return out
}

// decimalFormat implements the common Java DecimalFormat patterns
// ("#.0", "0.00", "#").
func decimalFormat(f float64, pattern string) string {
	decimals := 0
	if i := strings.IndexByte(pattern, '.'); i >= 0 {
		decimals = strings.Count(pattern[i+1:], "0") + strings.Count(pattern[i+1:], "#")
		s := strconv.FormatFloat(f, 'f', decimals, 64)
		minDec := strings.Count(pattern[i+1:], "0")
		if minDec < decimals {
			s = strings.TrimRight(s, "0")
			dot := strings.IndexByte(s, '.')
			for len(s)-dot-1 < minDec {
				s += "0"
			}
			s = strings.TrimSuffix(s, ".")
		}
		return s
	}
	return strconv.FormatFloat(math.Round(f), 'f', 0, 64)
}

func (s *Server) handleDeleteByQuery(rq *request, expr string) response {
	start := time.Now()
	body, err := decodeObject(rq.body)
	if err != nil {
		return errResp(err)
	}
	qm, isObj := body["query"].(map[string]any)
	if !isObj {
		return errResp(errValidation("query is missing"))
	}
	q, err := parseQuery(qm)
	if err != nil {
		return errResp(err)
	}
	refresh, err := rq.boolParam("refresh", false)
	if err != nil {
		return errResp(err)
	}
	conflicts, _ := body["conflicts"].(string)
	if rq.has("conflicts") {
		conflicts = rq.param("conflicts")
	}
	switch c := conflicts; c {
	case "", "abort", "proceed": // one writer at a time: there are no conflicts to count
	default:
		return errResp(errIllegalArgument("conflicts may only be \"proceed\" or \"abort\" but was [%s]", c))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	targets, err := s.searchTargets(expr, resolveOpts{allowNoIndices: true})
	if err != nil {
		return errResp(err)
	}
	deleted := 0
	for i := range targets {
		t := targets[i]
		hits, _, err := s.execute(&searchReq{query: q, size: math.MaxInt32, trackTotal: -1, unbounded: true}, []searchTarget{t})
		if err != nil {
			return errResp(err)
		}
		for _, h := range hits {
			res := s.applyWrite(&writeOp{action: "delete", index: t.ix.name, id: h.e.id, versionType: vtInternal})
			if res.err == nil && res.result == "deleted" {
				deleted++
			}
		}
		if refresh {
			t.ix.refresh()
		}
	}
	return ok(newOrderedMap().
		Set("took", time.Since(start).Milliseconds()).
		Set("timed_out", false).
		Set("total", deleted).
		Set("deleted", deleted).
		Set("batches", 1).
		Set("version_conflicts", 0).
		Set("noops", 0).
		Set("retries", map[string]any{"bulk": 0, "search": 0}).
		Set("throttled_millis", 0).
		Set("requests_per_second", -1.0).
		Set("throttled_until_millis", 0).
		Set("failures", []any{}))
}
