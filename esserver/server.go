package esserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultVersion is the Elasticsearch version the server reports.
const DefaultVersion = "8.15.0"

// Server is an in-memory Elasticsearch 8 compatible HTTP server. The zero
// value is not usable; create one with New.
type Server struct {
	mu      sync.RWMutex
	indices map[string]*index

	cfg      config
	idSeq    atomic.Uint64
	idPrefix string
	uuidSeq  atomic.Uint64
	faults   faultSet
	// store is the data directory of a server made by Open; nil keeps
	// everything in memory only.
	store *store
}

type config struct {
	clusterName  string
	nodeName     string
	version      string
	clusterUUID  string
	maxBodyBytes int64
	now          func() time.Time
}

// Option configures a Server.
type Option func(*config)

// WithClusterName sets the cluster name reported by GET / and health.
func WithClusterName(name string) Option { return func(c *config) { c.clusterName = name } }

// WithNodeName sets the node name reported by GET /.
func WithNodeName(name string) Option { return func(c *config) { c.nodeName = name } }

// WithVersion sets the Elasticsearch version number reported by GET /.
// It must be an 8.x version for go-elasticsearch v8 to accept the server.
func WithVersion(v string) Option { return func(c *config) { c.version = v } }

// WithClock sets the clock used for "now" in date math, took and index
// creation dates.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithMaxBodyBytes limits request bodies (default 100 MiB, like
// http.max_content_length). Larger bodies get a 413.
func WithMaxBodyBytes(n int64) Option { return func(c *config) { c.maxBodyBytes = n } }

// New returns an empty server.
func New(opts ...Option) *Server {
	cfg := config{
		clusterName:  "sluice",
		nodeName:     "sluice-esserver",
		version:      DefaultVersion,
		maxBodyBytes: 100 << 20,
		now:          time.Now,
	}
	for _, o := range opts {
		o(&cfg)
	}
	s := &Server{indices: map[string]*index{}, cfg: cfg}
	s.idPrefix = randomToken(6)
	if s.cfg.clusterUUID == "" {
		s.cfg.clusterUUID = randomUUIDLike()
	}
	return s
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func randomUUIDLike() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	out := make([]byte, 22)
	for i := range out {
		out[i] = alphabet[int(b[i%16]+byte(i*7))%64]
	}
	return string(out)
}

// Reset deletes all indices and aliases (on disk too, for a server made by
// Open).
func (s *Server) Reset() {
	s.mu.Lock()
	for n := range s.indices {
		s.journalDrop(n)
	}
	s.indices = map[string]*index{}
	s.mu.Unlock()
	if s.store != nil {
		_ = s.store.sync()
	}
}

// ListenAndServe serves the API on addr (for example ":9200") until ctx is
// cancelled, then shuts down gracefully.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("esserver: listen on %s: %w", addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves the API on ln until ctx is cancelled.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("esserver: serve: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			return fmt.Errorf("esserver: shutdown: %w", err)
		}
		return nil
	}
}

// request carries one HTTP request through the handlers.
type request struct {
	r      *http.Request
	method string
	q      url.Values
	body   []byte
	segs   []string
	start  time.Time
	fault  *Fault
	warns  []string
}

func (rq *request) param(name string) string { return rq.q.Get(name) }

func (rq *request) has(name string) bool { _, ok := rq.q[name]; return ok }

// boolParam parses a strict boolean query parameter; "" counts as true.
func (rq *request) boolParam(name string, def bool) (bool, *esError) {
	vals, ok := rq.q[name]
	if !ok {
		return def, nil
	}
	switch v := vals[0]; v {
	case "", "true":
		return true, nil
	case "false":
		return false, nil
	default:
		return false, errIllegalArgument("Failed to parse value [%s] as only [true] or [false] are allowed.", v)
	}
}

type response struct {
	status int
	body   any // marshalled as JSON; []byte written raw
}

