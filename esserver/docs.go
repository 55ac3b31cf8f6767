package esserver

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

const (
	vtInternal   = "internal"
	vtExternal   = "external"
	vtExternalGT = "external_gte"
	vtForce      = "force"
)

// writeOp is one document write (single API call or bulk item).
type writeOp struct {
	action       string // index, create, update, delete
	index        string
	id           string
	autoID       bool
	source       []byte
	parsed       map[string]any
	hasVersion   bool
	version      int64
	versionType  string
	hasIfSeqNo   bool
	ifSeqNo      int64
	hasIfTerm    bool
	ifTerm       int64
	pipeline     string
	requireAlias bool
	missingIndex bool

	// update
	doc          map[string]any
	upsert       map[string]any
	docAsUpsert  bool
	detectNoop   bool
	script       bool
	sourceFilter *sourceFilter
}

type writeResult struct {
	ix     *index
	index  string
	id     string
	entry  *docEntry
	result string
	status int
	err    *esError
	noop   bool
}

// validate performs request-level validation (ActionRequestValidation).
func (op *writeOp) validate() *esError {
	var msgs []string
	if op.id == "" && !op.autoID && op.action != "index" && op.action != "create" {
		msgs = append(msgs, "id is missing")
	}
	if len(op.id) > 512 {
		msgs = append(msgs, fmt.Sprintf("id [%s] is too long, must be no longer than 512 bytes but was: %d", op.id, len(op.id)))
	}
	if op.action == "index" || op.action == "create" {
		if op.source == nil && op.parsed == nil {
			msgs = append(msgs, "source is missing")
		}
	}
	if op.action == "create" && op.versionType != vtInternal {
		msgs = append(msgs, "create operations only support internal versioning. use index instead")
	}
	if op.action == "update" {
		if op.versionType != vtInternal || op.hasVersion {
			msgs = append(msgs, "can't provide version in update request")
		}
		if op.doc == nil && op.upsert == nil && !op.script {
			msgs = append(msgs, "script or doc is missing")
		}
	}
	if op.hasIfSeqNo || op.hasIfTerm {
		if op.hasVersion && op.versionType != vtInternal {
			msgs = append(msgs, "compare and write operations can not use versioning")
		}
		if op.hasIfSeqNo && (!op.hasIfTerm || op.ifTerm == 0) {
			msgs = append(msgs, fmt.Sprintf("ifSeqNo is set, but primary term is [%d]", op.ifTerm))
		}
		if op.hasIfTerm && !op.hasIfSeqNo {
			msgs = append(msgs, fmt.Sprintf("ifSeqNo is unassigned, but primary term is [%d]", op.ifTerm))
		}
		if op.hasIfSeqNo && op.ifSeqNo < 0 {
			msgs = append(msgs, "sequence numbers must be non negative. got ["+strconv.FormatInt(op.ifSeqNo, 10)+"].")
		}
	}
	if op.action != "update" {
		switch op.versionType {
		case vtInternal:
			if op.hasVersion && !op.hasIfSeqNo {
				msgs = append(msgs, "internal versioning can not be used for optimistic concurrency control. Please use `if_seq_no` and `if_primary_term` instead")
			}
		case vtExternal, vtExternalGT:
			if !op.hasVersion {
				msgs = append(msgs, fmt.Sprintf("illegal version value [-3] for version type [%s]", strings.ToUpper(op.versionType)))
			} else if op.version < 0 {
				msgs = append(msgs, fmt.Sprintf("illegal version value [%d] for version type [%s]", op.version, strings.ToUpper(op.versionType)))
			}
		}
	}
	if len(msgs) > 0 {
		return errValidation(msgs...)
	}
	return nil
}

func parseVersionType(s string) (string, *esError) {
	switch s {
	case "", vtInternal:
		return vtInternal, nil
	case vtExternal, vtExternalGT, vtForce:
		if s == vtForce {
			return "", errIllegalArgument("version type [force] may no longer be used")
		}
		return s, nil
	case "external_gt":
		return vtExternal, nil
	}
	return "", errIllegalArgument("No version type match [%s]", s)
}

