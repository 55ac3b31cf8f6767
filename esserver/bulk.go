package esserver

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

type bulkItem struct {
	op   *writeOp
	line int
	err  *esError // item-level parse error
}

// parseBulk parses an NDJSON bulk body into write operations.
func parseBulk(body []byte, defIndex string, defPipeline string, defRequireAlias bool, defSource *sourceFilter) ([]*bulkItem, *esError) {
	if len(body) == 0 {
		return nil, newErr(http.StatusBadRequest, "parse_exception", "request body is required")
	}
	if body[len(body)-1] != '\n' {
		return nil, errIllegalArgument("The bulk request must be terminated by a newline [\\n]")
	}
	var items []*bulkItem
	line := 0
	pos := 0
	nextLine := func() ([]byte, bool) {
		if pos >= len(body) {
			return nil, false
		}
		i := bytes.IndexByte(body[pos:], '\n')
		var l []byte
		if i < 0 {
			l = body[pos:]
			pos = len(body)
		} else {
			l = body[pos : pos+i]
			pos += i + 1
		}
		line++
		return bytes.TrimRight(l, "\r"), true
	}
	for {
		l, more := nextLine()
		if !more {
			break
		}
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		actionLine := line
		op := &writeOp{index: defIndex, pipeline: defPipeline, requireAlias: defRequireAlias, versionType: vtInternal, detectNoop: true}
		if err := readBulkAction(op, l, actionLine, defSource); err != nil {
			return nil, err
		}
		action := op.action
		it := &bulkItem{op: op, line: actionLine}
		if action != "delete" {
			src, more := nextLine()
			if !more {
				return nil, errIllegalArgument("The bulk request must be terminated by a newline [\\n]")
			}
			src = bytes.TrimSpace(src)
			if action == "update" {
				v, derr := decodeJSON(src)
				m, isObj := v.(map[string]any)
				if derr != nil || !isObj {
					msg := "Malformed content, must start with an object"
					if derr != nil {
						msg = jsonErrText(derr)
					}
					return nil, errXContent("[%d:1] [UpdateRequest] failed to parse: %s", line, msg)
				}
				if perr := parseUpdateBody(op, m); perr != nil {
					return nil, perr
				}
			} else {
				if len(src) == 0 {
					it.err = errValidation("source is missing")
				}
				op.source = src
			}
		}
		items = append(items, it)
	}
	if len(items) == 0 {
		return nil, errValidation("no requests added")
	}
	return items, nil
}

// readBulkAction sets op's action and metadata from action line l: a line
// of the common form (scanBulkAction) without the general parser, any
// other through parseBulkAction and applyBulkMeta.
func readBulkAction(op *writeOp, l []byte, line int, defSource *sourceFilter) *esError {
	if m, ok := scanBulkAction(l); ok {
		op.action = m.action
		if m.action == "update" {
			op.sourceFilter = defSource
		}
		return m.apply(op)
	}
	action, meta, err := parseBulkAction(l, line)
	if err != nil {
		return err
	}
	op.action = action
	if action == "update" {
		op.sourceFilter = defSource
	}
	return applyBulkMeta(op, meta, line)
}

// bulkMeta is an action line of the common form, as sluice's projection
// worker writes it: compact, one action, its members among _index, _id,
// routing (strings without escapes), version, if_seq_no, if_primary_term
// (integers), version_type (a string) and require_alias (a boolean), each
// at most once.
type bulkMeta struct {
	action, index, id, versionType                                   string
	hasIndex, hasID, hasVersion, hasVT, hasRA, ra, hasSeqNo, hasTerm bool
	hasRouting                                                       bool
	version, seqNo, term                                             int64
}

// scanBulkAction reads l when it is of bulkMeta's form; ok is false for
// any other line (which the general parser then reads, errors included).
func scanBulkAction(l []byte) (m bulkMeta, ok bool) {
	sc := &lineScanner{src: string(l)}
	if !sc.lit("{") {
		return m, false
	}
	if m.action, ok = sc.str(); !ok || !sc.lit(":{") {
		return m, false
	}
	switch m.action {
	case "index", "create", "update", "delete":
	default:
		return m, false
	}
	for first := true; !sc.lit("}}"); first = false {
		if !first && !sc.lit(",") {
			return m, false
		}
		k, ok := sc.str()
		if !ok || !sc.lit(":") || !m.member(k, sc) {
			return m, false
		}
	}
	if sc.p != len(sc.src) || !(m.hasIndex || m.hasID || m.hasRouting || m.hasVT || m.hasVersion || m.hasSeqNo || m.hasTerm || m.hasRA) {
		return m, false
	}
	return m, true
}

