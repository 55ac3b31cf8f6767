package esserver

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// catCol is one column of a _cat table: its name, the short names `h=`
// also takes, whether it is shown without `h=`, and whether its text is
// right-aligned (numbers), as Elasticsearch's RestTable has them.
type catCol struct {
	name    string
	aliases []string
	hidden  bool
	right   bool
}

// catTable is a _cat response before `h`, `s`, `v` and `format` apply.
type catTable struct {
	cols []catCol
	rows [][]string // one cell per column
}

// catHeader is a column chosen for display, under the name it was asked by.
type catHeader struct {
	col     int
	display string
}

// render answers a _cat request the way Elasticsearch's RestTable does:
// `h` chooses columns (names, short names or wildcards; unknown ones are
// dropped), `s` sorts, `v` adds a header line, and `format=json` gives an
// array of objects keyed by the displayed names. Text columns are padded
// to one width, numbers right-aligned.
func (t *catTable) render(rq *request) response {
	headers := t.displayHeaders(rq)
	if err := t.sortRows(rq.param("s")); err != nil {
		return errResp(err)
	}
	if rq.param("format") == "json" {
		out := make([]*orderedMap, 0, len(t.rows))
		for _, row := range t.rows {
			m := newOrderedMap()
			for _, h := range headers {
				m.Set(h.display, row[h.col])
			}
			out = append(out, m)
		}
		return ok(out)
	}
	verbose, err := rq.boolParam("v", false)
	if err != nil {
		return errResp(err)
	}
	width := make([]int, len(headers))
	for i, h := range headers {
		if verbose {
			width[i] = len(h.display)
		}
		for _, row := range t.rows {
			width[i] = max(width[i], len(row[h.col]))
		}
	}
	var b strings.Builder
	line := func(cell func(h catHeader) string) {
		for i, h := range headers {
			if i > 0 {
				b.WriteByte(' ')
			}
			c := cell(h)
			pad := strings.Repeat(" ", width[i]-len(c))
			switch {
			case t.cols[h.col].right:
				b.WriteString(pad + c)
			case i == len(headers)-1:
				b.WriteString(c)
			default:
				b.WriteString(c + pad)
			}
		}
		b.WriteByte('\n')
	}
	if verbose {
		line(func(h catHeader) string { return h.display })
	}
	for _, row := range t.rows {
		line(func(h catHeader) string { return row[h.col] })
	}
	return response{http.StatusOK, []byte(b.String())}
}

func (t *catTable) displayHeaders(rq *request) []catHeader {
	var out []catHeader
	if !rq.has("h") {
		for i, c := range t.cols {
			if !c.hidden {
				out = append(out, catHeader{i, c.name})
			}
		}
		return out
	}
	seen := map[string]bool{}
	add := func(col int, display string) {
		if !seen[display] {
			seen[display] = true
			out = append(out, catHeader{col, display})
		}
	}
	for _, want := range splitComma(rq.param("h")) {
		for i, c := range t.cols {
			switch {
			case c.name == want:
				add(i, want)
			case slices.Contains(c.aliases, want):
				add(i, want)
			case strings.Contains(want, "*") && globMatch(want, c.name):
				add(i, c.name)
			}
		}
	}
	return out
}

// sortRows applies `s`: columns (or short names), each with an optional
// :asc or :desc; numbers compare as numbers.
func (t *catTable) sortRows(spec string) *esError {
	type key struct {
		col  int
		desc bool
	}
	var keys []key
	for _, part := range splitComma(spec) {
		name, order, _ := strings.Cut(part, ":")
		col := slices.IndexFunc(t.cols, func(c catCol) bool { return c.name == name || slices.Contains(c.aliases, name) })
		if col < 0 {
			return errIllegalArgument("Unable to sort by unknown sort key `%s`", name)
		}
		keys = append(keys, key{col, order == "desc"})
	}
	if len(keys) == 0 {
		return nil
	}
	sort.SliceStable(t.rows, func(i, j int) bool {
		for _, k := range keys {
			c := compareCells(t.rows[i][k.col], t.rows[j][k.col])
			if c != 0 {
				return (c < 0) != k.desc
			}
		}
		return false
	})
	return nil
}

