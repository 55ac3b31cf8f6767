package esserver

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf16"
)

// index is one Elasticsearch index. All fields are guarded by Server.mu.
type index struct {
	name     string
	uuid     string
	created  time.Time
	settings indexSettings
	mapping  *fieldMapping
	aliases  map[string]*aliasMeta

	docs    map[string]*docEntry // live documents and delete tombstones
	visible map[string]*docEntry // what search sees (last refresh)
	pending map[string]int       // ids changed since the last refresh -> shard
	seqNo   int64                // last assigned sequence number (-1: none)
	order   int64                // Lucene-like doc order counter

	stats indexStats
}

type indexStats struct {
	indexTotal, deleteTotal, noopUpdateTotal, refreshTotal int64
	// updated under the read lock
	getTotal, queryTotal atomic.Int64
}

// docEntry is an immutable document version (or tombstone).
type docEntry struct {
	id          string
	version     int64
	seqNo       int64
	primaryTerm int64
	deleted     bool
	source      string         // its own copy, not a slice of a request's body
	parsed      map[string]any // its strings may slice source
	order       int64
}

type indexSettings struct {
	shards            int
	routingShards     int
	replicas          int
	autoRefresh       bool
	maxResultWindow   int64
	maxDocvalueFields int64
	maxScriptFields   int64
	maxRegexLength    int64
	maxTermsCount     int64
	flat              map[string]any // "index.xxx" -> string or []string
}

type aliasMeta struct {
	filter        map[string]any
	indexRouting  string
	searchRouting string
	isWriteIndex  *bool
	isHidden      *bool
}

func (a *aliasMeta) render() map[string]any {
	out := map[string]any{}
	if a.filter != nil {
		out["filter"] = a.filter
	}
	if a.indexRouting != "" {
		out["index_routing"] = a.indexRouting
	}
	if a.searchRouting != "" {
		out["search_routing"] = a.searchRouting
	}
	if a.isWriteIndex != nil {
		out["is_write_index"] = *a.isWriteIndex
	}
	if a.isHidden != nil {
		out["is_hidden"] = *a.isHidden
	}
	return out
}

// shardCounts is the _shards header for write operations.
func (ix *index) writeShards() *orderedMap {
	return newOrderedMap().Set("total", 1+ix.settings.replicas).Set("successful", 1).Set("failed", 0)
}

// --- names ---------------------------------------------------------------

const invalidFilenameChars = `[ , ", *, \, <, |, ,, >, /, ?]`

// namingProblem says why a non-empty name breaks the rules Elasticsearch
// applies to index and alias names alike, or returns "".
func namingProblem(name string) string {
	switch {
	case strings.ContainsAny(name, "\\/*?\"<>| ,"):
		return "must not contain the following characters " + invalidFilenameChars
	case strings.Contains(name, "#"):
		return "must not contain '#'"
	case strings.Contains(name, ":"):
		return "must not contain ':'"
	case name[0] == '_' || name[0] == '-' || name[0] == '+':
		return "must not start with '_', '-', or '+'"
	case strings.ToLower(name) != name:
		return "must be lowercase"
	}
	return ""
}

func validateIndexName(name string) *esError {
	if name == "" {
		return errInvalidIndexName(name, "must not be empty")
	}
	if why := namingProblem(name); why != "" {
		return errInvalidIndexName(name, why)
	}
	if name == "." || name == ".." {
		return errInvalidIndexName(name, "must not be '.' or '..'")
	}
	if len(name) > 255 {
		return errInvalidIndexName(name, fmt.Sprintf("index name is too long, (%d > 255)", len(name)))
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return errInvalidIndexName(name, "must not contain control characters")
		}
	}
	return nil
}

func errInvalidAliasName(name, why string) *esError {
	return newErr(http.StatusBadRequest, "invalid_alias_name_exception", "Invalid alias name [%s]: %s", name, why)
}

func validateAliasName(name string) *esError {
	if name == "" {
		return errInvalidAliasName(name, "alias name cannot be empty")
	}
	if why := namingProblem(name); why != "" {
		return errInvalidAliasName(name, why)
	}
	return nil
}

// --- settings ------------------------------------------------------------

