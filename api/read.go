package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Command statuses (GET /v1/commands/{command_id}).
const (
	StatusPending    = "PENDING"
	StatusProcessing = "PROCESSING"
	StatusApplied    = "APPLIED"
	StatusRejected   = "REJECTED"
	StatusFailed     = "FAILED"
	StatusDead       = "DEAD"
)

// Domain event types of instances (docs/instanceworker.md) the read side folds.
const (
	TypeCreated = "INSTANCE_CREATED"
	TypeUpdated = "INSTANCE_UPDATED"
	TypeDeleted = "INSTANCE_DELETED"
)

// CommandStatus is the body of GET /v1/commands/{command_id}.
type CommandStatus struct {
	CommandID      string     `json:"command_id"`
	EventID        string     `json:"event_id"`
	Status         string     `json:"status"`
	Reason         string     `json:"reason,omitempty"`
	EventType      string     `json:"event_type"`
	AggregateID    string     `json:"aggregate_id"`
	InstanceID     string     `json:"instance_id,omitempty"`
	SequenceNumber int64      `json:"sequence_number"`
	Attempts       int        `json:"attempts,omitempty"`
	NextAttemptAt  *time.Time `json:"next_attempt_at,omitempty"`
	ProcessedAt    *time.Time `json:"processed_at,omitempty"`
	// ReadModel is "stale" for an APPLIED command whose domain event is
	// stored but whose instance document could not be written (Reason says
	// why): the read model is out of date until repaired.
	ReadModel string `json:"read_model,omitempty"`
}

// ReadModelStale is CommandStatus.ReadModel of an applied command whose
// document is out of date.
const ReadModelStale = "stale"

// handleCommandStatus serves GET /v1/commands/{command_id}: the command must
// be in the event store (else 404); its status is the instance worker's
// registry row for the command's event_id (no row yet: PENDING).
func (s *server) handleCommandStatus(w http.ResponseWriter, r *http.Request) {
	commandID := pathValue(r, "command_id")
	if err := envelope.ValidateCommandID(commandID); err != nil {
		s.fail(w, r, validationAs(err, "command_id"))
		return
	}
	eventID := EventIDForCommand(commandID)
	ev, err := s.opts.Store.ByEventID(r.Context(), eventID)
	if errors.Is(err, eventstore.ErrNotFound) || (err == nil && (ev.Envelope.Kind != envelope.KindCommand || ev.Envelope.Metadata.CommandID() != commandID ||
		// Another tenant's command is as unknown as a missing one.
		!mayRead(principalOf(r), auth.OpRead, ev) && !mayRead(principalOf(r), auth.OpCommand, ev))) {
		s.fail(w, r, newError(http.StatusNotFound, CodeCommandNotFound, "command_id", "no command with id %q", commandID))
		return
	}
	if err != nil {
		s.fail(w, r, fromRead(err))
		return
	}
	rows, err := s.opts.Registry.Get(r.Context(), eventID)
	if err != nil {
		s.fail(w, r, fromRead(err))
		return
	}
	e := ev.Envelope
	_, _, iid, _ := envelope.ParseInstanceAggregateID(e.AggregateID)
	st := CommandStatus{CommandID: commandID, EventID: eventID, Status: StatusPending, EventType: e.EventType,
		AggregateID: e.AggregateID, InstanceID: iid, SequenceNumber: e.SequenceNumber}
	for _, row := range rows {
		if row.Handler == s.opts.Handler {
			applyRow(&st, row)
			break
		}
	}
	writeJSON(w, http.StatusOK, st)
}

// applyRow maps a registry row to the command's status:
// processing → PROCESSING; failed (backing off, will retry) → FAILED with
// the last error; dead → DEAD; done → APPLIED (outcome applied or conflict,
// i.e. newer state already there; read_model "stale" when the applied
// outcome says the document could not be written) or REJECTED (rejected,
// or ignored);
// skipped_stale → REJECTED (its slot was already finished without it).
func applyRow(st *CommandStatus, row claim.Row) {
	st.Attempts = row.Attempts
	if !row.ProcessedAt.IsZero() {
		t := row.ProcessedAt.UTC()
		st.ProcessedAt = &t
	}
	switch row.Status {
	case claim.StatusProcessing:
		st.Status = StatusProcessing
	case claim.StatusFailed:
		st.Status = StatusFailed
		st.Reason = row.LastError
		if !row.NextAttemptAt.IsZero() {
			t := row.NextAttemptAt.UTC()
			st.NextAttemptAt = &t
		}
	case claim.StatusDead:
		st.Status = StatusDead
		st.Reason = row.LastError
	case claim.StatusSkippedStale:
		st.Status = StatusRejected
		st.Reason = "skipped: the instance's slot was already finished (stale)"
	case claim.StatusDone:
		st.Status = StatusApplied
		if row.Outcome != nil {
			switch row.Outcome.Result {
			case claim.OutcomeRejected:
				st.Status = StatusRejected
				st.Reason = row.Outcome.Reason
			case claim.OutcomeIgnored:
				st.Status = StatusRejected
				st.Reason = "ignored by the instance worker"
				if row.Outcome.Reason != "" {
					st.Reason += ": " + row.Outcome.Reason
				}
			default:
				st.Reason = row.Outcome.Reason
				if row.Outcome.Result == claim.OutcomeApplied && readmodel.IsStaleReason(row.Outcome.Reason) {
					st.ReadModel = ReadModelStale
				}
			}
		}
	}
}