// applyWrite executes one write against the store. Caller holds s.mu.
func (s *Server) applyWrite(op *writeOp) writeResult {
	res := writeResult{index: op.index, id: op.id}
	if op.id == "" && !op.autoID && (op.action == "index" || op.action == "create") {
		res.err = errIllegalArgument("if _id is specified it must not be empty")
		return res
	}
	if err := op.validate(); err != nil {
		res.err = err
		return res
	}
	if op.pipeline != "" && op.pipeline != "_none" {
		res.err = errIllegalArgument("pipeline with id [%s] does not exist", op.pipeline)
		return res
	}
	if op.requireAlias {
		if len(s.aliasIndices(op.index)) == 0 {
			res.err = newErr(http.StatusNotFound, "index_not_found_exception",
				"no such index [%s] and [require_alias] request flag is [true] and [%s] is not an alias", op.index, op.index).
				with("index_uuid", "_na_").with("index", op.index)
			return res
		}
	}
	autoCreate := op.action != "delete" || op.versionType != vtInternal
	ix, err := s.writeIndexFor(op.index, autoCreate)
	if err != nil {
		res.err = err
		return res
	}
	res.ix = ix
	res.index = ix.name
	if op.autoID && op.id == "" {
		op.id = s.nextID()
		res.id = op.id
	}
	switch op.action {
	case "index", "create":
		s.doIndex(ix, op, &res)
	case "delete":
		s.doDelete(ix, op, &res)
	case "update":
		s.doUpdate(ix, op, &res)
	default:
		res.err = errIllegalArgument("Malformed action/metadata line, unknown action [%s]", op.action)
	}
	return res
}

func (s *Server) checkCAS(ix *index, op *writeOp, cur *docEntry) *esError {
	if !op.hasIfSeqNo {
		return nil
	}
	if cur == nil || cur.deleted {
		return errVersionConflict(ix, op.id, fmt.Sprintf("required seqNo [%d], primary term [%d]. but no document was found", op.ifSeqNo, op.ifTerm))
	}
	if cur.seqNo != op.ifSeqNo || cur.primaryTerm != op.ifTerm {
		return errVersionConflict(ix, op.id, fmt.Sprintf("required seqNo [%d], primary term [%d]. current document has seqNo [%d] and primary term [%d]",
			op.ifSeqNo, op.ifTerm, cur.seqNo, cur.primaryTerm))
	}
	return nil
}

// nextVersion applies the version type rules and returns the new version.
func nextVersion(ix *index, op *writeOp, cur *docEntry) (int64, *esError) {
	switch op.versionType {
	case vtExternal:
		if cur != nil && cur.version >= op.version {
			return 0, errVersionConflict(ix, op.id, fmt.Sprintf("current version [%d] is higher or equal to the one provided [%d]", cur.version, op.version))
		}
		return op.version, nil
	case vtExternalGT:
		if cur != nil && cur.version > op.version {
			return 0, errVersionConflict(ix, op.id, fmt.Sprintf("current version [%d] is higher than the one provided [%d]", cur.version, op.version))
		}
		return op.version, nil
	}
	if cur == nil {
		return 1, nil
	}
	return cur.version + 1, nil
}

// prepareSource parses and maps a document source: raw, or for an update
// (raw nil) parsed, the merged document, encoded. Either way the fields it
// returns are parsed from the source it returns, the document's own copy:
// raw is a slice of the request body (a whole _bulk's), and an update's
// merged fields slice its request and the versions before, which a
// stored document must not keep alive.
func (s *Server) prepareSource(ix *index, id string, raw []byte, parsed map[string]any) (string, map[string]any, []mappingUpdate, *esError) {
	src := string(raw)
	if parsed != nil {
		b, err := marshalJSON(parsed)
		if err != nil {
			return "", nil, nil, errDocParsing("failed to parse: %s", err.Error())
		}
		src = string(b)
	}
	v, err := parseJSONString(src)
	if err != nil {
		return "", nil, nil, errDocParsing("failed to parse: %s", jsonErrText(err))
	}
	parsed, ok := v.(map[string]any)
	if !ok {
		return "", nil, nil, errDocParsing("failed to parse: Malformed content, must start with an object")
	}
	ups, merr := applyDynamic(ix.mapping, parsed, id)
	if merr != nil {
		return "", nil, nil, merr
	}
	if len(ups) > 0 {
		if ups, merr = checkFieldLimit(ix, ups); merr != nil {
			return "", nil, nil, merr
		}
	}
	return src, parsed, ups, nil
}