func flattenSettings(prefix string, v any, out map[string]any) *esError {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			if err := flattenSettings(key, e, out); err != nil {
				return err
			}
		}
	case []any:
		arr := make([]any, 0, len(t))
		for _, e := range t {
			s, ok := asString(e)
			if !ok {
				return errIllegalArgument("failed to parse setting [%s]: arrays may only contain values", prefix)
			}
			arr = append(arr, s)
		}
		out[prefix] = arr
	case nil:
		out[prefix] = nil
	default:
		s, _ := asString(t)
		out[prefix] = s
	}
	return nil
}

func normaliseSettingKeys(in map[string]any) map[string]any {
	out := make(map[string]any, len(in))
	for k, v := range in {
		if !strings.HasPrefix(k, "index.") {
			k = "index." + k
		}
		out[k] = v
	}
	return out
}

func parseIndexSettings(v any) (map[string]any, *esError) {
	if v == nil {
		return map[string]any{}, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errIllegalArgument("Malformed [settings] section for [index], should include an inner object")
	}
	flat := map[string]any{}
	if err := flattenSettings("", m, flat); err != nil {
		return nil, err
	}
	return normaliseSettingKeys(flat), nil
}

func settingInt(flat map[string]any, key string, def int64, min int64) (int64, *esError) {
	v, ok := flat[key]
	if !ok || v == nil {
		return def, nil
	}
	s, _ := v.(string)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errIllegalArgument("Failed to parse value [%s] for setting [%s]", s, key)
	}
	if n < min {
		return 0, errIllegalArgument("Failed to parse value [%s] for setting [%s] must be >= %d", s, key, min)
	}
	return n, nil
}

func buildSettings(flat map[string]any) (indexSettings, *esError) {
	st := indexSettings{flat: flat}
	if v, ok := flat["index.soft_deletes.enabled"]; ok && v == "false" {
		return st, errIllegalArgument("Creating indices with soft-deletes disabled is no longer supported. Please do not specify a value for setting [index.soft_deletes.enabled].")
	}
	if v, ok := flat["index.mode"]; ok && v == "lookup" {
		if n, ok := flat["index.number_of_shards"]; ok && n != "1" {
			return st, errIllegalArgument("index with [lookup] mode must have [index.number_of_shards] set to 1 or unset; provided %v", n)
		}
	}
	n, err := settingInt(flat, "index.number_of_shards", 1, 1)
	if err != nil {
		return st, err
	}
	st.shards = int(n)
	defRouting := int64(n)
	if n > 1 {
		log2n := int64(bits.Len64(uint64(n - 1)))
		splits := 10 - log2n
		if splits < 1 {
			splits = 1
		}
		defRouting = n << splits
	}
	rs, err := settingInt(flat, "index.number_of_routing_shards", defRouting, n)
	if err != nil {
		return st, err
	}
	if rs%n != 0 {
		return st, errIllegalArgument("the number of source shards [%d] must be a factor of [%d]", n, rs)
	}
	st.routingShards = int(rs)
	r, err := settingInt(flat, "index.number_of_replicas", 1, 0)
	if err != nil {
		return st, err
	}
	st.replicas = int(r)
	if st.maxResultWindow, err = settingInt(flat, "index.max_result_window", 10000, 1); err != nil {
		return st, err
	}
	if st.maxDocvalueFields, err = settingInt(flat, "index.max_docvalue_fields_search", 100, 0); err != nil {
		return st, err
	}
	if st.maxScriptFields, err = settingInt(flat, "index.max_script_fields", 32, 0); err != nil {
		return st, err
	}
	if st.maxRegexLength, err = settingInt(flat, "index.max_regex_length", 1000, 1); err != nil {
		return st, err
	}
	if st.maxTermsCount, err = settingInt(flat, "index.max_terms_count", 65536, 1); err != nil {
		return st, err
	}
	st.autoRefresh = true
	if ri, ok := flat["index.refresh_interval"]; ok && ri != nil {
		s, _ := ri.(string)
		if strings.HasPrefix(s, "-") {
			st.autoRefresh = false
		} else if _, perr := parseTimeValue(s); perr != nil {
			return st, errIllegalArgument("failed to parse setting [index.refresh_interval] with value [%s] as a time value: unit is missing or unrecognized", s)
		}
	}
	return st, nil
}

