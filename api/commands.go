package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"

	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Command event types the instance worker consumes (docs/instanceworker.md).
const (
	TypeCreate = "CREATE_INSTANCE"
	TypeUpdate = "UPDATE_INSTANCE"
	TypeDelete = "DELETE_INSTANCE"
)

// commandRequest is one command as parsed from a request (or batch item),
// before it becomes an envelope.
type commandRequest struct {
	eventType string
	db, class string
	// instanceID is the raw id: from the path (update, delete) or the body
	// (create, may be empty).
	instanceID string
	// data is the create's data object or the update's merge patch.
	data        json.RawMessage
	expectedSeq *int64
	// key is the Idempotency-Key, or "" for a fresh command id.
	key string
	// keyField names where key came from, for errors.
	keyField string
}

// Accepted is the 202 reply to a command (and a batch item's success).
type Accepted struct {
	CommandID      string `json:"command_id"`
	EventID        string `json:"event_id"`
	AggregateID    string `json:"aggregate_id"`
	InstanceID     string `json:"instance_id"`
	SequenceNumber int64  `json:"sequence_number"`
	StatusURL      string `json:"status_url"`
}

// EventIDForCommand returns the event_id of the command envelope with this
// command id: the id itself when it is a UUID in canonical lower-case form
// (not the nil UUID), else UUIDv5(envelope.EventNamespace,
// "sluice:command:" + commandID). Distinct command ids get distinct event_ids
// (a client that sends, as a key, the very UUID derived for another key is
// caught by the idempotency check: the command_id differs, so the append
// fails with idempotency_key_reused instead of merging the two).
func EventIDForCommand(commandID string) string {
	if envelope.IsCanonicalUUID(commandID) && commandID != uuid.Nil.String() {
		return commandID
	}
	return uuid.NewSHA1(envelope.Namespace(), []byte("sluice:command:"+commandID)).String()
}

// StatusURL is the path of a command's status resource.
func StatusURL(commandID string) string { return "/v1/commands/" + url.PathEscape(commandID) }