func (s *Server) doIndex(ix *index, op *writeOp, res *writeResult) {
	raw, parsed, ups, err := s.prepareSource(ix, op.id, op.source, op.parsed)
	if err != nil {
		res.err = err
		return
	}
	cur := ix.docs[op.id]
	exists := cur != nil && !cur.deleted
	if err := s.checkCAS(ix, op, cur); err != nil {
		res.err = err
		return
	}
	if op.action == "create" && exists {
		res.err = errVersionConflict(ix, op.id, fmt.Sprintf("document already exists (current version [%d])", cur.version))
		return
	}
	v, err := nextVersion(ix, op, cur)
	if err != nil {
		res.err = err
		return
	}
	applyUpdates(ix.mapping, ups)
	if len(ups) > 0 {
		s.journalMeta(ix)
	}
	ix.seqNo++
	ix.order++
	e := &docEntry{id: op.id, version: v, seqNo: ix.seqNo, primaryTerm: 1, source: raw, parsed: parsed, order: ix.order}
	ix.publish(e)
	s.journalDoc(ix, e)
	ix.stats.indexTotal++
	res.entry = e
	if exists {
		res.result, res.status = "updated", http.StatusOK
	} else {
		res.result, res.status = "created", http.StatusCreated
	}
}

func (s *Server) doDelete(ix *index, op *writeOp, res *writeResult) {
	cur := ix.docs[op.id]
	exists := cur != nil && !cur.deleted
	if err := s.checkCAS(ix, op, cur); err != nil {
		res.err = err
		return
	}
	v, err := nextVersion(ix, op, cur)
	if err != nil {
		res.err = err
		return
	}
	ix.seqNo++
	e := &docEntry{id: op.id, version: v, seqNo: ix.seqNo, primaryTerm: 1, deleted: true}
	ix.publish(e)
	s.journalDoc(ix, e)
	res.entry = e
	if exists {
		ix.stats.deleteTotal++
		res.result, res.status = "deleted", http.StatusOK
	} else {
		res.result, res.status = "not_found", http.StatusNotFound
	}
}

// mergeDoc deep-merges patch into a copy of base; changed reports whether
// anything differs.
func mergeDoc(base, patch map[string]any) (map[string]any, bool) {
	out := make(map[string]any, len(base)+len(patch))
	for k, v := range base {
		out[k] = v
	}
	changed := false
	for k, pv := range patch {
		bv, ok := out[k]
		pm, pIsMap := pv.(map[string]any)
		bm, bIsMap := bv.(map[string]any)
		if ok && pIsMap && bIsMap {
			merged, ch := mergeDoc(bm, pm)
			out[k] = merged
			changed = changed || ch
			continue
		}
		if !ok || !jsonEqual(bv, pv) {
			changed = true
		}
		out[k] = pv
	}
	return out, changed
}

func (s *Server) doUpdate(ix *index, op *writeOp, res *writeResult) {
	if op.script {
		res.err = errIllegalArgument("scripted updates are not supported by the sluice test server")
		return
	}
	cur := ix.docs[op.id]
	exists := cur != nil && !cur.deleted
	if err := s.checkCAS(ix, op, cur); err != nil {
		res.err = err
		return
	}
	if !exists {
		var src map[string]any
		switch {
		case op.upsert != nil:
			src = op.upsert
		case op.docAsUpsert && op.doc != nil:
			src = op.doc
		default:
			res.err = newErr(http.StatusNotFound, "document_missing_exception", "[%s]: document missing", op.id).
				with("index_uuid", ix.uuid).with("shard", "0").with("index", ix.name)
			return
		}
		iop := *op
		iop.action = "index"
		iop.parsed = src
		iop.source = nil
		s.doIndex(ix, &iop, res)
		return
	}
	merged, changed := mergeDoc(cur.parsed, op.doc)
	if !changed && op.detectNoop {
		ix.stats.noopUpdateTotal++
		res.entry = cur
		res.result, res.status, res.noop = "noop", http.StatusOK, true
		return
	}
	iop := *op
	iop.action = "index"
	iop.parsed = merged
	iop.source = nil
	iop.hasIfSeqNo = false
	s.doIndex(ix, &iop, res)
}

// writeResponse renders the standard document write response.
func writeResponse(res writeResult, forcedRefresh bool) *orderedMap {
	m := newOrderedMap().
		Set("_index", res.index).
		Set("_id", res.id).
		Set("_version", res.entry.version).
		Set("result", res.result)
	if forcedRefresh {
		m.Set("forced_refresh", true)
	}
	if res.noop {
		m.Set("_shards", newOrderedMap().Set("total", 0).Set("successful", 0).Set("failed", 0))
	} else {
		m.Set("_shards", res.ix.writeShards())
	}
	m.Set("_seq_no", res.entry.seqNo).Set("_primary_term", res.entry.primaryTerm)
	return m
}