func parseTimeValue(s string) (time.Duration, error) {
	units := []struct {
		suf string
		d   time.Duration
	}{{"nanos", time.Nanosecond}, {"micros", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}, {"d", 24 * time.Hour}}
	for _, u := range units {
		if strings.HasSuffix(s, u.suf) {
			n, err := strconv.ParseFloat(strings.TrimSuffix(s, u.suf), 64)
			if err != nil {
				return 0, err
			}
			return time.Duration(n * float64(u.d)), nil
		}
	}
	if s == "0" {
		return 0, nil
	}
	return 0, fmt.Errorf("unit missing in %q", s)
}

// renderSettings turns the flat settings into the nested form ES returns.
func (ix *index) renderSettings(flatOut bool) map[string]any {
	flat := map[string]any{}
	for k, v := range ix.settings.flat {
		if v != nil {
			flat[k] = v
		}
	}
	flat["index.number_of_shards"] = strconv.Itoa(ix.settings.shards)
	flat["index.number_of_replicas"] = strconv.Itoa(ix.settings.replicas)
	flat["index.uuid"] = ix.uuid
	flat["index.provided_name"] = ix.name
	flat["index.creation_date"] = strconv.FormatInt(ix.created.UnixMilli(), 10)
	flat["index.version.created"] = "8512000"
	if _, ok := flat["index.routing.allocation.include._tier_preference"]; !ok {
		flat["index.routing.allocation.include._tier_preference"] = "data_content"
	}
	if flatOut {
		return flat
	}
	return unflatten(flat)
}

func unflatten(flat map[string]any) map[string]any {
	out := map[string]any{}
	keys := make([]string, 0, len(flat))
	for k := range flat {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts := strings.Split(k, ".")
		cur := out
		for _, p := range parts[:len(parts)-1] {
			next, ok := cur[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				cur[p] = next
			}
			cur = next
		}
		cur[parts[len(parts)-1]] = flat[k]
	}
	return out
}

// --- index lifecycle ---------------------------------------------------------

func (s *Server) newIndex(name string, flat map[string]any, st indexSettings, mapping *fieldMapping) *index {
	if mapping == nil {
		mapping = &fieldMapping{Properties: map[string]*fieldMapping{}, Params: map[string]any{}}
	}
	return &index{
		name:     name,
		uuid:     s.newUUID(),
		created:  s.now(),
		settings: st,
		mapping:  mapping,
		aliases:  map[string]*aliasMeta{},
		docs:     map[string]*docEntry{},
		visible:  map[string]*docEntry{},
		pending:  map[string]int{},
		seqNo:    -1,
	}
}

// aliasExists reports whether name is an alias of any index.
func (s *Server) aliasIndices(name string) []string {
	var out []string
	for _, ix := range s.indices {
		if _, ok := ix.aliases[name]; ok {
			out = append(out, ix.name)
		}
	}
	sort.Strings(out)
	return out
}