// buildCommand turns a parsed request into the command envelope, checking
// every rule of docs/architecture.md#the-envelope, docs/architecture.md#aggregate-identity and the limits before anything is written.
// The envelope's occurred_at is left to the store, so that a replay with the
// same Idempotency-Key compares equal to the stored command.
func (s *server) buildCommand(r *http.Request, req commandRequest) (envelope.Envelope, *Error) {
	if err := envelope.ValidateDBName(req.db); err != nil {
		return envelope.Envelope{}, validationAs(err, "db")
	}
	if err := envelope.ValidateClassName(req.class); err != nil {
		return envelope.Envelope{}, validationAs(err, "class")
	}
	commandID := req.key
	if commandID == "" {
		commandID = uuid.NewString()
	} else if err := envelope.ValidateCommandID(commandID); err != nil {
		return envelope.Envelope{}, validationAs(err, req.keyField)
	} else if p := "/v1/commands/" + commandID; path.Clean(p) != p {
		// The router cleans the path before it routes (a "/" at either
		// end, "//", "." and ".." segments): the command's status resource
		// could not be read, so the key is refused before anything is
		// written.
		return envelope.Envelope{}, unprocessable(req.keyField, "%s %q cannot name a status resource: no '/' at its start or end, no '//', and no '.' or '..' between slashes", req.keyField, commandID)
	}
	instanceID := req.instanceID
	var data []byte
	var err error
	switch req.eventType {
	case TypeCreate:
		if instanceID, err = s.resolveInstanceID(req, commandID); err != nil {
			return envelope.Envelope{}, asError(err)
		}
	}
	aggID, err := envelope.InstanceAggregateID(req.db, req.class, instanceID)
	if err != nil {
		return envelope.Envelope{}, validationAs(err, "instance_id")
	}
	// Data keys the instance document cannot hold are refused here, by
	// the rule the instance worker decides with (issue 26.3), instead of
	// a 202 and a command that can never be applied.
	switch {
	case req.eventType == TypeCreate && req.data != nil:
		err = readmodel.ValidateData(req.data)
	case req.eventType == TypeUpdate:
		err = readmodel.ValidateMergePatch(req.data)
	}
	if err != nil {
		return envelope.Envelope{}, fromDataError(err)
	}
	_, _, instanceID, _ = envelope.ParseInstanceAggregateID(aggID)
	switch req.eventType {
	case TypeCreate:
		d := req.data
		if d == nil {
			d = json.RawMessage(`{}`)
		}
		data, err = marshalNoEscape(struct {
			DB         string          `json:"db"`
			Class      string          `json:"class"`
			InstanceID string          `json:"instance_id"`
			Data       json.RawMessage `json:"data"`
		}{req.db, req.class, instanceID, d})
	case TypeUpdate:
		data, err = marshalNoEscape(struct {
			Data json.RawMessage `json:"data"`
		}{req.data})
	default:
		data = []byte(`{}`)
	}
	if err != nil {
		return envelope.Envelope{}, newError(http.StatusBadRequest, CodeMalformedJSON, "data", "data cannot be encoded: %v", err)
	}
	env := envelope.Envelope{
		EventID:       EventIDForCommand(commandID),
		EventType:     req.eventType,
		Kind:          envelope.KindCommand,
		AggregateType: envelope.AggregateTypeInstance,
		AggregateID:   aggID,
		ExpectedSeq:   req.expectedSeq,
		Data:          data,
	}
	env.Metadata.SetString(envelope.MetaCommandID, commandID)
	// Transport metadata (left out of the idempotency comparison).
	s.setTraceMetadata(r, &env.Metadata)
	if v := r.Header.Get("X-Request-Id"); v != "" && len(v) <= 200 && printableASCII(v) {
		env.Metadata.SetString(envelope.MetaRequestID, v)
	}
	stampPrincipal(r, &env.Metadata)
	norm, err := envelope.Normalize(env)
	if err == nil {
		// data wraps the request's data, which its scan (scanObject, one
		// level less deep than the limit) checked as Validate would.
		err = envelope.ValidateBuiltData(norm, s.opts.Limits)
	}
	if err != nil {
		return envelope.Envelope{}, validationAs(err, "")
	}
	if req.eventType == TypeCreate {
		if err := s.checkCreatedEvent(norm, commandID, req.data); err != nil {
			return envelope.Envelope{}, validationAs(err, "data")
		}
	}
	return norm, nil
}

// checkCreatedEvent refuses a create whose domain event the store would
// refuse (the one size budget): the INSTANCE_CREATED event carries the
// whole state and its own metadata, so a command just under the envelope
// limit can yield an event over it. Built by the instance worker's own
// function (envelope.DomainEventFor) and measured as the store measures
// (envelope.CheckStoredSize), it is refused here with 413 instead of a 202
// and a command that can never be applied. A patch's resulting state is
// known only to the worker, which rejects it with the reason.
func (s *server) checkCreatedEvent(cmd envelope.Envelope, commandID string, data json.RawMessage) error {
	// The domain event holds the command's strings and metadata (a subset
	// of them), a data no longer than the command's (which wraps it), and
	// adds its event type and id and the correlation and causation
	// members: when the command's bound (envelope.EncodedBound) plus as
	// much for those is under the limit, the event cannot exceed it, and
	// neither it nor its encoding need be built — a create far under the
	// limit, the usual one, is not encoded twice more here.
	added := len(TypeCreated) + len(cmd.EventID) + len(envelope.MetaCorrelationID) + len(commandID) +
		len(envelope.MetaCausationID) + len(cmd.EventID) + 6
	if envelope.EncodedBound(cmd)+6*added <= s.opts.Limits.MaxEnvelopeBytes {
		return nil
	}
	if data == nil {
		data = json.RawMessage(`{}`)
	}
	var compact bytes.Buffer
	if json.Compact(&compact, data) == nil {
		data = compact.Bytes() // as the command stores it
	}
	if cmd.OccurredAt.IsZero() {
		cmd.OccurredAt = envelope.NewTimestamp(time.Now()) // the store sets it; same width
	}
	return envelope.CheckStoredSize(envelope.DomainEventFor(cmd, commandID, TypeCreated, data), s.opts.Limits.MaxEnvelopeBytes)
}