type refreshMode int

const (
	refreshNone refreshMode = iota
	refreshForce
	refreshWaitFor
)

func parseRefresh(rq *request) (refreshMode, *esError) {
	v, ok := rq.q["refresh"]
	if !ok {
		return refreshNone, nil
	}
	switch v[0] {
	case "", "true":
		return refreshForce, nil
	case "false":
		return refreshNone, nil
	case "wait_for":
		return refreshWaitFor, nil
	}
	return refreshNone, errIllegalArgument("Unknown value for refresh: [%s].", v[0])
}

// opFromParams builds a write op from query parameters.
func opFromParams(rq *request, action, indexName, id string) (*writeOp, *esError) {
	op := &writeOp{action: action, index: indexName, id: id, detectNoop: true}
	vt, err := parseVersionType(rq.param("version_type"))
	if err != nil {
		return nil, err
	}
	op.versionType = vt
	if v := rq.param("version"); v != "" {
		n, ok := toInt(v)
		if !ok {
			return nil, errIllegalArgument("Failed to parse long parameter [version] with value [%s]", v)
		}
		op.hasVersion, op.version = true, n
	}
	if v := rq.param("if_seq_no"); v != "" {
		n, ok := toInt(v)
		if !ok {
			return nil, errIllegalArgument("Failed to parse long parameter [if_seq_no] with value [%s]", v)
		}
		op.hasIfSeqNo, op.ifSeqNo = true, n
	}
	if v := rq.param("if_primary_term"); v != "" {
		n, ok := toInt(v)
		if !ok {
			return nil, errIllegalArgument("Failed to parse long parameter [if_primary_term] with value [%s]", v)
		}
		op.hasIfTerm, op.ifTerm = true, n
	}
	op.pipeline = rq.param("pipeline")
	ra, err := rq.boolParam("require_alias", false)
	if err != nil {
		return nil, err
	}
	op.requireAlias = ra
	return op, nil
}

func (s *Server) handleIndexDoc(rq *request, target, id string, create bool) response {
	refresh, err := parseRefresh(rq)
	if err != nil {
		return errResp(err)
	}
	action := "index"
	if create {
		action = "create"
	}
	switch rq.param("op_type") {
	case "", "index":
	case "create":
		action = "create"
	default:
		return errResp(errIllegalArgument("opType must be 'create' or 'index', found: [%s]", rq.param("op_type")))
	}
	op, err := opFromParams(rq, action, target, id)
	if err != nil {
		return errResp(err)
	}
	if id == "" {
		op.autoID = true
		if rq.param("op_type") == "" {
			op.action = "create"
		}
	}
	if len(bytes.TrimSpace(rq.body)) > 0 {
		op.source = bytes.TrimSpace(rq.body)
	}
	res := s.writeOne(op, refresh)
	if res.err != nil {
		return errResp(res.err)
	}
	return response{res.status, writeResponse(res, refresh == refreshForce)}
}

// writeOne applies a single-document write under the lock and, unless
// refresh is off, refreshes the shard the document lives on.
func (s *Server) writeOne(op *writeOp, refresh refreshMode) writeResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := s.applyWrite(op)
	if res.err == nil && refresh != refreshNone {
		res.ix.refreshShard(res.ix.shardOf(res.id))
	}
	return res
}

func (s *Server) handleDeleteDoc(rq *request, target, id string) response {
	refresh, err := parseRefresh(rq)
	if err != nil {
		return errResp(err)
	}
	op, err := opFromParams(rq, "delete", target, id)
	if err != nil {
		return errResp(err)
	}
	res := s.writeOne(op, refresh)
	if res.err != nil {
		return errResp(res.err)
	}
	return response{res.status, writeResponse(res, refresh == refreshForce)}
}