func ok(body any) response { return response{http.StatusOK, body} }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Elastic-Product", "Elasticsearch")
	rq := &request{r: r, method: r.Method, start: time.Now()}
	defer func() {
		if p := recover(); p != nil {
			e := newErr(http.StatusInternalServerError, "exception", "esserver: internal error: %v", p)
			s.write(w, rq, response{e.Status, e.body()})
		}
	}()
	resp := s.serve(rq, w)
	if s.store != nil && r.Method != http.MethodGet && r.Method != http.MethodHead {
		// Acknowledge nothing that a restart would lose.
		resp = s.afterWrite(resp)
	}
	s.write(w, rq, resp)
}

func (s *Server) serve(rq *request, w http.ResponseWriter) response {
	r := rq.r
	q, err := parseQueryString(r.URL.RawQuery)
	if err != nil {
		return errResp(errIllegalArgument("failed to parse query string [%s]: %s", r.URL.RawQuery, err.Error()))
	}
	rq.q = q
	segs, perr := splitPath(r.URL.EscapedPath())
	if perr != nil {
		return errResp(errIllegalArgument("%s", perr.Error()))
	}
	rq.segs = segs
	for _, name := range []string{"timeout", "master_timeout"} {
		if v, ok := q[name]; ok {
			if e := checkTimeParam(name, v[0]); e != nil {
				return errResp(e)
			}
		}
	}

	if f := s.faults.match(r); f != nil {
		if f.Delay > 0 {
			t := time.NewTimer(f.Delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
			}
		}
		if f.Status != 0 {
			return faultResponse(f)
		}
		if f.BulkItemStatus != 0 || f.RejectBulkItems != nil {
			rq.fault = f
		}
	}

	if r.Body != nil {
		body, rerr := readBody(r, s.cfg.maxBodyBytes)
		if rerr != nil {
			return errResp(errIllegalArgument("failed to read request body: %s", rerr.Error()))
		}
		if int64(len(body)) > s.cfg.maxBodyBytes {
			return errResp(newErr(http.StatusRequestEntityTooLarge, "content_too_long_exception", "request body is too large: limit is [%d] bytes", s.cfg.maxBodyBytes))
		}
		rq.body = body
	}
	ct := r.Header.Values("Content-Type")
	if e := checkContentTypeHeader(ct); e != nil {
		return errResp(e)
	}
	if len(rq.body) > 0 {
		if resp, bad := checkContentType(ct); bad {
			return resp
		}
	} else if rq.has("source") {
		if e := checkSourceParam(rq); e != nil {
			return errResp(e)
		}
		rq.body = []byte(rq.param("source"))
	}
	return s.route(rq)
}

// checkTimeParam refuses a time parameter (timeout, master_timeout) that
// Elasticsearch's TimeValue parser refuses, with its parse_exception:
// every handler that takes one parses it before doing anything.
func checkTimeParam(name, v string) *esError {
	if v == "-1" || v == "0" {
		return nil
	}
	if _, err := parseTimeValue(strings.ToLower(strings.TrimSpace(v))); err != nil {
		if strings.HasPrefix(err.Error(), "unit missing") {
			return newErr(http.StatusBadRequest, "parse_exception", "failed to parse setting [%s] with value [%s] as a time value: unit is missing or unrecognized", name, v)
		}
		return newErr(http.StatusBadRequest, "parse_exception", "failed to parse [%s]", v)
	}
	return nil
}

// parseQueryString splits a query string the way Elasticsearch's
// RestUtils.decodeQueryString does: on '&' only. url.ParseQuery also
// refuses a ';', which Elasticsearch takes as a literal character (in
// q=a;b, or in an unescaped source_content_type=application/json;charset=UTF-8).
func parseQueryString(raw string) (url.Values, error) {
	q := url.Values{}
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, fmt.Errorf("parse %q: %w", k, err)
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			return nil, fmt.Errorf("parse %q: %w", v, err)
		}
		q[key] = append(q[key], val)
	}
	return q, nil
}