// Instance is the body of GET …/instances/{id}: the state folded from the
// event store (read-your-writes: the store, not Elasticsearch).
type Instance struct {
	AggregateID string `json:"aggregate_id"`
	DB          string `json:"db"`
	Class       string `json:"class"`
	InstanceID  string `json:"instance_id"`
	// SequenceNumber is the instance's last sequence: the value to send as
	// expected_seq (and the ETag). It counts every slot, including commands
	// still pending or rejected.
	SequenceNumber int64 `json:"sequence_number"`
	// StateSequenceNumber is the slot of the domain event Data comes from.
	StateSequenceNumber int64           `json:"state_sequence_number"`
	Data                json.RawMessage `json:"data"`
	UpdatedAt           string          `json:"updated_at,omitempty"`
	// PendingCommands counts commands after the state that the instance
	// worker has not finished yet.
	PendingCommands int `json:"pending_commands"`
}

// instancePath reads db, class and id from the path and returns the
// normalised aggregate id.
func instancePath(r *http.Request) (db, class, id, aggID string, e *Error) {
	db, class, id = pathValue(r, "db"), pathValue(r, "class"), pathValue(r, "id")
	if err := envelope.ValidateDBName(db); err != nil {
		return "", "", "", "", validationAs(err, "db")
	}
	if err := envelope.ValidateClassName(class); err != nil {
		return "", "", "", "", validationAs(err, "class")
	}
	aggID, err := envelope.InstanceAggregateID(db, class, id)
	if err != nil {
		return "", "", "", "", validationAs(err, "instance_id")
	}
	_, _, id, _ = envelope.ParseInstanceAggregateID(aggID)
	return db, class, id, aggID, nil
}

// folded is what folding an instance's stream found.
type folded struct {
	head    int64             // the aggregate's last sequence
	latest  *eventstore.Event // the latest domain event, if any
	pending int               // unfinished commands after it
}

// fold reads an instance's current state. It reads the tail of the stream
// from the instance worker's last finished slot on (usually one or two
// events) and, only when that tail holds no domain event, earlier windows of
// domain events backwards until it finds one.
func (s *server) fold(r *http.Request, aggID string) (folded, *Error) {
	ctx := r.Context()
	var f folded
	head, err := s.opts.Sequences.LastSequence(ctx, envelope.AggregateTypeInstance, aggID)
	if err != nil {
		return f, fromRead(err)
	}
	f.head = head
	if head == 0 {
		return f, nil
	}
	// The registry keys aggregates as the worker runtime does
	// (envelope.AggregateKey: "Instance:" + the aggregate id).
	last, err := s.opts.Registry.LastSequence(ctx, s.opts.Handler, envelope.AggregateKey(envelope.AggregateTypeInstance, aggID))
	if err != nil {
		return f, fromRead(err)
	}
	from := max(last, 1)
	tail, err := s.opts.Store.Stream(ctx, envelope.AggregateTypeInstance, aggID, from, 0, "")
	if err != nil {
		return f, fromRead(err)
	}
	domainAt := map[int64]bool{}
	for i := range tail {
		if tail[i].Envelope.Kind == envelope.KindDomain {
			domainAt[tail[i].Envelope.SequenceNumber] = true
			f.latest = &tail[i]
		}
	}
	for _, ev := range tail {
		if ev.Envelope.Kind == envelope.KindCommand && ev.Envelope.SequenceNumber > last && !domainAt[ev.Envelope.SequenceNumber] {
			f.pending++
		}
	}
	for hi, window := from-1, int64(64); f.latest == nil && hi >= 1; window = min(window*2, 1<<16) {
		lo := max(hi-window+1, 1)
		evs, err := s.opts.Store.Stream(ctx, envelope.AggregateTypeInstance, aggID, lo, hi, envelope.KindDomain)
		if err != nil {
			return f, fromRead(err)
		}
		if n := len(evs); n > 0 {
			f.latest = &evs[n-1]
		}
		hi = lo - 1
	}
	return f, nil
}