// resolveInstanceID picks a create's instance id (docs/instanceworker.md): the request's
// instance_id, else data["{class}_id"] (a string, or a number's literal),
// else the id derived from the command id. If both the request and the data
// name one, they must agree.
func (s *server) resolveInstanceID(req commandRequest, commandID string) (string, error) {
	field := req.class + "_id"
	var fromData string
	if req.data != nil {
		v, err := topMember(req.data, field)
		if err != nil {
			return "", unprocessable("data", "must be a JSON object")
		}
		if v != nil && !isNull(v) {
			switch {
			case v[0] == '"':
				u, _ := jsontext.AppendUnquote(nil, v)
				fromData = string(u)
			case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
				fromData = string(v)
			default:
				return "", unprocessable("data."+field, "the instance id field %q must be a string or a number", field)
			}
		}
	}
	switch {
	case req.instanceID != "" && fromData != "":
		a, errA := envelope.NormalizeAggregateID(req.instanceID)
		b, errB := envelope.NormalizeAggregateID(fromData)
		if errA == nil && errB == nil && a != b {
			return "", unprocessable("instance_id", "instance_id %q and data.%s %q name different instances", req.instanceID, field, fromData)
		}
		return req.instanceID, nil
	case req.instanceID != "":
		return req.instanceID, nil
	case fromData != "":
		return fromData, nil
	default:
		return envelope.InstanceIDFromCommand(commandID).String(), nil
	}
}

// topMember returns the value of the JSON object data's top-level member
// name (nil when it has none), reading only the top level's names: the
// request's scan (scanObject) checked the whole object already (one object,
// valid text, no duplicate key), so this skips the other members' values
// instead of decoding data into a map.
func topMember(data []byte, name string) (json.RawMessage, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(data), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, errors.New("not a JSON object")
	}
	for dec.PeekKind() == '"' {
		k, err := dec.ReadValue()
		if err != nil {
			return nil, err
		}
		match := len(k) == len(name)+2 && string(k[1:len(k)-1]) == name
		if !match && bytes.IndexByte(k, '\\') >= 0 {
			u, err := jsontext.AppendUnquote(nil, k)
			match = err == nil && string(u) == name
		}
		if !match {
			if err := dec.SkipValue(); err != nil {
				return nil, err
			}
			continue
		}
		v, err := dec.ReadValue()
		if err != nil {
			return nil, err
		}
		return json.RawMessage(v.Clone()), nil
	}
	return nil, nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// marshalNoEscape encodes v as every reply body is: envelope.EncodeJSON.
func marshalNoEscape(v any) ([]byte, error) { return envelope.EncodeJSON(v) }

// fromDataError maps a readmodel.DataError to 422 invalid_data_key naming
// the key's path (data.a.b) and the rule.
func fromDataError(err error) *Error {
	var de *readmodel.DataError
	if !errors.As(err, &de) {
		return asError(err)
	}
	if de.Rule == readmodel.RuleNotObject {
		return unprocessable("data", "data %s", de.Reason)
	}
	return &Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalidDataKey, Field: de.Path(), Limit: de.Rule,
		Message: fmt.Sprintf("data key %q cannot be stored in the instance's read model: %s", de.Key, de.Reason)}
}

// validationAs maps an envelope validation error, naming field when given.
func validationAs(err error, field string) *Error {
	var ve *envelope.ValidationError
	if errors.As(err, &ve) {
		return fromValidation(ve, field)
	}
	return asError(err)
}

func asError(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	return unprocessable("", "%v", err)
}

// accepted builds the 202 body from the stored command.
func accepted(ev eventstore.Event) Accepted {
	e := ev.Envelope
	_, _, iid, _ := envelope.ParseInstanceAggregateID(e.AggregateID)
	cid := e.Metadata.CommandID()
	return Accepted{CommandID: cid, EventID: e.EventID, AggregateID: e.AggregateID, InstanceID: iid,
		SequenceNumber: e.SequenceNumber, StatusURL: StatusURL(cid)}
}