// checkSourceParam checks a body given as the source query parameter the
// way Elasticsearch 8's RestRequest.contentOrSourceParam does: it needs
// source_content_type too, and that type must be one a body's Content-Type
// may be (400 validation_exception otherwise, as since 8.15.2; 8.15.0 gave
// a 500 for the same mistake). A type this server cannot parse (YAML, CBOR,
// Smile) gets the 406 a body of that type gets.
func checkSourceParam(rq *request) *esError {
	typ, ok := rq.q["source_content_type"]
	if !ok {
		return errValidationException("source and source_content_type parameters are required")
	}
	ct := typ[0]
	mt, _, _ := strings.Cut(ct, ";")
	main, sub, found := strings.Cut(strings.TrimSpace(mt), "/")
	if !found || !isToken(main) || !isToken(sub) {
		return errIllegalArgument("invalid Content-Type header [%s]", ct)
	}
	switch mediaTypeKind(ct) {
	case mediaJSON:
		return nil
	case mediaXContent:
		return newErr(http.StatusNotAcceptable, "media_type_header_exception", "source_content_type [%s] is not supported by this test server (JSON only)", ct)
	}
	return errValidationException("Unknown value for source_content_type [" + ct + "]")
}

// Media type kinds, for a body's Content-Type and for source_content_type.
const (
	mediaOther    = iota // no XContent parser takes it
	mediaJSON            // JSON, which this server speaks
	mediaXContent        // YAML, CBOR, Smile: Elasticsearch parses them, this server does not
)

// mediaTypeKind classifies a Content-Type value; parameters (charset,
// compatible-with) are not checked.
func mediaTypeKind(ct string) int {
	mt, _, _ := strings.Cut(ct, ";")
	switch strings.ToLower(strings.TrimSpace(mt)) {
	case "application/json", "application/x-ndjson", "application/*", "application/vnd.elasticsearch+json", "application/vnd.elasticsearch+x-ndjson":
		return mediaJSON
	case "application/yaml", "application/cbor", "application/smile", "application/vnd.elasticsearch+yaml",
		"application/vnd.elasticsearch+cbor", "application/vnd.elasticsearch+smile":
		return mediaXContent
	}
	return mediaOther
}

// isToken reports whether s is an RFC 7230 token, as a media type's type
// and subtype must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// presizeMax bounds the buffer readBody allocates before the body arrives.
const presizeMax = 4 << 20

// readBody reads r's body, at most limit+1 bytes. A body of a known
// length within the limit is read into one buffer of its size (io.ReadAll
// would grow one by copies, several times the body per request); the size
// taken on the client's word is capped at presizeMax, so a request that
// announces a large body and sends little holds little memory.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	lr := io.LimitReader(r.Body, limit+1)
	if n := r.ContentLength; n > 0 && n <= limit {
		var buf bytes.Buffer
		buf.Grow(int(min(n, presizeMax)) + bytes.MinRead) // ReadFrom wants MinRead free
		_, err := buf.ReadFrom(lr)
		return buf.Bytes(), err
	}
	return io.ReadAll(lr)
}

// checkContentTypeHeader refuses, with or without a body, what
// Elasticsearch 8's RestRequest refuses while it reads the header (a 400
// before any handler): more than one Content-Type header, or an empty one.
func checkContentTypeHeader(values []string) *esError {
	switch {
	case len(values) > 1:
		return errIllegalArgument("Incorrect header [Content-Type]. Only one value should be provided")
	case len(values) == 1 && strings.TrimSpace(values[0]) == "":
		return errIllegalArgument("Header [Content-Type] cannot be empty.")
	}
	return nil
}

// checkContentType answers a request with a body as Elasticsearch 8's
// RestController does before any handler: a body needs a Content-Type
// header; the CORS-safelisted types a browser may send cross-site
// (text/plain, application/x-www-form-urlencoded, multipart/form-data) and
// types no XContent parser takes are refused with 406 and its simple error
// body. JSON is application/json, application/x-ndjson, the literal
// application/* and their application/vnd.elasticsearch+ forms; YAML, CBOR
// and Smile, which Elasticsearch parses and this server does not, get a
// 406 of their own. Parameters (charset, compatible-with) are not checked.
// values holds at most one header (checkContentTypeHeader refused more).
func checkContentType(values []string) (response, bool) {
	if len(values) == 0 {
		return simpleErrResp(http.StatusNotAcceptable, "Content-Type header is missing"), true
	}
	ct := values[0]
	switch mediaTypeKind(ct) {
	case mediaJSON:
		return response{}, false
	case mediaXContent:
		return errResp(newErr(http.StatusNotAcceptable, "media_type_header_exception", "Content-Type header [%s] is not supported by this test server (JSON only)", ct)), true
	}
	return simpleErrResp(http.StatusNotAcceptable, "Content-Type header ["+ct+"] is not supported"), true
}