// createIndexLocked creates an index from a create-index body.
func (s *Server) createIndexLocked(rawName string, body map[string]any) (*index, *esError) {
	name, derr := resolveDateMathName(rawName, s.now())
	if derr != nil {
		return nil, errInvalidIndexName(rawName, derr.Error())
	}
	if err := validateIndexName(name); err != nil {
		return nil, err
	}
	if ix := s.indices[name]; ix != nil {
		return nil, errAlreadyExists(name, ix.uuid)
	}
	if len(s.aliasIndices(name)) > 0 {
		return nil, errInvalidIndexName(name, "already exists as alias")
	}
	for k := range body {
		switch k {
		case "settings", "mappings", "aliases":
		default:
			if k == "index" || strings.HasPrefix(k, "index.") || k == "number_of_shards" || k == "number_of_replicas" {
				continue // settings given at the top level are accepted like ES
			}
			return nil, errParsing("unknown key [%s] for create index", k)
		}
	}
	var settingsBody any = body["settings"]
	if settingsBody == nil {
		top := map[string]any{}
		for k, v := range body {
			if k != "mappings" && k != "aliases" && k != "settings" {
				top[k] = v
			}
		}
		if len(top) > 0 {
			settingsBody = top
		}
	}
	if _, isStr := settingsBody.(string); isStr {
		return nil, errIllegalArgument("Malformed [settings] section for [index], should include an inner object")
	}
	flat, err := parseIndexSettings(settingsBody)
	if err != nil {
		return nil, err
	}
	st, err := buildSettings(flat)
	if err != nil {
		return nil, err
	}
	var mapping *fieldMapping
	if mb, ok := body["mappings"]; ok && mb != nil {
		if _, ok := mb.(map[string]any); !ok {
			return nil, errMapperParsing("Failed to parse mapping: Expected map for property [mappings] but got a %s", goKind(mb))
		}
		if mapping, err = parseMappings(mb); err != nil {
			return nil, err
		}
	}
	aliases := map[string]*aliasMeta{}
	if ab, ok := body["aliases"]; ok && ab != nil {
		am, ok := ab.(map[string]any)
		if !ok {
			return nil, errIllegalArgument("Malformed [aliases] section for [index], should include an inner object")
		}
		for an, adef := range am {
			resolved, derr := resolveDateMathName(an, s.now())
			if derr != nil {
				return nil, errInvalidAliasName(an, derr.Error())
			}
			if err := validateAliasName(resolved); err != nil {
				return nil, err
			}
			if resolved == name || s.indices[resolved] != nil {
				return nil, errInvalidAliasName(resolved, "an index or data stream exists with the same name as the alias")
			}
			meta, err := parseAliasBody(resolved, adef, true)
			if err != nil {
				return nil, err
			}
			aliases[resolved] = meta
		}
	}
	ix := s.newIndex(name, flat, st, mapping)
	ix.aliases = aliases
	for an, meta := range aliases {
		if err := s.checkWriteIndexUnique(an, name, meta); err != nil {
			return nil, err
		}
	}
	s.indices[name] = ix
	s.journalMeta(ix)
	return ix, nil
}

func (s *Server) checkWriteIndexUnique(alias, indexName string, meta *aliasMeta) *esError {
	if meta.isWriteIndex == nil || !*meta.isWriteIndex {
		return nil
	}
	for _, other := range s.indices {
		if other.name == indexName {
			continue
		}
		if m, ok := other.aliases[alias]; ok && m.isWriteIndex != nil && *m.isWriteIndex {
			return errIllegalArgument("alias [%s] has more than one write index [%s,%s]", alias, other.name, indexName)
		}
	}
	return nil
}

// parseAliasBody parses an alias definition (create-index aliases section,
// put-alias body or an _aliases add action's extra fields).
func parseAliasBody(alias string, v any, strictTypes bool) (*aliasMeta, *esError) {
	meta := &aliasMeta{}
	if v == nil {
		return meta, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errIllegalArgument("Malformed [aliases] section for alias [%s], should include an inner object", alias)
	}
	strField := func(k string, val any) (string, *esError) {
		switch t := val.(type) {
		case string:
			return t, nil
		case json.Number:
			return string(t), nil
		case []any:
			return "", errIllegalArgument("[%s] Unexpected token [START_ARRAY]", k)
		case bool:
			return "", errIllegalArgument("Unsupported boolean type value [%t] for field [%s] in alias [%s]", t, k, alias)
		case map[string]any:
			return "", errIllegalArgument("[%s] Unexpected token [START_OBJECT]", k)
		}
		return "", nil
	}
	boolField := func(k string, val any) (*bool, *esError) {
		switch t := val.(type) {
		case bool:
			return &t, nil
		case nil:
			return nil, nil
		case string:
			if strictTypes {
				return nil, errIllegalArgument("Unsupported String type value [%s] for field [%s] in alias [%s]", t, k, alias)
			}
			b := t == "true"
			return &b, nil
		}
		return nil, errIllegalArgument("[%s] Unexpected token for field [%s] in alias [%s]", jsonKind(val), k, alias)
	}
	for k, val := range m {
		switch k {
		case "filter":
			f, ok := val.(map[string]any)
			if !ok && val != nil {
				return nil, errIllegalArgument("failed to parse filter for alias [%s]", alias)
			}
			if f != nil {
				if _, err := parseQuery(f); err != nil {
					e := errIllegalArgument("failed to parse filter for alias [%s]", alias)
					e.CausedBy = err
					return nil, e
				}
			}
			meta.filter = f
		case "routing":
			s, err := strField(k, val)
			if err != nil {
				return nil, err
			}
			meta.indexRouting, meta.searchRouting = s, s
		case "index_routing":
			s, err := strField(k, val)
			if err != nil {
				return nil, err
			}
			meta.indexRouting = s
		case "search_routing":
			s, err := strField(k, val)
			if err != nil {
				return nil, err
			}
			meta.searchRouting = s
		case "is_write_index":
			b, err := boolField(k, val)
			if err != nil {
				return nil, err
			}
			meta.isWriteIndex = b
		case "is_hidden":
			b, err := boolField(k, val)
			if err != nil {
				return nil, err
			}
			meta.isHidden = b
		default:
			return nil, errIllegalArgument("Unsupported field [%s]", k)
		}
	}
	return meta, nil
}