// submit appends one command and replies.
func (s *server) submit(w http.ResponseWriter, r *http.Request, req commandRequest) {
	env, e := s.buildCommand(r, req)
	if e == nil {
		e = checkAggregate(r, auth.OpCommand, env)
	}
	if e != nil {
		s.metrics.command(req.eventType, "invalid")
		s.fail(w, r, e)
		return
	}
	res, err := s.traceAppend(r.Context(), env)
	if err == nil && len(res) == 1 {
		err = res[0].Err
	}
	commandID := env.Metadata.CommandID()
	if err != nil {
		ae := fromAppend(err, commandID)
		if ae.Code == CodeConflict && !r.URL.Query().Has("expected_seq") && len(r.Header.Values("If-Match")) > 0 {
			// The precondition came as If-Match: name it, not a
			// query parameter the request does not have.
			ae.Field = "If-Match"
			ae.Message = strings.Replace(ae.Message, "expected_seq", "If-Match", 1)
		}
		s.metrics.command(req.eventType, resultLabel(ae))
		s.fail(w, r, ae)
		return
	}
	body := accepted(res[0].Event)
	if res[0].Duplicate {
		w.Header().Set("Idempotent-Replayed", "true")
		s.metrics.command(req.eventType, "replayed")
	} else {
		s.metrics.command(req.eventType, "accepted")
	}
	w.Header().Set("Location", body.StatusURL)
	writeJSON(w, http.StatusAccepted, body)
}

func resultLabel(e *Error) string {
	switch e.Code {
	case CodeConflict, CodeSlotConflict:
		return "conflict"
	case CodeIdempotencyKeyReused:
		return "reused_key"
	case CodeUnavailable:
		return "unavailable"
	default:
		return "invalid"
	}
}

// pathValue returns a path wildcard, percent-decoded by the router.
func pathValue(r *http.Request, name string) string { return r.PathValue(name) }

// commonRequest reads what every single command shares: db, class,
// expected_seq and the Idempotency-Key.
func commonRequest(r *http.Request, eventType string) (commandRequest, *Error) {
	req := commandRequest{eventType: eventType, db: pathValue(r, "db"), class: pathValue(r, "class"), keyField: "Idempotency-Key"}
	if vals := r.Header.Values("Idempotency-Key"); len(vals) > 0 {
		if len(vals) != 1 {
			return req, unprocessable("Idempotency-Key", "Idempotency-Key must be given once")
		}
		req.key = vals[0]
		if err := envelope.CheckText(req.key, "Idempotency-Key"); err != nil {
			return req, validationAs(err, "Idempotency-Key")
		}
		if req.key == "" {
			return req, unprocessable("Idempotency-Key", "Idempotency-Key must not be empty (it must match %s)", envelope.CommandIDPattern)
		}
	}
	seq, e := expectedSeq(r)
	if e != nil {
		return req, e
	}
	req.expectedSeq = seq
	return req, nil
}

// handleCreate serves POST /v1/dbs/{db}/classes/{class}/instances.
func (s *server) handleCreate(w http.ResponseWriter, r *http.Request) {
	req, e := commonRequest(r, TypeCreate)
	if e == nil {
		e = checkMediaType(r, mediaJSON)
	}
	var b []byte
	if e == nil {
		b, e = readBody(w, r, s.opts.MaxBodyBytes)
	}
	if e == nil {
		e = s.parseCreate(b, &req)
	}
	if e != nil {
		s.metrics.command(TypeCreate, "invalid")
		s.fail(w, r, e)
		return
	}
	s.submit(w, r, req)
}

// parseCreate reads a create body {"instance_id"?: string, "data"?: object}.
func (s *server) parseCreate(b []byte, req *commandRequest) *Error {
	members, order, e := scanBody(b, depthRule{offset: 1, maxData: s.maxUserDepth()})
	if e != nil {
		return e
	}
	if e := onlyFields(order, "instance_id", "data"); e != nil {
		return e
	}
	if v, ok := members["instance_id"]; ok && !isNull(v) {
		id, e := stringMember(v, "instance_id")
		if e != nil {
			return e
		}
		if id == "" {
			return unprocessable("instance_id", "must not be empty (omit it to derive the id)")
		}
		req.instanceID = id
	}
	if v, ok := members["data"]; ok && !isNull(v) {
		if !isObject(v) {
			return unprocessable("data", "must be a JSON object")
		}
		req.data = v
	}
	return nil
}