func (s *Server) handleUpdateDoc(rq *request, target, id string) response {
	refresh, err := parseRefresh(rq)
	if err != nil {
		return errResp(err)
	}
	op, err := opFromParams(rq, "update", target, id)
	if err != nil {
		return errResp(err)
	}
	body, err := decodeObject(rq.body)
	if err != nil {
		return errResp(err)
	}
	if err := parseUpdateBody(op, body); err != nil {
		return errResp(err)
	}
	if f, explicit, _ := sourceFilterFromParams(rq); explicit {
		op.sourceFilter = f
	}
	res := s.writeOne(op, refresh)
	if res.err != nil {
		return errResp(res.err)
	}
	out := writeResponse(res, refresh == refreshForce)
	if op.sourceFilter != nil && !op.sourceFilter.disabled {
		out.Set("get", updateGet(res, op.sourceFilter))
	}
	return response{res.status, out}
}

func updateGet(res writeResult, f *sourceFilter) *orderedMap {
	return newOrderedMap().
		Set("_seq_no", res.entry.seqNo).
		Set("_primary_term", res.entry.primaryTerm).
		Set("found", true).
		Set("_source", f.apply(res.entry.parsed))
}

// parseUpdateBody reads doc, upsert, doc_as_upsert, detect_noop, script
// and _source from an update body.
func parseUpdateBody(op *writeOp, body map[string]any) *esError {
	for k, v := range body {
		switch k {
		case "doc":
			m, ok := v.(map[string]any)
			if !ok {
				return errParsing("[UpdateRequest] doc doesn't support values of type: %s", jsonKind(v))
			}
			op.doc = m
		case "upsert":
			m, ok := v.(map[string]any)
			if !ok {
				return errParsing("[UpdateRequest] upsert doesn't support values of type: %s", jsonKind(v))
			}
			op.upsert = m
		case "doc_as_upsert":
			b, _ := v.(bool)
			op.docAsUpsert = b
		case "detect_noop":
			b, ok := v.(bool)
			if ok {
				op.detectNoop = b
			}
		case "scripted_upsert":
		case "script":
			op.script = true
		case "_source":
			f, err := sourceFilterFromBody(v)
			if err != nil {
				return err
			}
			op.sourceFilter = f
		default:
			return errXContent("[1:2] [UpdateRequest] unknown field [%s]", k)
		}
	}
	return nil
}

// readTarget resolves an index or single-index alias for reads.
func (s *Server) readTarget(name string) (*index, *esError) {
	if ix := s.indices[name]; ix != nil {
		return ix, nil
	}
	al := s.aliasIndices(name)
	switch len(al) {
	case 0:
		return nil, errIndexNotFound(name)
	case 1:
		return s.indices[al[0]], nil
	}
	return nil, errIllegalArgument("alias [%s] has more than one index associated with it [%s], can't execute a single index op", name, strings.Join(al, ", "))
}

// storedFields returns the "fields" section for stored_fields.
func storedFields(ix *index, e *docEntry, names []string) map[string]any {
	out := map[string]any{}
	for _, n := range names {
		if n == "_source" || n == "_none_" || n == "*" {
			continue
		}
		fm, _ := ix.mapping.lookupField(n)
		if fm == nil || !fm.Store {
			continue
		}
		vals := extractValues(e.parsed, n)
		if len(vals) > 0 {
			out[n] = vals
		}
	}
	return out
}

// getBody renders a found document for GET and mget.
func getBody(ix *index, e *docEntry, f *sourceFilter, stored []string, hasStored bool) *orderedMap {
	m := newOrderedMap().
		Set("_index", ix.name).
		Set("_id", e.id).
		Set("_version", e.version).
		Set("_seq_no", e.seqNo).
		Set("_primary_term", e.primaryTerm).
		Set("found", true)
	if hasStored {
		if fs := storedFields(ix, e, stored); len(fs) > 0 {
			m.Set("fields", fs)
		}
	}
	switch {
	case f != nil && f.disabled:
	case f.isNoop():
		m.Set("_source", rawSource(e.source))
	default:
		m.Set("_source", f.apply(e.parsed))
	}
	return m
}

// rawJSON embeds already-encoded JSON.
type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

// rawSource embeds a stored document's source, already-encoded JSON.
type rawSource string

func (r rawSource) MarshalJSON() ([]byte, error) { return []byte(r), nil }