func compareCells(a, b string) int {
	x, errA := strconv.ParseFloat(a, 64)
	y, errB := strconv.ParseFloat(b, 64)
	if errA == nil && errB == nil {
		return cmpFloat(x, y)
	}
	return strings.Compare(a, b)
}

var catIndicesCols = []catCol{
	{name: "health", aliases: []string{"h"}},
	{name: "status", aliases: []string{"s"}},
	{name: "index", aliases: []string{"i", "idx"}},
	{name: "uuid", aliases: []string{"id", "uuid"}},
	{name: "pri", aliases: []string{"p", "shards.primary", "shardsPrimary"}, right: true},
	{name: "rep", aliases: []string{"r", "shards.replica", "shardsReplica"}, right: true},
	{name: "docs.count", aliases: []string{"dc", "docsCount"}, right: true},
	{name: "docs.deleted", aliases: []string{"dd", "docsDeleted"}, right: true},
	{name: "creation.date", aliases: []string{"cd"}, hidden: true, right: true},
	{name: "creation.date.string", aliases: []string{"cds"}, hidden: true},
	{name: "store.size", aliases: []string{"ss", "storeSize"}, right: true},
	{name: "pri.store.size", right: true},
	{name: "dataset.size", right: true},
}

// handleCatIndices answers GET /_cat/indices[/{index}]. The sizes are the
// bytes of the live documents' sources (there is no Lucene store).
func (s *Server) handleCatIndices(rq *request, expr string) response {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names, err := s.indicesOf(rq, expr)
	if err != nil {
		return errResp(err)
	}
	t := &catTable{cols: catIndicesCols}
	for _, n := range names {
		ix := s.indices[n]
		docs, size := 0, 0
		for _, d := range ix.visible {
			if !d.deleted {
				docs++
				size += len(d.source)
			}
		}
		bytes := catBytes(int64(size), rq.param("bytes"))
		t.rows = append(t.rows, []string{"green", "open", n, ix.uuid,
			strconv.Itoa(ix.settings.shards), strconv.Itoa(ix.settings.replicas), strconv.Itoa(docs), "0",
			strconv.FormatInt(ix.created.UnixMilli(), 10), ix.created.UTC().Format("2006-01-02T15:04:05.000Z"),
			bytes, bytes, bytes})
	}
	return t.render(rq)
}

var catAliasesCols = []catCol{
	{name: "alias", aliases: []string{"a"}},
	{name: "index", aliases: []string{"i", "idx"}},
	{name: "filter", aliases: []string{"f", "fi"}},
	{name: "routing.index", aliases: []string{"ri", "routingIndex"}},
	{name: "routing.search", aliases: []string{"rs", "routingSearch"}},
	{name: "is_write_index", aliases: []string{"w", "isWriteIndex"}},
}