// maxUserDepth is the deepest a client's data object may nest: the
// command's data wraps it one level deeper, and the store limits that.
func (s *server) maxUserDepth() int { return s.opts.Limits.MaxDataDepth - 1 }

// handleUpdate serves PATCH …/instances/{id}: a JSON Merge Patch (RFC 7386).
func (s *server) handleUpdate(w http.ResponseWriter, r *http.Request) {
	req, e := commonRequest(r, TypeUpdate)
	req.instanceID = pathValue(r, "id")
	if e == nil {
		e = checkMediaType(r, mediaMergePatch, mediaJSON)
	}
	var b []byte
	if e == nil {
		b, e = readBody(w, r, s.opts.MaxBodyBytes)
	}
	if e == nil {
		_, _, e = scanObject(b, depthRule{offset: 0, maxData: s.maxUserDepth()}, "data")
	}
	if e != nil {
		s.metrics.command(TypeUpdate, "invalid")
		s.fail(w, r, e)
		return
	}
	req.data = bytes.TrimSpace(b)
	s.submit(w, r, req)
}

// handleDelete serves DELETE …/instances/{id}; it takes no body.
func (s *server) handleDelete(w http.ResponseWriter, r *http.Request) {
	req, e := commonRequest(r, TypeDelete)
	req.instanceID = pathValue(r, "id")
	if e == nil {
		var b []byte
		b, e = readBody(w, r, s.opts.MaxBodyBytes)
		if e == nil && len(bytes.TrimSpace(b)) > 0 {
			e = newError(http.StatusBadRequest, CodeUnexpectedBody, fieldBody, "DELETE takes no body")
		}
	}
	if e != nil {
		s.metrics.command(TypeDelete, "invalid")
		s.fail(w, r, e)
		return
	}
	s.submit(w, r, req)
}

// BatchItemResult is one item's result in a batch reply: {"index",
// "status"} followed by the members of Accepted (status 202) or of the
// Error body.
type BatchItemResult struct {
	Index    int
	Status   int
	Accepted *Accepted
	Error    *Error
}

// MarshalJSON flattens the result into one object.
func (b BatchItemResult) MarshalJSON() ([]byte, error) {
	var inner []byte
	var err error
	if b.Accepted != nil {
		inner, err = marshalNoEscape(b.Accepted)
	} else {
		inner, err = marshalNoEscape(b.Error)
	}
	if err != nil {
		return nil, err
	}
	out := []byte(`{"index":` + strconv.Itoa(b.Index))
	if b.Error == nil {
		// An error's problem document carries its own "status".
		out = append(out, `,"status":`+strconv.Itoa(b.Status)...)
	}
	if len(inner) > 2 {
		out = append(out, ',')
	}
	return append(out, inner[1:]...), nil
}

// BatchReply is the 207 body of a batch.
type BatchReply struct {
	Results  []BatchItemResult `json:"results"`
	Accepted int               `json:"accepted"`
	Failed   int               `json:"failed"`
}

// handleBatch serves POST …/instances:batch: {"items": [item, …]} where an
// item is {"op": "create"|"update"|"delete", "instance_id", "data",
// "expected_seq", "idempotency_key"}. The items are appended together (one
// group commit) and each succeeds or fails alone; the reply is 207 with one
// result per item, in order.
func (s *server) handleBatch(w http.ResponseWriter, r *http.Request) {
	items, batchKey, e := s.readBatch(w, r)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	reply := BatchReply{Results: make([]BatchItemResult, len(items))}
	envs, slots := s.buildBatch(r, items, batchKey, reply.Results)
	if len(envs) > 0 {
		s.appendBatch(r, envs, slots, reply.Results)
	}
	for _, it := range reply.Results {
		if it.Status == http.StatusAccepted {
			reply.Accepted++
		} else {
			reply.Failed++
		}
	}
	writeJSON(w, http.StatusMultiStatus, reply)
}