// simpleErrResp is Elasticsearch's simple error response (RestResponse
// createSimpleErrorResponse): {"error":msg,"status":status}.
func simpleErrResp(status int, msg string) response {
	return response{status, newOrderedMap().Set("error", msg).Set("status", status)}
}

func splitPath(p string) ([]string, error) {
	raw := strings.Split(strings.Trim(p, "/"), "/")
	out := make([]string, 0, len(raw))
	for _, s := range raw {
		if s == "" {
			continue
		}
		u, err := url.PathUnescape(s)
		if err != nil {
			return nil, fmt.Errorf("invalid URL path segment [%s]", s)
		}
		out = append(out, u)
	}
	return out, nil
}

func errResp(e *esError) response { return response{e.Status, e.body()} }

func (s *Server) write(w http.ResponseWriter, rq *request, resp response) {
	h := w.Header()
	for _, wm := range rq.warns {
		h.Add("Warning", fmt.Sprintf("299 Elasticsearch-%s-sluice \"%s\"", s.cfg.version, wm))
	}
	accept := rq.r.Header.Get("Accept")
	if strings.Contains(accept, "vnd.elasticsearch+json") {
		h.Set("Content-Type", "application/vnd.elasticsearch+json;compatible-with=8")
	} else {
		h.Set("Content-Type", "application/json")
	}
	var data []byte
	switch b := resp.body.(type) {
	case nil:
	case []byte:
		data = b
	case rawSource:
		data = []byte(b)
	default:
		var err error
		data, err = marshalJSON(b)
		if err != nil {
			resp.status = http.StatusInternalServerError
			data, _ = marshalJSON(newErr(500, "exception", "esserver: marshal response: %s", err.Error()).body())
		}
	}
	if rq.q != nil {
		if fp := rq.q.Get("filter_path"); fp != "" && data != nil {
			data = applyFilterPath(data, fp)
		}
		// pretty is a boolean: ?pretty and ?pretty=true indent, ?pretty=false does not.
		if v, pretty := rq.q["pretty"]; pretty && (v[0] == "" || v[0] == "true") && data != nil {
			var buf bytes.Buffer
			if json.Indent(&buf, data, "", "  ") == nil {
				buf.WriteByte('\n')
				data = buf.Bytes()
			}
		}
	}
	h.Set("Content-Length", fmt.Sprint(len(data)))
	w.WriteHeader(resp.status)
	if rq.method != http.MethodHead {
		_, _ = w.Write(data)
	}
}

// applyFilterPath implements the filter_path response filter (simple
// dotted paths with * and ** wildcards, - for exclusion).
func applyFilterPath(data []byte, fp string) []byte {
	v, err := decodeJSON(data)
	if err != nil {
		return data
	}
	var incl, excl [][]string
	for _, p := range splitComma(fp) {
		if strings.HasPrefix(p, "-") {
			excl = append(excl, strings.Split(p[1:], "."))
		} else {
			incl = append(incl, strings.Split(p, "."))
		}
	}
	if len(incl) > 0 {
		v = filterPathInclude(v, incl)
		if v == nil {
			v = map[string]any{}
		}
	}
	for _, e := range excl {
		v = filterPathExclude(v, e)
	}
	out, err := marshalJSON(v)
	if err != nil {
		return data
	}
	return out
}

