package esserver_test

// A runner for Elasticsearch's REST YAML conformance tests
// (rest-api-spec/src/yamlRestTest/.../test/**/*.yml), executed against the
// in-memory server (or a real cluster when SLUICE_TEST_ES_URL is set).
//
// The test data lives outside the repository, in ../shared/es-rest-spec
// beside the repository root (override with SLUICE_ES_REST_SPEC_DIR). A
// missing directory fails the test.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/esserver"
)

// yamlSkipList is the one explicit list of upstream test sections the
// server does not support. Key: "<dir>/<file>/<test name>".
var yamlSkipList = map[string]string{
	"get/20_stored_fields.yml/Stored fields":                                                   "7.x-era file: asserts `_type: _doc`, which 8.x no longer returns",
	"mget/10_basic.yml/Basic multi-get":                                                        "7.x-era file: asserts `docs.N._type`, which 8.x no longer returns",
	"mget/13_missing_metadata.yml/Missing metadata":                                            "7.x-era file: asserts `docs.0._type: _doc`, which 8.x no longer returns",
	"search/20_default_values.yml/Basic search":                                                "7.x-era file: asserts `hits.hits.0._type: _doc`, which 8.x no longer returns",
	"indices.get_alias/10_basic.yml/Get alias against closed indices":                          "closing/opening indices (indices.close) is not supported",
	"search/330_distributed_sort.yml/test distributed sort can rewrite query to match no docs": "uses aggregations (terms on _index), which are not supported",
	"search/380_sort_segments_on_timestamp.yml/Test that index segments are sorted on timestamp field if @timestamp field is defined in mapping":      "depends on Lucene segment sorting by @timestamp",
	"search/380_sort_segments_on_timestamp.yml/Test that index segments are NOT sorted on timestamp field when @timestamp field is dynamically added": "depends on Lucene segment order and indices.close/open",
	"search/380_sort_segments_on_timestamp.yml/Test if segments are missing @timestamp field we don't get errors":                                     "depends on Lucene segment sorting by @timestamp",
}

// claimedClusterFeatures are the named cluster features the server
// implements. Synthetic gte_vX.Y.Z features are derived from the version.
var claimedClusterFeatures = map[string]bool{
	"bulk_pipeline_validate": true,
	"index.throw_exception_on_index_creation_if_unsupported_value_type_in_alias": true,
	"index.throw_exception_for_unknown_token_in_rest_index_put_alias_action":     true,
	"mapper.unknown_field_mapping_update_error_message":                          true,
	"indices_alias_date_math":                        true,
	"search.sort.int_sort_for_int_short_byte_fields": true,
	"search.sort.date_format_missing_as_null":        true,
}

// claimedRunnerFeatures are the test runner features this runner supports.
var claimedRunnerFeatures = map[string]bool{
	"headers": true, "warnings": true, "warnings_regex": true, "allowed_warnings": true,
	"allowed_warnings_regex": true, "contains": true, "stash_in_key": true, "stash_in_path": true,
	"embedded_stash_key": true, "arbitrary_key": true, "default_shards": true, "close_to": true,
}

const serverVersion = "8.15.0"

// builtinSpecs covers APIs used by the tests whose JSON spec is not in the
// copied spec directory.
var builtinSpecs = map[string][]apiPath{
	"indices.get":          {{"/{index}", []string{"GET"}, []string{"index"}}},
	"indices.get_settings": {{"/_settings", []string{"GET"}, nil}, {"/{index}/_settings", []string{"GET"}, []string{"index"}}, {"/{index}/_settings/{name}", []string{"GET"}, []string{"index", "name"}}, {"/_settings/{name}", []string{"GET"}, []string{"name"}}},
	"indices.exists_alias": {{"/_alias/{name}", []string{"HEAD"}, []string{"name"}}, {"/{index}/_alias/{name}", []string{"HEAD"}, []string{"index", "name"}}},
	"indices.stats":        {{"/_stats", []string{"GET"}, nil}, {"/{index}/_stats", []string{"GET"}, []string{"index"}}},
	"indices.close":        {{"/{index}/_close", []string{"POST"}, []string{"index"}}},
	"indices.open":         {{"/{index}/_open", []string{"POST"}, []string{"index"}}},
	"indices.put_settings": {{"/_settings", []string{"PUT"}, nil}, {"/{index}/_settings", []string{"PUT"}, []string{"index"}}},
	"update":               {{"/{index}/_update/{id}", []string{"POST"}, []string{"index", "id"}}},
}

type apiPath struct {
	path    string
	methods []string
	parts   []string
}