// member reads the value of member k at sc; false for a name bulkMeta
// does not take, a second member of a name, or a value of another form.
func (m *bulkMeta) member(k string, sc *lineScanner) bool {
	var dup, ok bool
	switch k {
	case "_index":
		dup, m.hasIndex = m.hasIndex, true
		m.index, ok = sc.str()
	case "_id":
		dup, m.hasID = m.hasID, true
		m.id, ok = sc.str()
	case "routing":
		dup, m.hasRouting = m.hasRouting, true
		_, ok = sc.str()
	case "version_type":
		dup, m.hasVT = m.hasVT, true
		m.versionType, ok = sc.str()
	case "version":
		dup, m.hasVersion = m.hasVersion, true
		m.version, ok = sc.integer()
	case "if_seq_no":
		dup, m.hasSeqNo = m.hasSeqNo, true
		m.seqNo, ok = sc.integer()
	case "if_primary_term":
		dup, m.hasTerm = m.hasTerm, true
		m.term, ok = sc.integer()
	case "require_alias":
		dup, m.hasRA = m.hasRA, true
		m.ra = sc.lit("true")
		ok = m.ra || sc.lit("false")
	}
	return ok && !dup
}

// lineScanner reads the tokens of bulkMeta's form from src at p.
type lineScanner struct {
	src string
	p   int
}

// lit consumes w when src continues with it.
func (sc *lineScanner) lit(w string) bool {
	if strings.HasPrefix(sc.src[sc.p:], w) {
		sc.p += len(w)
		return true
	}
	return false
}

// str reads a string without escapes: a slice of src.
func (sc *lineScanner) str() (string, bool) {
	if sc.p >= len(sc.src) || sc.src[sc.p] != '"' {
		return "", false
	}
	for i := sc.p + 1; i < len(sc.src); i++ {
		switch c := sc.src[i]; {
		case c == '"':
			v := sc.src[sc.p+1 : i]
			sc.p = i + 1
			return v, utf8.ValidString(v)
		case c == '\\' || c < 0x20:
			return "", false
		}
	}
	return "", false
}

// integer reads a non-negative integer of at most 18 digits.
func (sc *lineScanner) integer() (int64, bool) {
	i := sc.p
	for i < len(sc.src) && sc.src[i] >= '0' && sc.src[i] <= '9' {
		i++
	}
	if i == sc.p || i-sc.p > 18 || (sc.src[sc.p] == '0' && i-sc.p > 1) {
		return 0, false
	}
	n, err := strconv.ParseInt(sc.src[sc.p:i], 10, 64)
	sc.p = i
	return n, err == nil
}

// apply sets m on op as applyBulkMeta sets the same members.
func (m *bulkMeta) apply(op *writeOp) *esError {
	if m.hasIndex {
		op.index = m.index
	}
	if m.hasID {
		op.id = m.id
	}
	if m.hasVersion {
		op.hasVersion, op.version = true, m.version
	}
	if m.hasVT {
		vt, err := parseVersionType(m.versionType)
		if err != nil {
			return err
		}
		op.versionType = vt
	}
	if m.hasSeqNo {
		op.hasIfSeqNo, op.ifSeqNo = true, m.seqNo
	}
	if m.hasTerm {
		op.hasIfTerm, op.ifTerm = true, m.term
	}
	if m.hasRA {
		op.requireAlias = m.ra
	}
	settleBulkMeta(op, m.hasID)
	return nil
}

func parseBulkAction(l []byte, line int) (string, map[string]any, *esError) {
	v, err := decodeJSON(l)
	if err != nil {
		return "", nil, errXContent("[%d:1] Malformed action/metadata line [%d]: %s", line, line, jsonErrText(err))
	}
	m, ok := v.(map[string]any)
	if !ok {
		return "", nil, errIllegalArgument("Malformed action/metadata line [%d], expected START_OBJECT or END_OBJECT but found [%s]", line, jsonKind(v))
	}
	if len(m) == 0 {
		return "", nil, errIllegalArgument("Malformed action/metadata line [%d], expected FIELD_NAME but found [END_OBJECT]", line)
	}
	if len(m) > 1 {
		return "", nil, errIllegalArgument("Malformed action/metadata line [%d], expected END_OBJECT but found [FIELD_NAME]", line)
	}
	for action, metaV := range m {
		switch action {
		case "index", "create", "update", "delete":
		default:
			return "", nil, errIllegalArgument("Malformed action/metadata line [%d], expected field [create], [delete], [index] or [update] but found [%s]", line, action)
		}
		meta, ok := metaV.(map[string]any)
		if !ok {
			return "", nil, errIllegalArgument("Malformed action/metadata line [%d], expected START_OBJECT but found [%s]", line, jsonKind(metaV))
		}
		return action, meta, nil
	}
	return "", nil, nil
}