// handleCatAliases answers GET /_cat/aliases[/{name}].
func (s *Server) handleCatAliases(rq *request, nameExpr string) response {
	s.mu.RLock()
	defer s.mu.RUnlock()
	pats := splitComma(nameExpr)
	t := &catTable{cols: catAliasesCols}
	for _, ix := range s.indices {
		for an, meta := range ix.aliases {
			if len(pats) > 0 && !slices.ContainsFunc(pats, func(p string) bool { return p == "_all" || globMatch(p, an) }) {
				continue
			}
			filter, write := "-", "-"
			if meta.filter != nil {
				filter = "*"
			}
			if meta.isWriteIndex != nil {
				write = strconv.FormatBool(*meta.isWriteIndex)
			}
			t.rows = append(t.rows, []string{an, ix.name, filter, orDash(meta.indexRouting), orDash(meta.searchRouting), write})
		}
	}
	sort.Slice(t.rows, func(i, j int) bool {
		return t.rows[i][0] < t.rows[j][0] || t.rows[i][0] == t.rows[j][0] && t.rows[i][1] < t.rows[j][1]
	})
	return t.render(rq)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

var catHealthCols = []catCol{
	{name: "epoch", aliases: []string{"t", "time"}, right: true},
	{name: "timestamp", aliases: []string{"ts", "hms", "hhmmss"}},
	{name: "cluster", aliases: []string{"cl"}},
	{name: "status", aliases: []string{"st"}},
	{name: "node.total", aliases: []string{"nt", "nodeTotal"}, right: true},
	{name: "node.data", aliases: []string{"nd", "nodeData"}, right: true},
	{name: "shards", aliases: []string{"t", "sh", "shards.total", "shardsTotal"}, right: true},
	{name: "pri", aliases: []string{"p", "shards.primary", "shardsPrimary"}, right: true},
	{name: "relo", aliases: []string{"r", "shards.relocating", "shardsRelocating"}, right: true},
	{name: "init", aliases: []string{"i", "shards.initializing", "shardsInitializing"}, right: true},
	{name: "unassign", aliases: []string{"u", "shards.unassigned", "shardsUnassigned"}, right: true},
	{name: "unassign.pri", aliases: []string{"up", "shards.unassigned.primary", "shardsUnassignedPrimary"}, right: true},
	{name: "pending_tasks", aliases: []string{"pt", "pendingTasks"}, right: true},
	{name: "max_task_wait_time", aliases: []string{"mtwt", "maxTaskWaitTime"}, right: true},
	{name: "active_shards_percent", aliases: []string{"asp", "activeShardsPercent"}, right: true},
}

// handleCatHealth answers GET /_cat/health: one green node holding every
// primary.
func (s *Server) handleCatHealth(rq *request) response {
	s.mu.RLock()
	shards := 0
	for _, ix := range s.indices {
		shards += ix.settings.shards
	}
	s.mu.RUnlock()
	now := s.now().UTC()
	t := &catTable{cols: catHealthCols, rows: [][]string{{
		strconv.FormatInt(now.Unix(), 10), now.Format(time.TimeOnly), s.cfg.clusterName, "green", "1", "1",
		strconv.Itoa(shards), strconv.Itoa(shards), "0", "0", "0", "0", "0", "-", "100.0%",
	}}}
	return t.render(rq)
}

// catBytes renders a size as _cat does: with `bytes=` in that unit
// (b, kb, mb, gb, tb, pb; whole numbers), otherwise human-readable with
// one decimal, truncated, as Elasticsearch's ByteSizeValue prints it.
func catBytes(n int64, unit string) string {
	units := []string{"b", "kb", "mb", "gb", "tb", "pb"}
	if i := slices.Index(units, strings.ToLower(unit)); i >= 0 {
		return strconv.FormatInt(n>>(10*i), 10)
	}
	i := 0
	for i < len(units)-1 && n >= int64(1)<<(10*(i+1)) {
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%db", n)
	}
	tenths := n * 10 >> (10 * i)
	if tenths%10 == 0 {
		return fmt.Sprintf("%d%s", tenths/10, units[i])
	}
	return fmt.Sprintf("%d.%d%s", tenths/10, tenths%10, units[i])
}

var catCountCols = []catCol{
	{name: "epoch", aliases: []string{"t", "time"}, right: true},
	{name: "timestamp", aliases: []string{"ts", "hms", "hhmmss"}},
	{name: "count", aliases: []string{"dc", "docs.count", "docsCount"}, right: true},
}

// handleCatCount answers GET /_cat/count[/{index}]: the documents a
// _count would count (searchable ones, through alias filters).
func (s *Server) handleCatCount(rq *request, expr string) response {
	s.mu.RLock()
	defer s.mu.RUnlock()
	targets, err := s.searchTargets(expr, resolveOpts{allowNoIndices: true})
	if err != nil {
		return errResp(err)
	}
	_, total, err := s.execute(&searchReq{count: true, query: qMatchAll{boost: 1}, trackTotal: -1}, targets)
	if err != nil {
		return errResp(err)
	}
	now := s.now().UTC()
	t := &catTable{cols: catCountCols, rows: [][]string{{strconv.FormatInt(now.Unix(), 10), now.Format(time.TimeOnly), strconv.Itoa(total)}}}
	return t.render(rq)
}