// readBatch checks a batch request as a whole (media type, no batch-wide
// expected_seq, the Idempotency-Key, the body's form and item count) and
// returns its items, not yet parsed, and the batch's key.
func (s *server) readBatch(w http.ResponseWriter, r *http.Request) ([]json.RawMessage, string, *Error) {
	e := checkMediaType(r, mediaJSON)
	var b []byte
	if e == nil {
		if len(r.Header.Values("If-Match")) > 0 || r.URL.Query().Has("expected_seq") {
			e = badParam("expected_seq", "a batch takes expected_seq per item, not as a query parameter or If-Match")
		}
	}
	batchKey := r.Header.Get("Idempotency-Key")
	if e == nil {
		if err := envelope.CheckText(batchKey, "Idempotency-Key"); err != nil {
			e = validationAs(err, "Idempotency-Key")
		}
	}
	if e == nil && batchKey != "" {
		// Item i without its own key gets "{key}.{i}": a retried batch
		// replays item by item.
		if err := envelope.ValidateCommandID(batchKey + "." + strconv.Itoa(s.opts.MaxBatchItems)); err != nil {
			e = validationAs(err, "Idempotency-Key")
		}
	}
	if e == nil {
		b, e = readBody(w, r, s.opts.MaxBatchBodyBytes)
	}
	var members map[string]json.RawMessage
	var order []string
	if e == nil {
		// Items are checked one by one below; the whole body only for
		// well-formedness and a generous depth.
		members, order, e = scanBody(b, depthRule{offset: 3, maxData: s.maxUserDepth() + 16})
	}
	if e == nil {
		e = onlyFields(order, "items")
	}
	var items []json.RawMessage
	if e == nil {
		v, ok := members["items"]
		if !ok || len(v) == 0 || v[0] != '[' || json.Unmarshal(v, &items) != nil {
			e = unprocessable("items", "items must be a JSON array of command objects")
		}
	}
	if e == nil && len(items) == 0 {
		e = unprocessable("items", "items must not be empty")
	}
	if e == nil && len(items) > s.opts.MaxBatchItems {
		e = newError(http.StatusRequestEntityTooLarge, CodeLimitExceeded, "items", "a batch holds at most %d items, got %d", s.opts.MaxBatchItems, len(items))
		e.Limit = strconv.Itoa(s.opts.MaxBatchItems) + " items"
	}
	return items, batchKey, e
}

// buildBatch parses and builds each item's command: an item that fails
// gets its error in results; the others are returned with their indices,
// to be appended together.
func (s *server) buildBatch(r *http.Request, items []json.RawMessage, batchKey string, results []BatchItemResult) ([]envelope.Envelope, []batchSlot) {
	db, class := pathValue(r, "db"), pathValue(r, "class")
	var envs []envelope.Envelope
	var slots []batchSlot
	for i, raw := range items {
		req, ie := s.parseBatchItem(raw, db, class, i)
		if ie == nil && req.key == "" && batchKey != "" {
			req.key, req.keyField = batchKey+"."+strconv.Itoa(i), "Idempotency-Key"
		}
		var env envelope.Envelope
		if ie == nil {
			env, ie = s.buildCommand(r, req)
		}
		if ie == nil {
			ie = checkAggregate(r, auth.OpCommand, env)
		}
		if ie != nil {
			s.metrics.command(req.eventType, "invalid")
			results[i] = BatchItemResult{Index: i, Status: ie.Status, Error: ie}
			continue
		}
		envs = append(envs, env)
		slots = append(slots, batchSlot{index: i, keyField: req.keyField})
	}
	return envs, slots
}

// batchSlot is where a built command of a batch came from: its item's
// index, and where its command id came from (the item's idempotency_key,
// or the request's Idempotency-Key), for the item's errors.
type batchSlot struct {
	index    int
	keyField string
}