type apiSpec struct {
	paths  []apiPath
	params map[string]bool
	bulk   bool
}

// specRoot locates the es-rest-spec directory.
func specRoot(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("SLUICE_ES_REST_SPEC_DIR"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	dir := wd
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/sluicehq/sluice\n")) {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("cannot find repository root (go.mod) above %s", wd)
		}
		dir = parent
	}
	return filepath.Join(filepath.Dir(dir), "shared", "es-rest-spec")
}

func loadSpecs(t *testing.T, dir string) map[string]*apiSpec {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no API specs in %s (err %v)", dir, err)
	}
	specs := map[string]*apiSpec{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("read %s: %v", f, err)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		for name, body := range raw {
			spec, err := parseSpec(body)
			if err != nil {
				t.Fatalf("spec %s in %s: %v", name, f, err)
			}
			specs[name] = spec
		}
	}
	for name, paths := range builtinSpecs {
		if _, ok := specs[name]; !ok {
			specs[name] = &apiSpec{paths: paths, params: map[string]bool{}}
		}
	}
	return specs
}

// parseSpec handles both the current layout (url.paths as objects, params
// at the top level) and the pre-7 layout (top-level methods, url.paths as
// strings, url.parts and url.params).
func parseSpec(body json.RawMessage) (*apiSpec, error) {
	var s struct {
		Methods []string `json:"methods"`
		URL     struct {
			Paths  []json.RawMessage          `json:"paths"`
			Parts  map[string]json.RawMessage `json:"parts"`
			Params map[string]json.RawMessage `json:"params"`
		} `json:"url"`
		Params map[string]json.RawMessage `json:"params"`
		Body   *struct {
			Serialize string `json:"serialize"`
		} `json:"body"`
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, err
	}
	spec := &apiSpec{params: map[string]bool{}}
	for k := range s.Params {
		spec.params[k] = true
	}
	for k := range s.URL.Params {
		spec.params[k] = true
	}
	if s.Body != nil && s.Body.Serialize == "bulk" {
		spec.bulk = true
	}
	for _, p := range s.URL.Paths {
		var str string
		if json.Unmarshal(p, &str) == nil {
			ap := apiPath{path: str, methods: s.Methods}
			for _, m := range regexp.MustCompile(`\{(\w+)\}`).FindAllStringSubmatch(str, -1) {
				ap.parts = append(ap.parts, m[1])
			}
			spec.paths = append(spec.paths, ap)
			continue
		}
		var obj struct {
			Path    string                     `json:"path"`
			Methods []string                   `json:"methods"`
			Parts   map[string]json.RawMessage `json:"parts"`
		}
		if err := json.Unmarshal(p, &obj); err != nil {
			return nil, err
		}
		ap := apiPath{path: obj.Path, methods: obj.Methods}
		for k := range obj.Parts {
			ap.parts = append(ap.parts, k)
		}
		spec.paths = append(spec.paths, ap)
	}
	return spec, nil
}

// --- YAML decoding ---------------------------------------------------------

func nodeValue(n *yaml.Node) any {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil
		}
		return nodeValue(n.Content[0])
	case yaml.AliasNode:
		return nodeValue(n.Alias)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			m[n.Content[i].Value] = nodeValue(n.Content[i+1])
		}
		return m
	case yaml.SequenceNode:
		a := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			a = append(a, nodeValue(c))
		}
		return a
	}
	switch n.ShortTag() {
	case "!!int":
		if i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err == nil {
			return json.Number(strconv.FormatInt(i, 10))
		}
		return json.Number(n.Value)
	case "!!float":
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil {
			return n.Value
		}
		return f
	case "!!bool":
		b, _ := strconv.ParseBool(strings.ToLower(n.Value))
		return b
	case "!!null":
		return nil
	}
	return n.Value
}

type yamlStep struct {
	kind string
	arg  any
}

type yamlSection struct {
	name  string
	steps []yamlStep
}

type yamlFile struct {
	rel      string
	setup    []yamlStep
	teardown []yamlStep
	tests    []yamlSection
}