func applyBulkMeta(op *writeOp, meta map[string]any, line int) *esError {
	num := func(k string, v any) (int64, *esError) {
		n, ok := toInt(v)
		if !ok {
			return 0, errIllegalArgument("Malformed action/metadata line [%d], [%s] must be a number", line, k)
		}
		return n, nil
	}
	for k, v := range meta {
		switch k {
		case "_index":
			s, ok := v.(string)
			if !ok {
				return errIllegalArgument("Malformed action/metadata line [%d], [_index] must be a string", line)
			}
			op.index = s
		case "_id":
			s, ok := asString(v)
			if !ok && v != nil {
				return errIllegalArgument("Malformed action/metadata line [%d], [_id] must be a string", line)
			}
			op.id = s
		case "routing", "_routing", "retry_on_conflict", "_retry_on_conflict", "dynamic_templates", "list_executed_pipelines", "require_data_stream", "_type":
		case "version", "_version":
			n, err := num(k, v)
			if err != nil {
				return err
			}
			op.hasVersion, op.version = true, n
		case "version_type", "_version_type":
			s, _ := v.(string)
			vt, err := parseVersionType(s)
			if err != nil {
				return err
			}
			op.versionType = vt
		case "if_seq_no":
			n, err := num(k, v)
			if err != nil {
				return err
			}
			op.hasIfSeqNo, op.ifSeqNo = true, n
		case "if_primary_term":
			n, err := num(k, v)
			if err != nil {
				return err
			}
			op.hasIfTerm, op.ifTerm = true, n
		case "op_type":
			s, _ := v.(string)
			switch s {
			case "create":
				if op.action == "index" {
					op.action = "create"
				}
			case "index":
			default:
				return errIllegalArgument("opType must be 'create' or 'index', found: [%s]", s)
			}
		case "pipeline":
			s, _ := v.(string)
			op.pipeline = s
		case "require_alias":
			b, ok := v.(bool)
			if !ok {
				s, _ := asString(v)
				b = s == "true"
			}
			op.requireAlias = b
		case "_source":
			f, err := sourceFilterFromBody(v)
			if err != nil {
				return err
			}
			op.sourceFilter = f
		default:
			return errIllegalArgument("Action/metadata line [%d] contains an unknown parameter [%s]", line, k)
		}
	}
	_, hasID := meta["_id"]
	settleBulkMeta(op, hasID)
	return nil
}

// settleBulkMeta completes op once its action line is read, by either
// reader: an index or create without _id gets an id of its own, and an
// op left without an index (none on the line, none in the path) fails as
// "index is missing".
func settleBulkMeta(op *writeOp, hasID bool) {
	if !hasID && (op.action == "index" || op.action == "create") {
		op.autoID = true
	}
	if op.index == "" {
		op.missingIndex = true
	}
}