// --- resolution --------------------------------------------------------------

type resolveOpts struct {
	ignoreUnavailable bool
	allowNoIndices    bool
	noAliases         bool // aliases are errors (delete index)
}

func (s *Server) resolveOptsFrom(rq *request, def resolveOpts) (resolveOpts, *esError) {
	o := def
	var err *esError
	if o.ignoreUnavailable, err = rq.boolParam("ignore_unavailable", def.ignoreUnavailable); err != nil {
		return o, err
	}
	if o.allowNoIndices, err = rq.boolParam("allow_no_indices", def.allowNoIndices); err != nil {
		return o, err
	}
	return o, nil
}

// indicesOf resolves expr with the request's ignore_unavailable and
// allow_no_indices (default: allowed), as the index read and refresh
// APIs do. The caller holds s.mu.
func (s *Server) indicesOf(rq *request, expr string) ([]string, *esError) {
	o, err := s.resolveOptsFrom(rq, resolveOpts{allowNoIndices: true})
	if err != nil {
		return nil, err
	}
	return s.resolveIndices(expr, o)
}

// resolveIndices expands an index expression (comma list, wildcards,
// _all, aliases, -exclusions, date math) to concrete index names, sorted.
func (s *Server) resolveIndices(expr string, o resolveOpts) ([]string, *esError) {
	parts := splitComma(expr)
	if len(parts) == 0 || (len(parts) == 1 && parts[0] == "_all") {
		parts = []string{"*"}
	}
	set := map[string]bool{}
	var order []string
	add := func(n string) {
		if !set[n] {
			set[n] = true
			order = append(order, n)
		}
	}
	wildcardSeen := false
	for i, p := range parts {
		if strings.HasPrefix(p, "-") && i > 0 {
			pat := p[1:]
			for n := range set {
				if globMatch(pat, n) {
					delete(set, n)
				}
			}
			continue
		}
		name, derr := resolveDateMathName(p, s.now())
		if derr != nil {
			return nil, errIllegalArgument("%s", derr.Error())
		}
		if name == "_all" {
			name = "*"
		}
		if strings.Contains(name, "*") {
			wildcardSeen = true
			matched := 0
			for n := range s.indices {
				if globMatch(name, n) && (!strings.HasPrefix(n, ".") || strings.HasPrefix(name, ".")) {
					add(n)
					matched++
				}
			}
			if !o.noAliases {
				for _, ix := range s.indices {
					for an := range ix.aliases {
						if globMatch(name, an) {
							add(ix.name)
							matched++
						}
					}
				}
			}
			if matched == 0 && !o.allowNoIndices {
				return nil, errIndexNotFound(name)
			}
			continue
		}
		if s.indices[name] != nil {
			add(name)
			continue
		}
		if al := s.aliasIndices(name); len(al) > 0 {
			if o.noAliases {
				if o.ignoreUnavailable {
					continue
				}
				return nil, errIllegalArgument("The provided expression [%s] matches an alias, specify the corresponding concrete indices instead.", name)
			}
			for _, n := range al {
				add(n)
			}
			continue
		}
		if o.ignoreUnavailable {
			continue
		}
		return nil, errIndexNotFound(name)
	}
	out := make([]string, 0, len(set))
	for _, n := range order {
		if set[n] {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	if len(out) == 0 && !o.allowNoIndices {
		if wildcardSeen || len(parts) > 0 {
			return nil, errIndexNotFound(expr)
		}
	}
	return out, nil
}

// globMatch matches simple * wildcards.
func globMatch(pattern, s string) bool {
	if !strings.Contains(pattern, "*") {
		return pattern == s
	}
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for i := 1; i < len(parts)-1; i++ {
		j := strings.Index(s, parts[i])
		if j < 0 {
			return false
		}
		s = s[j+len(parts[i]):]
	}
	return strings.HasSuffix(s, parts[len(parts)-1])
}

// writeTarget resolves the index a document write goes to. When the name
// is missing and autoCreate is set, the caller creates it.
func (s *Server) writeTarget(name string) (*index, *esError) {
	if ix := s.indices[name]; ix != nil {
		return ix, nil
	}
	al := s.aliasIndices(name)
	if len(al) == 0 {
		return nil, nil
	}
	var single *index
	for _, n := range al {
		ix := s.indices[n]
		m := ix.aliases[name]
		if m.isWriteIndex != nil && *m.isWriteIndex {
			return ix, nil
		}
	}
	if len(al) == 1 {
		ix := s.indices[al[0]]
		m := ix.aliases[name]
		if m.isWriteIndex == nil {
			single = ix
		}
	}
	if single != nil {
		return single, nil
	}
	return nil, errIllegalArgument("no write index is defined for alias [%s]. The write index may be explicitly disabled using is_write_index=false or the alias points to multiple indices without one being designated as a write index", name)
}

// writeIndexFor resolves or auto-creates the target index of a write.
func (s *Server) writeIndexFor(name string, autoCreate bool) (*index, *esError) {
	resolved, derr := resolveDateMathName(name, s.now())
	if derr != nil {
		return nil, errInvalidIndexName(name, derr.Error())
	}
	ix, err := s.writeTarget(resolved)
	if err != nil || ix != nil {
		return ix, err
	}
	if !autoCreate {
		return nil, errIndexNotFound(resolved)
	}
	if err := validateIndexName(resolved); err != nil {
		return nil, err
	}
	flat := map[string]any{}
	st, _ := buildSettings(flat)
	ix = s.newIndex(resolved, flat, st, nil)
	s.indices[resolved] = ix
	s.journalMeta(ix)
	return ix, nil
}

// --- handlers ----------------------------------------------------------------

func (s *Server) handleCreateIndex(rq *request, name string) response {
	body, err := decodeOwnedObject(rq.body)
	if err != nil {
		return errResp(err)
	}
	s.mu.Lock()
	ix, err := s.createIndexLocked(name, body)
	s.mu.Unlock()
	if err != nil {
		return errResp(err)
	}
	return ok(newOrderedMap().Set("acknowledged", true).Set("shards_acknowledged", true).Set("index", ix.name))
}

func (s *Server) handleDeleteIndex(rq *request, expr string) response {
	o, err := s.resolveOptsFrom(rq, resolveOpts{allowNoIndices: true, noAliases: true})
	if err != nil {
		return errResp(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names, err := s.resolveIndices(expr, o)
	if err != nil {
		if err.Type == "illegal_argument_exception" {
			err.Status = http.StatusBadRequest
		}
		return errResp(err)
	}
	for _, n := range names {
		delete(s.indices, n)
		s.journalDrop(n)
	}
	return ok(newOrderedMap().Set("acknowledged", true))
}

func (s *Server) handleIndexExists(rq *request, expr string) response {
	if rq.has("local") {
		rq.warns = append(rq.warns, "the [?local] query parameter to this API has no effect, is now deprecated, and will be removed in a future version")
	}
	o, err := s.resolveOptsFrom(rq, resolveOpts{allowNoIndices: false})
	if err != nil {
		return errResp(err)
	}
	s.mu.RLock()
	_, err = s.resolveIndices(expr, o)
	s.mu.RUnlock()
	if err != nil {
		return response{http.StatusNotFound, nil}
	}
	return response{http.StatusOK, nil}
}

func (s *Server) handleGetIndex(rq *request, expr string) response {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names, err := s.indicesOf(rq, expr)
	if err != nil {
		return errResp(err)
	}
	out := map[string]any{}
	for _, n := range names {
		ix := s.indices[n]
		aliases := map[string]any{}
		for an, m := range ix.aliases {
			aliases[an] = m.render()
		}
		out[n] = map[string]any{
			"aliases":  aliases,
			"mappings": ix.mapping.render(),
			"settings": ix.renderSettings(false),
		}
	}
	return ok(out)
}

func (s *Server) handleGetMapping(rq *request, expr string) response {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names, err := s.indicesOf(rq, expr)
	if err != nil {
		return errResp(err)
	}
	out := map[string]any{}
	for _, n := range names {
		out[n] = map[string]any{"mappings": s.indices[n].mapping.render()}
	}
	return ok(out)
}

func (s *Server) handlePutMapping(rq *request, expr string) response {
	body, err := decodeOwnedObject(rq.body)
	if err != nil {
		return errResp(err)
	}
	if body == nil {
		return errResp(errValidation("mapping source is missing"))
	}
	upd, err := parseMappings(body)
	if err != nil {
		return errResp(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names, err := s.resolveIndices(expr, resolveOpts{})
	if err != nil {
		return errResp(err)
	}
	// Validate against every index before applying to any.
	for _, n := range names {
		if err := mergeRoot(cloneMapping(s.indices[n].mapping), cloneMapping(upd)); err != nil {
			return errResp(err)
		}
	}
	for _, n := range names {
		_ = mergeRoot(s.indices[n].mapping, cloneMapping(upd))
		s.journalMeta(s.indices[n])
	}
	return ok(newOrderedMap().Set("acknowledged", true))
}

func (s *Server) handleGetSettings(rq *request, expr string) response {
	o, err := s.resolveOptsFrom(rq, resolveOpts{allowNoIndices: true})
	if err != nil {
		return errResp(err)
	}
	flatOut, err := rq.boolParam("flat_settings", false)
	if err != nil {
		return errResp(err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	names, err := s.resolveIndices(expr, o)
	if err != nil {
		return errResp(err)
	}
	out := map[string]any{}
	for _, n := range names {
		out[n] = map[string]any{"settings": s.indices[n].renderSettings(flatOut)}
	}
	return ok(out)
}

func (s *Server) handlePutSettings(rq *request, expr string) response {
	body, err := decodeOwnedObject(rq.body)
	if err != nil {
		return errResp(err)
	}
	if sb, ok := body["settings"]; ok {
		m, _ := sb.(map[string]any)
		body = m
	}
	flat, err := parseIndexSettings(body)
	if err != nil {
		return errResp(err)
	}
	if len(flat) == 0 {
		return errResp(errValidation("no settings to update"))
	}
	for k := range flat {
		if k == "index.number_of_shards" {
			return errResp(errIllegalArgument("final %s setting [%s], not updateable", expr, k))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names, err := s.resolveIndices(expr, resolveOpts{})
	if err != nil {
		return errResp(err)
	}
	newSettings := map[string]indexSettings{}
	for _, n := range names {
		ix := s.indices[n]
		merged := map[string]any{}
		for k, v := range ix.settings.flat {
			merged[k] = v
		}
		for k, v := range flat {
			if v == nil {
				delete(merged, k)
			} else {
				merged[k] = v
			}
		}
		merged["index.number_of_shards"] = strconv.Itoa(ix.settings.shards)
		st, err := buildSettings(merged)
		if err != nil {
			return errResp(err)
		}
		newSettings[n] = st
	}
	for _, n := range names {
		ix := s.indices[n]
		wasAuto := ix.settings.autoRefresh
		ix.settings = newSettings[n]
		if ix.settings.autoRefresh && !wasAuto {
			ix.refresh()
		}
		s.journalMeta(ix)
	}
	return ok(newOrderedMap().Set("acknowledged", true))
}

func (s *Server) handleRefresh(rq *request, expr string) response {
	s.mu.Lock()
	defer s.mu.Unlock()
	names, err := s.indicesOf(rq, expr)
	if err != nil {
		return errResp(err)
	}
	total, okc := 0, 0
	for _, n := range names {
		ix := s.indices[n]
		ix.refresh()
		total += ix.settings.shards * (1 + ix.settings.replicas)
		okc += ix.settings.shards
	}
	return ok(newOrderedMap().Set("_shards", newOrderedMap().Set("total", total).Set("successful", okc).Set("failed", 0)))
}

func (s *Server) handleStats(rq *request, expr string) response {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names, err := s.resolveIndices(expr, resolveOpts{allowNoIndices: true})
	if err != nil {
		return errResp(err)
	}
	indices := map[string]any{}
	var all indexStats
	var allDocs int
	for _, n := range names {
		ix := s.indices[n]
		docs := 0
		for _, d := range ix.visible {
			if !d.deleted {
				docs++
			}
		}
		allDocs += docs
		st := &ix.stats
		all.indexTotal += st.indexTotal
		all.deleteTotal += st.deleteTotal
		all.noopUpdateTotal += st.noopUpdateTotal
		all.queryTotal.Add(st.queryTotal.Load())
		all.getTotal.Add(st.getTotal.Load())
		all.refreshTotal += st.refreshTotal
		sec := statsSection(st, docs)
		indices[n] = map[string]any{"uuid": ix.uuid, "health": "green", "status": "open", "primaries": sec, "total": sec}
	}
	sec := statsSection(&all, allDocs)
	return ok(map[string]any{
		"_shards": map[string]any{"total": len(names), "successful": len(names), "failed": 0},
		"_all":    map[string]any{"primaries": sec, "total": sec},
		"indices": indices,
	})
}

func statsSection(st *indexStats, docs int) map[string]any {
	return map[string]any{
		"docs": map[string]any{"count": docs, "deleted": 0},
		"indexing": map[string]any{
			"index_total": st.indexTotal, "index_current": 0, "index_failed": 0,
			"delete_total": st.deleteTotal, "delete_current": 0, "noop_update_total": st.noopUpdateTotal,
		},
		"get":     map[string]any{"total": st.getTotal.Load()},
		"search":  map[string]any{"query_total": st.queryTotal.Load()},
		"refresh": map[string]any{"total": st.refreshTotal},
	}
}

// --- refresh ------------------------------------------------------------------

// publish records a new document version as live, and as visible to search
// when the index refreshes automatically.
func (ix *index) publish(e *docEntry) {
	ix.docs[e.id] = e
	if ix.settings.autoRefresh {
		ix.makeVisible(e)
		return
	}
	ix.pending[e.id] = ix.shardOf(e.id)
}

func (ix *index) makeVisible(e *docEntry) {
	if e.deleted {
		delete(ix.visible, e.id)
		return
	}
	ix.visible[e.id] = e
}

func (ix *index) refresh() {
	ix.stats.refreshTotal++
	for id := range ix.pending {
		if e := ix.docs[id]; e != nil {
			ix.makeVisible(e)
		}
	}
	clear(ix.pending)
}

// refreshShard makes the pending changes of one shard visible, like a
// refresh=true write does in Elasticsearch.
func (ix *index) refreshShard(shard int) {
	if ix.settings.shards <= 1 {
		ix.refresh()
		return
	}
	ix.stats.refreshTotal++
	for id, sh := range ix.pending {
		if sh != shard {
			continue
		}
		if e := ix.docs[id]; e != nil {
			ix.makeVisible(e)
		}
		delete(ix.pending, id)
	}
}

// shardOf routes a document id to a shard with Elasticsearch's algorithm
// (murmur3 of the UTF-16 id, modulo the routing shards).
func (ix *index) shardOf(id string) int {
	n := ix.settings.shards
	if n <= 1 {
		return 0
	}
	rs := ix.settings.routingShards
	b := make([]byte, 0, len(id)*2)
	for _, c := range utf16.Encode([]rune(id)) {
		b = append(b, byte(c), byte(c>>8))
	}
	h := int64(int32(murmur3x86(b, 0)))
	mod := h % int64(rs)
	if mod < 0 {
		mod += int64(rs)
	}
	return int(mod) / (rs / n)
}

func murmur3x86(data []byte, seed uint32) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	h := seed
	n := len(data) / 4
	for i := 0; i < n; i++ {
		k := uint32(data[i*4]) | uint32(data[i*4+1])<<8 | uint32(data[i*4+2])<<16 | uint32(data[i*4+3])<<24
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	tail := data[n*4:]
	var k uint32
	switch len(tail) {
	case 3:
		k ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		k ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		k ^= uint32(tail[0])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(len(data))
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}