func (s *Server) handleGetDoc(rq *request, target, id string, sourceOnly bool) response {
	f, explicit, err := sourceFilterFromParams(rq)
	if err != nil {
		return errResp(err)
	}
	realtime, err := rq.boolParam("realtime", true)
	if err != nil {
		return errResp(err)
	}
	refresh, err := rq.boolParam("refresh", false)
	if err != nil {
		return errResp(err)
	}
	if _, err := parseVersionType(rq.param("version_type")); err != nil {
		return errResp(err)
	}
	var wantVersion int64
	hasVersion := false
	if v := rq.param("version"); v != "" {
		n, ok := toInt(v)
		if !ok {
			return errResp(errIllegalArgument("Failed to parse long parameter [version] with value [%s]", v))
		}
		wantVersion, hasVersion = n, true
	}
	stored := splitComma(rq.param("stored_fields"))
	hasStored := rq.has("stored_fields")
	if hasStored && !explicit {
		f = &sourceFilter{disabled: true}
		for _, sf := range stored {
			if sf == "_source" {
				f = nil
			}
		}
	}
	if refresh {
		s.mu.Lock()
	} else {
		s.mu.RLock()
	}
	defer func() {
		if refresh {
			s.mu.Unlock()
		} else {
			s.mu.RUnlock()
		}
	}()
	ix, err := s.readTarget(target)
	if err != nil {
		return errResp(err)
	}
	if refresh {
		ix.refresh()
	}
	ix.stats.getTotal.Add(1)
	var e *docEntry
	if realtime {
		e = ix.docs[id]
	} else {
		e = ix.visible[id]
	}
	if e == nil || e.deleted {
		if sourceOnly {
			return errResp(newErr(http.StatusNotFound, "resource_not_found_exception", "Document not found [%s]/[%s]", ix.name, id))
		}
		return response{http.StatusNotFound, newOrderedMap().Set("_index", ix.name).Set("_id", id).Set("found", false)}
	}
	if hasVersion && e.version != wantVersion {
		reason := fmt.Sprintf("current version [%d] is different than the one provided [%d]", e.version, wantVersion)
		return errResp(errVersionConflict(ix, id, reason))
	}
	if sourceOnly {
		if f.isNoop() {
			return response{http.StatusOK, rawSource(e.source)}
		}
		return ok(f.apply(e.parsed))
	}
	return getAnswer(ix, e, f, stored, hasStored)
}

// getAnswer is getBody, rendered directly (appendGetFound) for a document
// with its whole _source and no stored fields.
func getAnswer(ix *index, e *docEntry, f *sourceFilter, stored []string, hasStored bool) response {
	if !hasStored && f.isNoop() {
		return ok(appendGetFound(make([]byte, 0, len(e.source)+128+len(ix.name)+len(e.id)), ix, e))
	}
	return ok(getBody(ix, e, f, stored, hasStored))
}