func filterPathInclude(v any, paths [][]string) any {
	switch t := v.(type) {
	case []any:
		var out []any
		for _, e := range t {
			if r := filterPathInclude(e, paths); r != nil {
				out = append(out, r)
			}
		}
		if out == nil {
			return nil
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, val := range t {
			var sub [][]string
			whole := false
			for _, p := range paths {
				if len(p) == 0 {
					continue
				}
				if p[0] == "**" {
					sub = append(sub, p, p[1:])
					if len(p) == 1 {
						whole = true
					}
					continue
				}
				if globMatch(p[0], k) {
					if len(p) == 1 {
						whole = true
					} else {
						sub = append(sub, p[1:])
					}
				}
			}
			if whole {
				out[k] = val
			} else if len(sub) > 0 {
				if r := filterPathInclude(val, sub); r != nil {
					out[k] = r
				}
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	return nil
}

func filterPathExclude(v any, p []string) any {
	switch t := v.(type) {
	case []any:
		for i, e := range t {
			t[i] = filterPathExclude(e, p)
		}
	case map[string]any:
		for k, val := range t {
			if globMatch(p[0], k) {
				if len(p) == 1 {
					delete(t, k)
				} else {
					t[k] = filterPathExclude(val, p[1:])
				}
			}
		}
	}
	return v
}

// route dispatches on method and path.
func (s *Server) route(rq *request) response {
	segs := rq.segs
	m := rq.method
	if len(segs) == 0 {
		switch m {
		case http.MethodGet, http.MethodHead:
			return s.handleInfo(rq)
		}
		return methodNotAllowed(rq, "GET", "HEAD")
	}
	first := segs[0]
	if strings.HasPrefix(first, "_") && first != "_all" && !(len(segs) == 1 && !isSystemEndpoint(first)) {
		return s.routeSystem(rq)
	}
	// /{index}...
	target := first
	if len(segs) == 1 {
		switch m {
		case http.MethodPut:
			return s.handleCreateIndex(rq, target)
		case http.MethodDelete:
			return s.handleDeleteIndex(rq, target)
		case http.MethodHead:
			return s.handleIndexExists(rq, target)
		case http.MethodGet:
			return s.handleGetIndex(rq, target)
		}
		return methodNotAllowed(rq, "GET", "HEAD", "PUT", "DELETE")
	}
	ep := segs[1]
	switch {
	case ep == "_doc" && len(segs) == 2:
		if m == http.MethodPost {
			return s.handleIndexDoc(rq, target, "", false)
		}
		return methodNotAllowed(rq, "POST")
	case ep == "_doc" && len(segs) == 3:
		switch m {
		case http.MethodPut, http.MethodPost:
			return s.handleIndexDoc(rq, target, segs[2], false)
		case http.MethodGet, http.MethodHead:
			return s.handleGetDoc(rq, target, segs[2], false)
		case http.MethodDelete:
			return s.handleDeleteDoc(rq, target, segs[2])
		}
		return methodNotAllowed(rq, "GET", "HEAD", "PUT", "POST", "DELETE")
	case ep == "_create" && len(segs) == 3:
		if m == http.MethodPut || m == http.MethodPost {
			return s.handleIndexDoc(rq, target, segs[2], true)
		}
		return methodNotAllowed(rq, "PUT", "POST")
	case ep == "_update" && len(segs) == 3:
		if m == http.MethodPost {
			return s.handleUpdateDoc(rq, target, segs[2])
		}
		return methodNotAllowed(rq, "POST")
	case ep == "_source" && len(segs) == 3:
		if m == http.MethodGet || m == http.MethodHead {
			return s.handleGetDoc(rq, target, segs[2], true)
		}
		return methodNotAllowed(rq, "GET", "HEAD")
	case len(segs) == 2:
		return s.routeIndexEndpoint(rq, target, ep, "")
	case len(segs) == 3 && (ep == "_alias" || ep == "_aliases"):
		return s.routeIndexEndpoint(rq, target, ep, segs[2])
	}
	return noHandler(rq)
}

func isSystemEndpoint(s string) bool {
	switch s {
	case "_bulk", "_mget", "_search", "_count", "_refresh", "_alias", "_aliases", "_mapping", "_settings",
		"_stats", "_cluster", "_cat", "_delete_by_query", "_nodes", "_capabilities":
		return true
	}
	return false
}

func (s *Server) routeSystem(rq *request) response {
	segs := rq.segs
	m := rq.method
	get := m == http.MethodGet || m == http.MethodHead
	switch segs[0] {
	case "_cluster":
		if len(segs) >= 2 && segs[1] == "health" && len(segs) <= 3 && get {
			return s.handleHealth(rq)
		}
	case "_bulk":
		if len(segs) == 1 {
			if m == http.MethodPost || m == http.MethodPut {
				return s.handleBulk(rq, "")
			}
			return methodNotAllowed(rq, "POST", "PUT")
		}
	case "_mget":
		if len(segs) == 1 {
			if get || m == http.MethodPost {
				return s.handleMget(rq, "")
			}
			return methodNotAllowed(rq, "GET", "POST")
		}
	case "_search", "_count", "_refresh", "_mapping", "_settings", "_stats", "_delete_by_query":
		if len(segs) == 1 {
			return s.routeIndexEndpoint(rq, "", segs[0], "")
		}
	case "_alias":
		if len(segs) <= 2 && get {
			name := ""
			if len(segs) == 2 {
				name = segs[1]
			}
			return s.handleGetAlias(rq, "", name, len(segs) == 2)
		}
		if len(segs) <= 2 {
			return methodNotAllowed(rq, "GET", "HEAD")
		}
	case "_aliases":
		if len(segs) == 1 {
			switch {
			case m == http.MethodPost:
				return s.handleUpdateAliases(rq)
			case get:
				return s.handleGetAlias(rq, "", "", false)
			}
			return methodNotAllowed(rq, "GET", "POST")
		}
	case "_cat":
		if (len(segs) == 2 || len(segs) == 3) && get {
			arg := ""
			if len(segs) == 3 {
				arg = segs[2]
			}
			switch segs[1] {
			case "indices":
				return s.handleCatIndices(rq, arg)
			case "health":
				if len(segs) == 2 {
					return s.handleCatHealth(rq)
				}
			case "aliases":
				return s.handleCatAliases(rq, arg)
			case "count":
				return s.handleCatCount(rq, arg)
			}
		}
	}
	return noHandler(rq)
}

func (s *Server) routeIndexEndpoint(rq *request, target, ep, name string) response {
	m := rq.method
	get := m == http.MethodGet || m == http.MethodHead
	switch ep {
	case "_bulk":
		if m == http.MethodPost || m == http.MethodPut {
			return s.handleBulk(rq, target)
		}
		return methodNotAllowed(rq, "POST", "PUT")
	case "_mget":
		if get || m == http.MethodPost {
			return s.handleMget(rq, target)
		}
		return methodNotAllowed(rq, "GET", "POST")
	case "_search":
		if get || m == http.MethodPost {
			return s.handleSearch(rq, target, false)
		}
		return methodNotAllowed(rq, "GET", "POST")
	case "_count":
		if get || m == http.MethodPost {
			return s.handleSearch(rq, target, true)
		}
		return methodNotAllowed(rq, "GET", "POST")
	case "_delete_by_query":
		if m == http.MethodPost {
			return s.handleDeleteByQuery(rq, target)
		}
		return methodNotAllowed(rq, "POST")
	case "_refresh":
		if get || m == http.MethodPost {
			return s.handleRefresh(rq, target)
		}
		return methodNotAllowed(rq, "GET", "POST")
	case "_mapping":
		switch {
		case get:
			return s.handleGetMapping(rq, target)
		case (m == http.MethodPut || m == http.MethodPost) && target != "":
			return s.handlePutMapping(rq, target)
		}
		return methodNotAllowed(rq, "GET", "PUT", "POST")
	case "_settings":
		switch {
		case get:
			return s.handleGetSettings(rq, target)
		case m == http.MethodPut:
			return s.handlePutSettings(rq, target)
		}
		return methodNotAllowed(rq, "GET", "PUT")
	case "_stats":
		if get {
			return s.handleStats(rq, target)
		}
		return methodNotAllowed(rq, "GET")
	case "_alias", "_aliases":
		switch {
		case get:
			return s.handleGetAlias(rq, target, name, name != "")
		case (m == http.MethodPut || m == http.MethodPost) && name != "":
			return s.handlePutAlias(rq, target, name)
		case m == http.MethodDelete && name != "":
			return s.handleDeleteAlias(rq, target, name)
		}
		if name == "" {
			return methodNotAllowed(rq, "GET", "HEAD")
		}
		return methodNotAllowed(rq, "GET", "HEAD", "PUT", "POST", "DELETE")
	}
	return noHandler(rq)
}

func noHandler(rq *request) response {
	return errResp(errIllegalArgument("no handler found for uri [%s] and method [%s]", rq.r.URL.RequestURI(), rq.method))
}

func methodNotAllowed(rq *request, allowed ...string) response {
	sort.Strings(allowed)
	e := newErr(http.StatusMethodNotAllowed, "illegal_argument_exception", "Incorrect HTTP method for uri [%s] and method [%s], allowed: [%s]",
		rq.r.URL.RequestURI(), rq.method, strings.Join(allowed, ", "))
	return errResp(e)
}

func (s *Server) now() time.Time { return s.cfg.now() }

func (s *Server) took(rq *request) int64 { return time.Since(rq.start).Milliseconds() }

// nextID returns an auto-generated document id (20 URL-safe characters
// like Elasticsearch's time-based ids).
func (s *Server) nextID() string {
	n := s.idSeq.Add(1)
	return fmt.Sprintf("%s%08x", s.idPrefix, n)
}

func (s *Server) newUUID() string {
	n := s.uuidSeq.Add(1)
	return fmt.Sprintf("%s%06d", randomUUIDLike()[:16], n)
}

func (s *Server) handleInfo(rq *request) response {
	body := newOrderedMap().
		Set("name", s.cfg.nodeName).
		Set("cluster_name", s.cfg.clusterName).
		Set("cluster_uuid", s.cfg.clusterUUID).
		Set("version", newOrderedMap().
			Set("number", s.cfg.version).
			Set("build_flavor", "default").
			Set("build_type", "sluice-esserver").
			Set("build_hash", "0000000000000000000000000000000000000000").
			Set("build_date", "2024-08-05T10:05:34.233336849Z").
			Set("build_snapshot", false).
			Set("lucene_version", "9.11.1").
			Set("minimum_wire_compatibility_version", "7.17.0").
			Set("minimum_index_compatibility_version", "7.0.0")).
		Set("tagline", "You Know, for Search")
	return ok(body)
}

func (s *Server) handleHealth(rq *request) response {
	if ws := rq.param("wait_for_status"); ws != "" && ws != "green" && ws != "yellow" && ws != "red" {
		return errResp(errIllegalArgument("unknown cluster health status [%s]", ws))
	}
	s.mu.RLock()
	shards := 0
	if len(rq.segs) == 3 {
		names, err := s.resolveIndices(rq.segs[2], resolveOpts{allowNoIndices: true})
		if err != nil {
			s.mu.RUnlock()
			// ES waits and then times out with 408 for missing indices.
			return response{http.StatusRequestTimeout, s.healthBody(0, 0, "red", true)}
		}
		for _, n := range names {
			shards += s.indices[n].settings.shards
		}
	} else {
		for _, ix := range s.indices {
			shards += ix.settings.shards
		}
	}
	s.mu.RUnlock()
	return ok(s.healthBody(shards, shards, "green", false))
}

func (s *Server) healthBody(primaries, active int, status string, timedOut bool) *orderedMap {
	return newOrderedMap().
		Set("cluster_name", s.cfg.clusterName).
		Set("status", status).
		Set("timed_out", timedOut).
		Set("number_of_nodes", 1).
		Set("number_of_data_nodes", 1).
		Set("active_primary_shards", primaries).
		Set("active_shards", active).
		Set("relocating_shards", 0).
		Set("initializing_shards", 0).
		Set("unassigned_shards", 0).
		Set("unassigned_primary_shards", 0).
		Set("delayed_unassigned_shards", 0).
		Set("number_of_pending_tasks", 0).
		Set("number_of_in_flight_fetch", 0).
		Set("task_max_waiting_in_queue_millis", 0).
		Set("active_shards_percent_as_number", 100.0)
}