// appendBatch appends the built commands in one group commit and writes
// each one's outcome into results at its index (slots).
func (s *server) appendBatch(r *http.Request, envs []envelope.Envelope, slots []batchSlot, results []BatchItemResult) {
	res, err := s.traceAppend(r.Context(), envs...)
	for j, env := range envs {
		i := slots[j].index
		ierr := err
		if ierr == nil {
			ierr = res[j].Err
		}
		if ierr != nil {
			ae := fromAppend(ierr, env.Metadata.CommandID())
			if ae.Code == CodeIdempotencyKeyReused && slots[j].keyField != ae.Field {
				// The item's own key was reused: name the item's
				// field, not a header the request may not have sent.
				ae.Message = strings.Replace(ae.Message, ae.Field, slots[j].keyField, 1)
				ae.Field = slots[j].keyField
			}
			if ae.Status >= 500 {
				s.log.Error("api: batch item failed", "index", i, "status", ae.Status, "err", ae.cause)
			}
			s.metrics.command(env.EventType, resultLabel(ae))
			results[i] = BatchItemResult{Index: i, Status: ae.Status, Error: ae}
			continue
		}
		a := accepted(res[j].Event)
		label := "accepted"
		if res[j].Duplicate {
			label = "replayed"
		}
		s.metrics.command(env.EventType, label)
		results[i] = BatchItemResult{Index: i, Status: http.StatusAccepted, Accepted: &a}
	}
}

// parseBatchItem reads one batch item, items[index]. A refusal of the
// item as a whole (not an object, malformed) names it: items[index].
func (s *server) parseBatchItem(raw json.RawMessage, db, class string, index int) (commandRequest, *Error) {
	req := commandRequest{db: db, class: class, keyField: "idempotency_key"}
	members, order, e := scanObject(raw, depthRule{offset: 1, maxData: s.maxUserDepth()}, "")
	if e != nil {
		if e.Field == "" {
			e.Field = "items[" + strconv.Itoa(index) + "]"
		}
		return req, e
	}
	if e := onlyFields(order, "op", "instance_id", "data", "expected_seq", "idempotency_key"); e != nil {
		return req, e
	}
	opRaw, ok := members["op"]
	if !ok {
		return req, unprocessable("op", `op is required: "create", "update" or "delete"`)
	}
	op, e := stringMember(opRaw, "op")
	if e != nil {
		return req, e
	}
	switch op {
	case "create":
		req.eventType = TypeCreate
	case "update":
		req.eventType = TypeUpdate
	case "delete":
		req.eventType = TypeDelete
	default:
		return req, unprocessable("op", `op must be "create", "update" or "delete", got %q`, op)
	}
	if v, ok := members["idempotency_key"]; ok && !isNull(v) {
		k, e := stringMember(v, "idempotency_key")
		if e != nil {
			return req, e
		}
		if k == "" {
			return req, unprocessable("idempotency_key", "must not be empty")
		}
		req.key = k
	}
	if v, ok := members["expected_seq"]; ok && !isNull(v) {
		n, ok := parseSeq(strings.TrimSpace(string(v)))
		if !ok {
			return req, unprocessable("expected_seq", "must be an integer >= 0")
		}
		req.expectedSeq = &n
	}
	var id string
	if v, ok := members["instance_id"]; ok && !isNull(v) {
		if id, e = stringMember(v, "instance_id"); e != nil {
			return req, e
		}
		if id == "" {
			return req, unprocessable("instance_id", "must not be empty")
		}
	}
	data, hasData := members["data"]
	if hasData && isNull(data) {
		hasData = false
	}
	if hasData && !isObject(data) {
		return req, unprocessable("data", "must be a JSON object")
	}
	switch req.eventType {
	case TypeCreate:
		req.instanceID = id
		if hasData {
			req.data = data
		}
	case TypeUpdate:
		if id == "" {
			return req, unprocessable("instance_id", "instance_id is required for update")
		}
		if !hasData {
			return req, unprocessable("data", "data (the merge patch) is required for update")
		}
		req.instanceID, req.data = id, data
	case TypeDelete:
		if id == "" {
			return req, unprocessable("instance_id", "instance_id is required for delete")
		}
		if hasData {
			return req, unprocessable("data", "delete takes no data")
		}
		req.instanceID = id
	}
	return req, nil
}