// handleMget serves _mget: the request's items (mgetRequest), then each
// item read as a GET would (mgetOne), one error or document per item.
func (s *Server) handleMget(rq *request, target string) response {
	items, realtime, err := mgetRequest(rq, target)
	if err != nil {
		return errResp(err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	// The answers are rendered into one buffer as they are read: no map
	// and boxed numbers per document, no second copy at the end.
	out := make([]byte, 0, 64+len(items)*256)
	out = append(out, '[')
	for i, it := range items {
		if i > 0 {
			out = append(out, ',')
		}
		if out, err = s.appendMgetOne(out, it, realtime); err != nil {
			return errResp(err)
		}
	}
	out = append(out, ']')
	return ok(newOrderedMap().Set("docs", rawJSON(out)))
}

// mgetItem is one document an _mget asks for.
type mgetItem struct {
	index, id string
	f         *sourceFilter
	stored    []string
	hasStored bool
}

// mgetRequest reads an _mget body ("docs" objects, or "ids" of the target
// index) and parameters into its items; a missing index or id of any item
// fails the whole request, as Elasticsearch's validation does.
func mgetRequest(rq *request, target string) ([]mgetItem, bool, *esError) {
	body, err := decodeObject(rq.body)
	if err != nil {
		return nil, false, err
	}
	pf, explicit, _ := sourceFilterFromParams(rq)
	if !explicit {
		pf = nil
	}
	realtime, err := rq.boolParam("realtime", true)
	if err != nil {
		return nil, false, err
	}
	var items []mgetItem
	var msgs []string
	if docs, ok := body["docs"]; ok {
		arr, ok := docs.([]any)
		if !ok {
			return nil, false, errParsing("docs array element should include an object")
		}
		for i, d := range arr {
			m, ok := d.(map[string]any)
			if !ok {
				return nil, false, errParsing("docs array element should include an object")
			}
			it, err := mgetDoc(rq, m, target, pf)
			if err != nil {
				return nil, false, err
			}
			if it.index == "" {
				msgs = append(msgs, fmt.Sprintf("index is missing for doc %d", i))
			}
			if it.id == "" {
				msgs = append(msgs, fmt.Sprintf("id is missing for doc %d", i))
			}
			items = append(items, it)
		}
	}
	if ids, ok := body["ids"]; ok {
		arr, ok := ids.([]any)
		if !ok {
			return nil, false, errParsing("ids array element should only contain ids")
		}
		for i, v := range arr {
			id, _ := asString(v)
			if target == "" {
				msgs = append(msgs, fmt.Sprintf("index is missing for doc %d", i))
			}
			items = append(items, mgetItem{index: target, id: id, f: pf})
		}
	}
	for k := range body {
		if k != "docs" && k != "ids" {
			return nil, false, errParsing("unknown parameter [%s] in request body or parameter is of the wrong type[%s] ", k, jsonKind(body[k]))
		}
	}
	if len(items) == 0 {
		msgs = append(msgs, "no documents to get")
	}
	if len(msgs) > 0 {
		return nil, false, errValidation(msgs...)
	}
	return items, realtime, nil
}

// mgetDoc reads one object of an _mget "docs" array: _index (default the
// target), _id, _source and stored_fields (default the parameters').
func mgetDoc(rq *request, m map[string]any, target string, pf *sourceFilter) (mgetItem, *esError) {
	it := mgetItem{index: target, f: pf}
	if v, ok := m["_index"].(string); ok {
		it.index = v
	}
	if v, ok := asString(m["_id"]); ok {
		it.id = v
	}
	if v, ok := m["_source"]; ok {
		f, err := sourceFilterFromBody(v)
		if err != nil {
			return it, err
		}
		it.f = f
	}
	if v, ok := m["stored_fields"]; ok {
		it.stored, _ = stringList(v)
		it.hasStored = true
	} else if rq.has("stored_fields") {
		it.stored, it.hasStored = splitComma(rq.param("stored_fields")), true
	}
	return it, nil
}

// appendMgetOne appends the answer to one item, read under s.mu, to b: a
// found document with its whole _source directly, any other answer as
// mgetOne renders it.
func (s *Server) appendMgetOne(b []byte, it mgetItem, realtime bool) ([]byte, *esError) {
	if !it.hasStored && it.f.isNoop() {
		if ix, err := s.readTarget(it.index); err == nil {
			e := ix.docs[it.id]
			if !realtime {
				e = ix.visible[it.id]
			}
			if e != nil && !e.deleted {
				return appendGetFound(b, ix, e), nil
			}
		}
	}
	b, err := appendJSON(b, s.mgetOne(it, realtime))
	if err != nil {
		return nil, newErr(http.StatusInternalServerError, "exception", "esserver: marshal response: %s", err.Error())
	}
	return b, nil
}

// appendGetFound renders getBody of a found document with its whole
// _source and no stored fields, byte for byte.
func appendGetFound(b []byte, ix *index, e *docEntry) []byte {
	b = append(b, `{"_index":`...)
	b = appendString(b, ix.name)
	b = append(b, `,"_id":`...)
	b = appendString(b, e.id)
	b = append(b, `,"_version":`...)
	b = strconv.AppendInt(b, e.version, 10)
	b = append(b, `,"_seq_no":`...)
	b = strconv.AppendInt(b, e.seqNo, 10)
	b = append(b, `,"_primary_term":`...)
	b = strconv.AppendInt(b, e.primaryTerm, 10)
	b = append(b, `,"found":true,"_source":`...)
	b = append(b, e.source...)
	return append(b, '}')
}

// mgetOne reads one item under s.mu: its document, "found": false, or the
// error of its index.
func (s *Server) mgetOne(it mgetItem, realtime bool) any {
	ix, err := s.readTarget(it.index)
	if err != nil {
		return newOrderedMap().Set("_index", it.index).Set("_id", it.id).Set("error", err.object())
	}
	var e *docEntry
	if realtime {
		e = ix.docs[it.id]
	} else {
		e = ix.visible[it.id]
	}
	if e == nil || e.deleted {
		return newOrderedMap().Set("_index", ix.name).Set("_id", it.id).Set("found", false)
	}
	f := it.f
	if it.hasStored && f == nil {
		f = &sourceFilter{disabled: true}
		for _, sf := range it.stored {
			if sf == "_source" {
				f = nil
			}
		}
	}
	return getBody(ix, e, f, it.stored, it.hasStored)
}