func parseYAMLFile(path, rel string) (*yamlFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	yf := &yamlFile{rel: rel}
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if err == io.EOF {
				break
			}
			return nil, fmt.Errorf("parse %s: %w", rel, err)
		}
		if len(doc.Content) == 0 {
			continue
		}
		root := doc.Content[0]
		if root.Kind != yaml.MappingNode {
			continue
		}
		for i := 0; i+1 < len(root.Content); i += 2 {
			name := root.Content[i].Value
			stepsNode := root.Content[i+1]
			var steps []yamlStep
			for _, sn := range stepsNode.Content {
				v, ok := nodeValue(sn).(map[string]any)
				if !ok || len(v) != 1 {
					return nil, fmt.Errorf("%s/%s: malformed step", rel, name)
				}
				for k, a := range v {
					steps = append(steps, yamlStep{kind: k, arg: a})
				}
			}
			switch name {
			case "setup":
				yf.setup = steps
			case "teardown":
				yf.teardown = steps
			default:
				yf.tests = append(yf.tests, yamlSection{name: name, steps: steps})
			}
		}
	}
	return yf, nil
}

// --- gating ------------------------------------------------------------------

func parseVersion(s string) []int {
	s = strings.TrimSpace(s)
	var out []int
	for _, p := range strings.Split(s, ".") {
		n, err := strconv.Atoi(strings.TrimFunc(p, func(r rune) bool { return r < '0' || r > '9' }))
		if err != nil {
			n = 0
		}
		out = append(out, n)
	}
	for len(out) < 3 {
		out = append(out, 0)
	}
	return out
}

func cmpVersion(a, b []int) int {
	for i := 0; i < 3; i++ {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

func hasClusterFeature(f string) bool {
	if strings.HasPrefix(f, "gte_v") {
		return cmpVersion(parseVersion(serverVersion), parseVersion(strings.TrimPrefix(f, "gte_v"))) >= 0
	}
	return claimedClusterFeatures[f]
}

func asList(v any) []string {
	switch t := v.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, e := range t {
			out = append(out, fmt.Sprint(e))
		}
		return out
	}
	return nil
}

// versionInRanges evaluates legacy skip.version expressions.
func versionInRanges(expr string) bool {
	expr = strings.TrimSpace(expr)
	if expr == "all" {
		return true
	}
	cur := parseVersion(serverVersion)
	for _, r := range strings.Split(expr, ",") {
		parts := strings.SplitN(r, "-", 2)
		if len(parts) != 2 {
			continue
		}
		lo, hi := strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1])
		okLo := lo == "" || cmpVersion(cur, parseVersion(lo)) >= 0
		okHi := hi == "" || cmpVersion(cur, parseVersion(hi)) <= 0
		if okLo && okHi {
			return true
		}
	}
	return false
}

// gate returns a non-empty reason when requires/skip blocks exclude the test.
func gate(steps []yamlStep) string {
	for _, st := range steps {
		m, _ := st.arg.(map[string]any)
		switch st.kind {
		case "requires":
			for _, f := range asList(m["cluster_features"]) {
				if !hasClusterFeature(f) {
					return "requires cluster feature " + f
				}
			}
			for _, f := range asList(m["test_runner_features"]) {
				if !claimedRunnerFeatures[f] {
					return "requires test runner feature " + f
				}
			}
			if _, ok := m["capabilities"]; ok {
				return "requires capabilities checks (runner feature not claimed)"
			}
		case "skip":
			for _, f := range asList(m["cluster_features"]) {
				if hasClusterFeature(f) {
					return "skipped for cluster feature " + f
				}
			}
			if ki, ok := m["known_issues"].([]any); ok {
				for _, k := range ki {
					km, _ := k.(map[string]any)
					if hasClusterFeature(fmt.Sprint(km["cluster_feature"])) && !hasClusterFeature(fmt.Sprint(km["fixed_by"])) {
						return "known issue " + fmt.Sprint(km["cluster_feature"])
					}
				}
			}
			if af, ok := m["awaits_fix"]; ok {
				return "awaits fix: " + fmt.Sprint(af)
			}
			if v, ok := m["version"].(string); ok && versionInRanges(v) {
				return "skip version range [" + v + "]: " + fmt.Sprint(m["reason"])
			}
			for _, f := range asList(m["features"]) {
				if !claimedRunnerFeatures[f] {
					return "requires test runner feature " + f
				}
			}
		}
	}
	return ""
}

// --- runner --------------------------------------------------------------------

type yamlRunner struct {
	t      *testing.T
	base   string
	client *http.Client
	specs  map[string]*apiSpec

	stash  map[string]any
	resp   any
	body   string
	status int
}

var globalParams = map[string]bool{"error_trace": true, "filter_path": true, "human": true, "pretty": true, "source": true}

func (r *yamlRunner) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf(format, args...)
}

// resolveStash replaces $name / ${name} references.
var embeddedStash = regexp.MustCompile(`\$\{(\w+)\}`)