// handleGetInstance serves GET …/instances/{id}. A missing instance is 404
// instance_not_found, a deleted one 404 instance_deleted; both carry the
// sequence_number to use as expected_seq and the pending command count, so
// a client that just sent a create sees it is on its way.
func (s *server) handleGetInstance(w http.ResponseWriter, r *http.Request) {
	db, class, id, aggID, e := instancePath(r)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	f, e := s.fold(r, aggID)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	head, pending := f.head, f.pending
	if f.latest == nil || f.latest.Envelope.EventType == TypeDeleted {
		e := newError(http.StatusNotFound, CodeInstanceNotFound, "instance_id", "no instance %q in %s/%s", id, db, class)
		if f.latest != nil {
			e = newError(http.StatusNotFound, CodeInstanceDeleted, "instance_id", "instance %q in %s/%s was deleted at sequence %d", id, db, class, f.latest.Envelope.SequenceNumber)
		}
		if pending > 0 {
			e.Message += "; " + strconv.Itoa(pending) + " command(s) pending"
		}
		e.SequenceNumber, e.PendingCommands = &head, &pending
		if head > 0 {
			w.Header().Set("ETag", etag(head))
		}
		s.fail(w, r, e)
		return
	}
	ev := f.latest.Envelope
	w.Header().Set("ETag", etag(head))
	writeJSON(w, http.StatusOK, Instance{AggregateID: aggID, DB: db, Class: class, InstanceID: id,
		SequenceNumber: head, StateSequenceNumber: ev.SequenceNumber, Data: ev.Data,
		UpdatedAt: ev.OccurredAt.String(), PendingCommands: pending})
}

func etag(seq int64) string { return `"` + strconv.FormatInt(seq, 10) + `"` }

// EventsPage is the body of GET …/instances/{id}/events.
type EventsPage struct {
	AggregateID string `json:"aggregate_id"`
	// FromSeq..ToSeq is the range of slots this page covers.
	FromSeq int64 `json:"from_seq"`
	ToSeq   int64 `json:"to_seq"`
	// LastSequence is the instance's last sequence.
	LastSequence int64 `json:"last_sequence"`
	// Events are the stored envelopes byte for byte, in slot order (a
	// slot's command before its domain event).
	Events []json.RawMessage `json:"events"`
	// NextFromSeq is set when slots after ToSeq exist.
	NextFromSeq int64 `json:"next_from_seq,omitempty"`
}

// handleEvents serves GET …/instances/{id}/events?from_seq=1&limit=100&kind=
// (limit counts slots; kind "command" or "domain" filters).
func (s *server) handleEvents(w http.ResponseWriter, r *http.Request) {
	_, _, id, aggID, e := instancePath(r)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	q := r.URL.Query()
	from, limit := int64(1), int64(defaultEventsPageSize)
	if v := q.Get("from_seq"); v != "" || q.Has("from_seq") {
		n, ok := parseSeq(v)
		if !ok || n < 1 {
			s.fail(w, r, badParam("from_seq", "from_seq must be an integer >= 1, got %q", v))
			return
		}
		from = n
	}
	if v := q.Get("limit"); v != "" || q.Has("limit") {
		n, ok := parseSeq(v)
		if !ok || n < 1 || n > int64(s.opts.MaxEventsPage) {
			s.fail(w, r, badParam("limit", "limit must be an integer in 1..%d, got %q", s.opts.MaxEventsPage, v))
			return
		}
		limit = n
	}
	kind := envelope.Kind(q.Get("kind"))
	if kind != "" && !kind.Valid() {
		s.fail(w, r, badParam("kind", `kind must be "command", "domain" or empty, got %q`, kind))
		return
	}
	head, err := s.opts.Sequences.LastSequence(r.Context(), envelope.AggregateTypeInstance, aggID)
	if err != nil {
		s.fail(w, r, fromRead(err))
		return
	}
	if head == 0 {
		zero, none := int64(0), 0
		e := newError(http.StatusNotFound, CodeInstanceNotFound, "instance_id", "no events for instance %q", id)
		e.SequenceNumber, e.PendingCommands = &zero, &none
		s.fail(w, r, e)
		return
	}
	// A from_seq past the last sequence reads an empty page, as a stream
	// read past its end does: no events, no next_from_seq, and the empty
	// range from_seq..from_seq-1.
	page := EventsPage{AggregateID: aggID, FromSeq: from, ToSeq: from - 1, LastSequence: head, Events: []json.RawMessage{}}
	if from <= head {
		// to is min(from+limit-1, head) without from+limit overflowing.
		to := head
		if head-from > limit-1 {
			to = from + limit - 1
		}
		page.ToSeq = to
		evs, err := s.opts.Store.Stream(r.Context(), envelope.AggregateTypeInstance, aggID, from, to, kind)
		if err != nil {
			s.fail(w, r, fromRead(err))
			return
		}
		for _, ev := range evs {
			page.Events = append(page.Events, json.RawMessage(ev.Raw))
		}
		if to < head {
			page.NextFromSeq = to + 1
		}
	}
	writeJSON(w, http.StatusOK, page)
}