func (s *Server) handleBulk(rq *request, target string) response {
	refresh, err := parseRefresh(rq)
	if err != nil {
		return errResp(err)
	}
	requireAlias, err := rq.boolParam("require_alias", false)
	if err != nil {
		return errResp(err)
	}
	var defSource *sourceFilter
	if f, explicit, _ := sourceFilterFromParams(rq); explicit {
		defSource = f
	}
	items, err := parseBulk(rq.body, target, rq.param("pipeline"), requireAlias, defSource)
	if err != nil {
		return errResp(err)
	}
	fault := rq.fault
	// The items are rendered into one buffer as they are applied: no
	// buffer and boxed value per item, no second copy at the end.
	out := make([]byte, 0, 64+len(items)*256)
	out = append(out, '[')
	hasErrors := false
	type shardRef struct {
		ix    *index
		shard int
	}
	touched := map[shardRef]bool{}
	s.mu.Lock()
	for i, it := range items {
		op := it.op
		var res writeResult
		switch {
		case it.err != nil:
			res = writeResult{index: op.index, id: op.id, err: it.err}
		case op.missingIndex:
			res = writeResult{index: "", id: op.id, err: errValidation("index is missing")}
		case fault != nil && fault.RejectBulkItems != nil && fault.RejectBulkItems(BulkItem{Position: i, Action: op.action, Index: op.index, ID: op.id}):
			st := fault.BulkItemStatus
			if st == 0 {
				st = http.StatusTooManyRequests
			}
			res = writeResult{index: op.index, id: op.id, err: faultItemError(st)}
		case fault != nil && fault.RejectBulkItems == nil && fault.BulkItemStatus != 0:
			res = writeResult{index: op.index, id: op.id, err: faultItemError(fault.BulkItemStatus)}
		default:
			res = s.applyWrite(op)
		}
		if res.ix != nil && res.err == nil {
			touched[shardRef{res.ix, res.ix.shardOf(res.id)}] = true
		}
		if i > 0 {
			out = append(out, ',')
		}
		var aerr error
		if out, aerr = appendBulkItem(out, op, res, refresh == refreshForce); aerr != nil {
			s.mu.Unlock()
			return errResp(newErr(http.StatusInternalServerError, "exception", "esserver: marshal response: %s", aerr.Error()))
		}
		if res.err != nil {
			hasErrors = true
		}
	}
	if refresh != refreshNone {
		for ref := range touched {
			ref.ix.refreshShard(ref.shard)
		}
	}
	s.mu.Unlock()
	out = append(out, ']')
	return ok(newOrderedMap().Set("errors", hasErrors).Set("took", s.took(rq)).Set("items", rawJSON(out)))
}

func rejectedExecution() *esError {
	return newErr(http.StatusTooManyRequests, "es_rejected_execution_exception",
		"rejected execution of primary operation [coordinating_and_primary_bytes=0, replica_bytes=0, all_bytes=0, primary_operation_bytes=0, max_coordinating_and_primary_bytes=0] (injected by esserver)")
}

func faultItemError(status int) *esError {
	if status == http.StatusTooManyRequests {
		return rejectedExecution()
	}
	return newErr(status, "exception", "injected bulk item failure with status [%d]", status)
}

// appendBulkItem appends the answer to one bulk item to b.
func appendBulkItem(b []byte, op *writeOp, res writeResult, forced bool) ([]byte, error) {
	if res.err == nil && !res.noop && !(op.action == "update" && op.sourceFilter != nil && !op.sourceFilter.disabled) {
		return appendBulkSuccess(b, op.action, res, forced), nil
	}
	var body *orderedMap
	if res.err != nil {
		idx := res.index
		body = newOrderedMap().Set("_index", idx).Set("_id", nilIfEmpty(res.id, op)).Set("status", res.err.Status).Set("error", res.err.object())
	} else {
		body = writeResponse(res, forced && !res.noop)
		body.Set("status", res.status)
		if op.action == "update" && op.sourceFilter != nil && !op.sourceFilter.disabled {
			body.Set("get", updateGet(res, op.sourceFilter))
		}
	}
	return appendJSON(b, map[string]any{op.action: body})
}

func nilIfEmpty(id string, op *writeOp) any {
	if id == "" && op.autoID {
		return nil
	}
	return id
}

// appendBulkSuccess renders a successful bulk item without intermediate
// maps (the hot path of bulk indexing).
func appendBulkSuccess(b []byte, action string, res writeResult, forced bool) []byte {
	b = append(b, `{"`...)
	b = append(b, action...)
	b = append(b, `":{"_index":`...)
	b = appendString(b, res.index)
	b = append(b, `,"_id":`...)
	b = appendString(b, res.id)
	b = append(b, `,"_version":`...)
	b = strconv.AppendInt(b, res.entry.version, 10)
	b = append(b, `,"result":"`...)
	b = append(b, res.result...)
	b = append(b, '"')
	if forced {
		b = append(b, `,"forced_refresh":true`...)
	}
	b = append(b, `,"_shards":{"total":`...)
	b = strconv.AppendInt(b, int64(1+res.ix.settings.replicas), 10)
	b = append(b, `,"successful":1,"failed":0},"_seq_no":`...)
	b = strconv.AppendInt(b, res.entry.seqNo, 10)
	b = append(b, `,"_primary_term":`...)
	b = strconv.AppendInt(b, res.entry.primaryTerm, 10)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(res.status), 10)
	return append(b, "}}"...)
}