func (r *yamlRunner) stashValue(v any) any {
	switch t := v.(type) {
	case string:
		if strings.HasPrefix(t, "$") && !strings.HasPrefix(t, "${") {
			name := t[1:]
			if name == "body" {
				return r.resp
			}
			if val, ok := r.stash[name]; ok {
				return val
			}
			return t
		}
		if embeddedStash.MatchString(t) {
			if m := embeddedStash.FindStringSubmatch(t); m != nil && m[0] == t {
				if val, ok := r.stash[m[1]]; ok {
					return val
				}
			}
			return embeddedStash.ReplaceAllStringFunc(t, func(s string) string {
				name := s[2 : len(s)-1]
				if val, ok := r.stash[name]; ok {
					return scalarString(val)
				}
				return s
			})
		}
		return t
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			nk := k
			if sv, ok := r.stashValue(k).(string); ok {
				nk = sv
			} else {
				nk = scalarString(r.stashValue(k))
			}
			out[nk] = r.stashValue(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = r.stashValue(e)
		}
		return out
	}
	return v
}

func scalarString(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case bool:
		return strconv.FormatBool(t)
	case json.Number:
		return string(t)
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64)
	case nil:
		return ""
	case []any:
		parts := make([]string, len(t))
		for i, e := range t {
			parts[i] = scalarString(e)
		}
		return strings.Join(parts, ",")
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func splitPath(p string) []string {
	if p == "" {
		return nil
	}
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+1 < len(p) && p[i+1] == '.' {
			cur.WriteByte('.')
			i++
			continue
		}
		if p[i] == '.' {
			parts = append(parts, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteByte(p[i])
	}
	return append(parts, cur.String())
}

// lookup resolves a dotted path in the current response.
func (r *yamlRunner) lookup(path string) (any, bool) {
	if path == "$body" {
		return r.resp, true
	}
	cur := r.resp
	for _, tok := range splitPath(path) {
		if strings.HasPrefix(tok, "$") || strings.Contains(tok, "${") {
			tok = scalarString(r.stashValue(tok))
		}
		switch c := cur.(type) {
		case map[string]any:
			if tok == "_arbitrary_key_" {
				for k := range c {
					return k, true
				}
				return nil, false
			}
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func (r *yamlRunner) run(steps []yamlStep) {
	r.t.Helper()
	for _, st := range steps {
		switch st.kind {
		case "do":
			r.do(st.arg)
		case "set":
			for path, name := range st.arg.(map[string]any) {
				v, _ := r.lookup(path)
				r.stash[fmt.Sprint(name)] = v
			}
		case "match":
			for path, exp := range st.arg.(map[string]any) {
				r.assertMatch(path, r.stashValue(exp))
			}
		case "is_true", "is_false":
			path := scalarString(st.arg)
			v, ok := r.lookup(path)
			truthy := ok && v != nil
			if truthy {
				s := scalarString(v)
				if _, isMap := v.(map[string]any); !isMap {
					if _, isArr := v.([]any); !isArr {
						truthy = s != "" && s != "false" && s != "0"
					}
				}
			}
			if st.kind == "is_true" && !truthy {
				r.fatalf("is_true %q failed: value %s in %s", path, show(v), r.body)
			}
			if st.kind == "is_false" && truthy {
				r.fatalf("is_false %q failed: value %s in %s", path, show(v), r.body)
			}
		case "exists", "not_exists":
			path := scalarString(st.arg)
			if m, ok := st.arg.(map[string]any); ok {
				for k := range m {
					path = k
				}
			}
			v, ok := r.lookup(path)
			present := ok && v != nil
			if st.kind == "exists" && !present {
				r.fatalf("exists %q failed in %s", path, r.body)
			}
			if st.kind == "not_exists" && present {
				r.fatalf("not_exists %q failed: %s", path, show(v))
			}
		case "length":
			for path, exp := range st.arg.(map[string]any) {
				v, _ := r.lookup(path)
				n := -1
				switch t := v.(type) {
				case []any:
					n = len(t)
				case map[string]any:
					n = len(t)
				case string:
					n = len([]rune(t))
				}
				want, _ := strconv.Atoi(scalarString(r.stashValue(exp)))
				if n != want {
					r.fatalf("length %q: got %d want %d (%s)", path, n, want, show(v))
				}
			}
		case "lt", "gt", "lte", "gte":
			for path, exp := range st.arg.(map[string]any) {
				v, _ := r.lookup(path)
				a, ok1 := numVal(v)
				b, ok2 := numVal(r.stashValue(exp))
				if !ok1 || !ok2 {
					r.fatalf("%s %q: non numeric %s vs %v", st.kind, path, show(v), exp)
				}
				okc := map[string]bool{"lt": a < b, "gt": a > b, "lte": a <= b, "gte": a >= b}[st.kind]
				if !okc {
					r.fatalf("%s %q failed: %v vs %v", st.kind, path, a, b)
				}
			}
		case "close_to":
			for path, exp := range st.arg.(map[string]any) {
				em, _ := exp.(map[string]any)
				v, _ := r.lookup(path)
				a, _ := numVal(v)
				want, _ := numVal(em["value"])
				e, _ := numVal(em["error"])
				if math.Abs(a-want) > e {
					r.fatalf("close_to %q: %v not within %v of %v", path, a, e, want)
				}
			}
		case "contains":
			for path, exp := range st.arg.(map[string]any) {
				v, _ := r.lookup(path)
				exp = r.stashValue(exp)
				if !containsValue(v, exp) {
					r.fatalf("contains %q: %s does not contain %s", path, show(v), show(exp))
				}
			}
		case "requires", "skip":
		default:
			r.fatalf("unsupported step %q", st.kind)
		}
	}
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func numVal(v any) (float64, bool) {
	switch t := v.(type) {
	case json.Number:
		f, err := t.Float64()
		return f, err == nil
	case float64:
		return t, true
	case int:
		return float64(t), true
	case string:
		f, err := strconv.ParseFloat(t, 64)
		return f, err == nil
	}
	return 0, false
}

func containsValue(actual, exp any) bool {
	switch a := actual.(type) {
	case string:
		s, ok := exp.(string)
		return ok && strings.Contains(a, s)
	case []any:
		for _, e := range a {
			if em, ok := exp.(map[string]any); ok {
				am, ok := e.(map[string]any)
				if !ok {
					continue
				}
				all := true
				for k, v := range em {
					if !valuesEqual(am[k], v) {
						all = false
						break
					}
				}
				if all {
					return true
				}
				continue
			}
			if valuesEqual(e, exp) {
				return true
			}
		}
	}
	return false
}

// valuesEqual compares decoded values; numbers compare numerically and
// integers exactly.
func valuesEqual(a, b any) bool {
	an, aNum := asNumber(a)
	bn, bNum := asNumber(b)
	if aNum && bNum {
		ai, aok := new(big.Int).SetString(an, 10)
		bi, bok := new(big.Int).SetString(bn, 10)
		if aok && bok {
			return ai.Cmp(bi) == 0
		}
		af, _ := strconv.ParseFloat(an, 64)
		bf, _ := strconv.ParseFloat(bn, 64)
		return af == bf
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !valuesEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !valuesEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case nil:
		return b == nil
	}
	return a == b
}

func asNumber(v any) (string, bool) {
	switch t := v.(type) {
	case json.Number:
		return string(t), true
	case float64:
		if t == math.Trunc(t) && math.Abs(t) < 1e15 {
			return strconv.FormatInt(int64(t), 10), true
		}
		return strconv.FormatFloat(t, 'g', -1, 64), true
	case int:
		return strconv.Itoa(t), true
	}
	return "", false
}

// extendedRegex converts a Java COMMENTS-mode regex to RE2 syntax.
func extendedRegex(s string) string {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			b.WriteByte(c)
			b.WriteByte(s[i+1])
			i++
		case c == '[':
			inClass = true
			b.WriteByte(c)
		case c == ']':
			inClass = false
			b.WriteByte(c)
		case !inClass && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
		case !inClass && c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func (r *yamlRunner) assertMatch(path string, exp any) {
	r.t.Helper()
	var actual any
	var ok bool
	if path == "$body" {
		actual, ok = r.resp, true
	} else {
		actual, ok = r.lookup(path)
	}
	if s, isStr := exp.(string); isStr {
		ts := strings.TrimSpace(s)
		if len(ts) > 2 && strings.HasPrefix(ts, "/") && strings.HasSuffix(ts, "/") {
			re, err := regexp.Compile(extendedRegex(ts[1 : len(ts)-1]))
			if err != nil {
				r.fatalf("match %q: bad regex %q: %v", path, ts, err)
			}
			subject := scalarString(actual)
			if path == "$body" {
				subject = r.body
			}
			if !re.MatchString(subject) {
				r.fatalf("match %q: %q does not match %s", path, subject, ts)
			}
			return
		}
	}
	if !ok {
		actual = nil
	}
	if !valuesEqual(actual, exp) {
		r.fatalf("match %q: got %s want %s\nbody: %s", path, show(actual), show(exp), truncate(r.body, 2000))
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

var catchStatus = map[string]int{"bad_request": 400, "unauthorized": 401, "forbidden": 403, "missing": 404, "request_timeout": 408, "conflict": 409, "unavailable": 503}

func (r *yamlRunner) do(arg any) {
	r.t.Helper()
	m, _ := arg.(map[string]any)
	var catch string
	headers := map[string]string{}
	var warnings, allowed, warnRe, allowedRe []string
	var api string
	var args map[string]any
	for k, v := range m {
		switch k {
		case "catch":
			catch = scalarString(v)
		case "headers":
			for hk, hv := range v.(map[string]any) {
				headers[hk] = scalarString(r.stashValue(hv))
			}
		case "warnings":
			warnings = asList(v)
		case "allowed_warnings":
			allowed = asList(v)
		case "warnings_regex":
			warnRe = asList(v)
		case "allowed_warnings_regex":
			allowedRe = asList(v)
		case "node_selector":
		default:
			api = k
			args, _ = v.(map[string]any)
		}
	}
	spec := r.specs[api]
	if spec == nil {
		r.fatalf("unknown API %q (no spec)", api)
	}
	args, _ = r.stashValue(args).(map[string]any)
	var body any
	hasBody := false
	ignore := map[int]bool{}
	parts := map[string]string{}
	query := url.Values{}
	partNames := map[string]bool{}
	for _, p := range spec.paths {
		for _, pn := range p.parts {
			partNames[pn] = true
		}
	}
	var unknown []string
	for k, v := range args {
		switch {
		case k == "body":
			body, hasBody = v, true
		case k == "ignore":
			for _, s := range asList(v) {
				n, _ := strconv.Atoi(s)
				ignore[n] = true
			}
			if n, ok := v.(json.Number); ok {
				i, _ := n.Int64()
				ignore[int(i)] = true
			}
		case partNames[k]:
			s := scalarString(v)
			if s != "" {
				parts[k] = s
			}
		default:
			if !spec.params[k] && !globalParams[k] {
				unknown = append(unknown, k)
			}
			query.Set(k, scalarString(v))
		}
	}
	if catch == "param" {
		if len(unknown) == 0 {
			r.fatalf("expected a client-side param error for %s", api)
		}
		return
	}
	// Pick the path with the most parts, all provided.
	var chosen *apiPath
	for i := range spec.paths {
		p := &spec.paths[i]
		okp := true
		for _, pn := range p.parts {
			if _, ok := parts[pn]; !ok {
				okp = false
			}
		}
		if okp && (chosen == nil || len(p.parts) > len(chosen.parts)) {
			chosen = p
		}
	}
	if chosen == nil {
		r.fatalf("no path of %s matches parts %v", api, parts)
	}
	path := chosen.path
	for pn, pv := range parts {
		segs := strings.Split(pv, ",")
		for i, s := range segs {
			segs[i] = url.PathEscape(s)
		}
		path = strings.ReplaceAll(path, "{"+pn+"}", strings.Join(segs, ","))
	}
	method := chosen.methods[0]
	if hasBody {
		for _, pref := range []string{"PUT", "POST"} {
			found := false
			for _, m := range chosen.methods {
				if m == pref {
					method, found = m, true
				}
			}
			if found {
				break
			}
		}
	}
	var reqBody []byte
	contentType := "application/json"
	if hasBody {
		switch b := body.(type) {
		case string:
			reqBody = []byte(b)
		case []any:
			var buf bytes.Buffer
			for _, line := range b {
				if s, ok := line.(string); ok {
					buf.WriteString(s)
				} else {
					lb, _ := json.Marshal(line)
					buf.Write(lb)
				}
				buf.WriteByte('\n')
			}
			reqBody = buf.Bytes()
		default:
			reqBody, _ = json.Marshal(b)
		}
		if spec.bulk {
			contentType = "application/x-ndjson"
		}
	}
	u := r.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequest(method, u, bytes.NewReader(reqBody))
	if err != nil {
		r.fatalf("build request: %v", err)
	}
	if hasBody {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := r.client.Do(req)
	if err != nil {
		r.fatalf("%s %s: %v", method, u, err)
	}
	data, _ := io.ReadAll(res.Body)
	res.Body.Close()
	r.status = res.StatusCode
	r.body = string(data)
	if res.Header.Get("X-Elastic-Product") != "Elasticsearch" {
		r.fatalf("%s %s: missing X-Elastic-Product header", method, u)
	}
	isError := res.StatusCode >= 400 && !ignore[res.StatusCode]
	if method == "HEAD" {
		r.resp = res.StatusCode >= 200 && res.StatusCode < 300
		if res.StatusCode == 404 && catch == "" {
			isError = false
		}
	} else if len(data) > 0 {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			r.resp = string(data)
		} else {
			r.resp = normalise(v)
		}
	} else {
		r.resp = nil
	}
	r.stash["body"] = r.resp

	// Warnings.
	var got []string
	for _, w := range res.Header.Values("Warning") {
		if i := strings.IndexByte(w, '"'); i >= 0 {
			if j := strings.LastIndexByte(w, '"'); j > i {
				w = w[i+1 : j]
			}
		}
		got = append(got, w)
	}
	for _, w := range warnings {
		if !contains(got, w) {
			r.fatalf("expected warning %q, got %q", w, got)
		}
	}
	for _, g := range got {
		okw := contains(warnings, g) || contains(allowed, g)
		for _, re := range append(append([]string{}, warnRe...), allowedRe...) {
			if regexp.MustCompile(re).MatchString(g) {
				okw = true
			}
		}
		if !okw {
			r.fatalf("unexpected warning %q", g)
		}
	}

	if catch != "" {
		if !isError {
			r.fatalf("%s %s: expected error %q, got %d %s", method, u, catch, res.StatusCode, truncate(r.body, 1000))
		}
		if want, ok := catchStatus[catch]; ok {
			if res.StatusCode != want {
				r.fatalf("%s %s: expected %s (%d), got %d %s", method, u, catch, want, res.StatusCode, truncate(r.body, 1000))
			}
		} else if catch == "request" {
			if res.StatusCode < 400 {
				r.fatalf("expected request error, got %d", res.StatusCode)
			}
		} else if strings.HasPrefix(catch, "/") && strings.HasSuffix(catch, "/") {
			re, err := regexp.Compile(catch[1 : len(catch)-1])
			if err != nil {
				r.fatalf("bad catch regex %q: %v", catch, err)
			}
			if !re.MatchString(r.body) {
				r.fatalf("%s %s: error body does not match %s: %s", method, u, catch, truncate(r.body, 1000))
			}
		} else {
			r.fatalf("unsupported catch %q", catch)
		}
		return
	}
	if isError {
		r.fatalf("%s %s (%s): unexpected error %d: %s", method, u, truncate(string(reqBody), 500), res.StatusCode, truncate(r.body, 2000))
	}
}

func normalise(v any) any { return v }

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// cleanup deletes every index, like the upstream runner does between tests.
func (r *yamlRunner) cleanup() error {
	res, err := r.client.Get(r.base + "/*?expand_wildcards=open,closed")
	if err != nil {
		return fmt.Errorf("list indices: %w", err)
	}
	data, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("list indices: %w (%s)", err, data)
	}
	if len(m) == 0 {
		return nil
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, url.PathEscape(n))
	}
	sort.Strings(names)
	req, _ := http.NewRequest(http.MethodDelete, r.base+"/"+strings.Join(names, ","), nil)
	res, err = r.client.Do(req)
	if err != nil {
		return fmt.Errorf("delete indices: %w", err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		return fmt.Errorf("delete indices: status %d", res.StatusCode)
	}
	return nil
}

type yamlResult struct {
	name, status, reason string
}

func TestESRestSpecYAML(t *testing.T) {
	root := specRoot(t)
	testDir := filepath.Join(root, "rest-api-spec", "src", "yamlRestTest", "resources", "rest-api-spec", "test")
	apiDir := filepath.Join(root, "rest-api-spec", "src", "main", "resources", "rest-api-spec", "api")
	if _, err := os.Stat(testDir); err != nil {
		t.Fatalf("es-rest-spec test directory missing (%v); set SLUICE_ES_REST_SPEC_DIR or place it at %s", err, root)
	}
	specs := loadSpecs(t, apiDir)
	var files []string
	err := filepath.WalkDir(testDir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".yml") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("no YAML tests under %s (err %v)", testDir, err)
	}
	sort.Strings(files)

	base := os.Getenv("SLUICE_TEST_ES_URL")
	client := &http.Client{}
	if base == "" {
		srv := httptest.NewServer(esserver.New())
		defer srv.Close()
		base = srv.URL
		client = srv.Client()
	}
	base = strings.TrimRight(base, "/")

	var mu sync.Mutex
	var results []yamlResult
	record := func(name, status, reason string) {
		mu.Lock()
		results = append(results, yamlResult{name, status, reason})
		mu.Unlock()
	}
	seen := map[string]bool{}
	for _, f := range files {
		rel, _ := filepath.Rel(testDir, f)
		rel = filepath.ToSlash(rel)
		yf, err := parseYAMLFile(f, rel)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		for _, sec := range yf.tests {
			sec := sec
			key := rel + "/" + sec.name
			seen[key] = true
			t.Run(key, func(t *testing.T) {
				if reason, ok := yamlSkipList[key]; ok {
					record(key, "skip-list", reason)
					t.Skip(reason) // pinned: testdata/es-rest-spec-expected.txt; listed in internal/testskip/allowlist.txt
				}
				steps := append(append(append([]yamlStep{}, yf.setup...), yf.teardown...), sec.steps...)
				if reason := gate(steps); reason != "" {
					record(key, "gated", reason)
					t.Skip(reason) // pinned: testdata/es-rest-spec-expected.txt; listed in internal/testskip/allowlist.txt
				}
				r := &yamlRunner{t: t, base: base, client: client, specs: specs, stash: map[string]any{}}
				defer func() {
					if err := r.cleanup(); err != nil {
						t.Errorf("cleanup: %v", err)
					}
				}()
				passed := false
				defer func() {
					if passed {
						record(key, "pass", "")
					} else {
						record(key, "fail", "")
					}
				}()
				r.run(yf.setup)
				r.stash = map[string]any{}
				r.resp = nil
				r.run(sec.steps)
				r.run(yf.teardown)
				passed = true
			})
		}
	}
	for k := range yamlSkipList {
		if !seen[k] {
			t.Errorf("skip list entry %q matches no test", k)
		}
	}
	var pass, fail, gated, listed int
	var skipped []yamlResult
	for _, r := range results {
		switch r.status {
		case "pass":
			pass++
		case "fail":
			fail++
		case "gated":
			gated++
			skipped = append(skipped, r)
		case "skip-list":
			listed++
			skipped = append(skipped, r)
		}
	}
	sort.Slice(skipped, func(i, j int) bool { return skipped[i].name < skipped[j].name })
	fmt.Printf("es-rest-spec: %d test cases, %d passed, %d skipped (%d skip list, %d gated by requires/skip), %d failed\n",
		len(results), pass, gated+listed, listed, gated, fail)
	for _, r := range skipped {
		fmt.Printf("  skipped [%s] %s: %s\n", r.status, r.name, r.reason)
	}

	// The totals and the skipped set are pinned: the spec folder comes from
	// outside the repository, so a folder with one YAML file, or a change
	// that turns passing cases into skips, must fail rather than print
	// smaller numbers.
	got := []string{
		fmt.Sprintf("yaml-files %d", len(files)),
		fmt.Sprintf("api-files %d", len(specs)),
		fmt.Sprintf("cases %d", len(results)),
		fmt.Sprintf("passed %d", pass),
		fmt.Sprintf("skipped %d", gated+listed),
		fmt.Sprintf("failed %d", fail),
	}
	for _, r := range skipped {
		got = append(got, fmt.Sprintf("skip %s %s", r.status, r.name))
	}
	checkPinned(t, "testdata/es-rest-spec-expected.txt", got)
}

// checkPinned compares got, line by line, with the committed file's lines
// that are neither blank nor '#' comments. SLUICE_UPDATE_PINNED=1 rewrites
// the file instead (review the diff before committing it).
func checkPinned(t *testing.T, path string, got []string) {
	t.Helper()
	const header = "# Pinned by TestESRestSpecYAML (esserver/yaml_test.go): the spec folder's\n" +
		"# file counts, the case totals and every skipped case. Regenerate with\n" +
		"# SLUICE_UPDATE_PINNED=1 go -C esserver test -run '^TestESRestSpecYAML$' .\n" +
		"# and explain the change in the commit.\n"
	if os.Getenv("SLUICE_UPDATE_PINNED") == "1" {
		if err := os.WriteFile(path, []byte(header+strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("pinned results: %v", err)
	}
	var want []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			want = append(want, l)
		}
	}
	inWant := map[string]bool{}
	for _, l := range want {
		inWant[l] = true
	}
	inGot := map[string]bool{}
	for _, l := range got {
		inGot[l] = true
		if !inWant[l] {
			t.Errorf("es-rest-spec: %q, not in %s", l, path)
		}
	}
	for _, l := range want {
		if !inGot[l] {
			t.Errorf("es-rest-spec: %s pins %q, not seen in this run", path, l)
		}
	}
}
