package inspect

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Trace follows id — a command_id or an event_id — through the pipeline.
// A command is traced with the domain events of its slot; a domain event
// with the command of its slot before it. ErrNotFound when no committed
// event has the id.
func (in *Inspector) Trace(ctx context.Context, id string) (Trace, error) {
	id = strings.TrimSpace(id)
	if id == "" {
		return Trace{}, invalidAt("id", "empty id")
	}
	ev, err := in.find(ctx, id)
	if err != nil {
		return Trace{}, err
	}
	e := ev.Envelope
	events := []eventstore.Event{ev}
	switch e.Kind {
	case envelope.KindCommand:
		doms, err := in.o.Store.Stream(ctx, e.AggregateType, e.AggregateID, e.SequenceNumber, e.SequenceNumber, envelope.KindDomain)
		if err != nil {
			return Trace{}, fmt.Errorf("inspect: domain events of slot %d: %w", e.SequenceNumber, err)
		}
		events = append(events, doms...)
	case envelope.KindDomain:
		cmd, err := in.o.Store.Command(ctx, e.AggregateType, e.AggregateID, e.SequenceNumber)
		switch {
		case err == nil:
			events = append([]eventstore.Event{cmd}, events...)
		case !errors.Is(err, eventstore.ErrNotFound):
			return Trace{}, fmt.Errorf("inspect: command of slot %d: %w", e.SequenceNumber, err)
		}
	}
	tr := Trace{ID: id}
	if events[0].Envelope.Kind == envelope.KindCommand {
		tr.CommandID = events[0].Envelope.Metadata.CommandID()
	}
	ids := make([]string, len(events))
	for i, ev := range events {
		ids[i] = ev.Envelope.EventID
	}
	rows, err := in.o.Registry.GetMany(ctx, ids)
	if err != nil {
		return Trace{}, fmt.Errorf("inspect: registry rows: %w", err)
	}
	warn := func(format string, args ...any) { tr.Warnings = append(tr.Warnings, fmt.Sprintf(format, args...)) }
	src := in.sources(ctx, warn)
	for _, ev := range events {
		tr.Events = append(tr.Events, in.traceEvent(ctx, ev, rows, src, warn))
	}
	return tr, nil
}

// find returns the committed event whose event_id is id, else the command
// whose command_id is id.
func (in *Inspector) find(ctx context.Context, id string) (eventstore.Event, error) {
	if _, perr := uuid.Parse(id); perr == nil {
		ev, err := in.o.Store.ByEventID(ctx, id)
		if err == nil {
			return ev, nil
		}
		if !errors.Is(err, eventstore.ErrNotFound) {
			return eventstore.Event{}, fmt.Errorf("inspect: event %s: %w", id, err)
		}
	}
	if envelope.ValidateCommandID(id) != nil {
		return eventstore.Event{}, fmt.Errorf("%w: no event or command with id %q", ErrNotFound, id)
	}
	ev, err := in.o.Store.ByEventID(ctx, eventIDForCommand(id))
	if errors.Is(err, eventstore.ErrNotFound) ||
		(err == nil && (ev.Envelope.Kind != envelope.KindCommand || ev.Envelope.Metadata.CommandID() != id)) {
		return eventstore.Event{}, fmt.Errorf("%w: no event or command with id %q", ErrNotFound, id)
	}
	if err != nil {
		return eventstore.Event{}, fmt.Errorf("inspect: command %q: %w", id, err)
	}
	return ev, nil
}

// sources are what every event of a trace shares: the relay checkpoint and
// every consumer group's committed offsets, read once.
type sources struct {
	checkpoint    *relay.Checkpoint
	commits       map[string]map[string]map[int32]int64 // group → topic → partition → offset
	commitsLoaded bool
}

func (in *Inspector) sources(ctx context.Context, warn func(string, ...any)) *sources {
	s := &sources{}
	if in.o.Checkpoint != nil {
		cp, _, found, err := in.o.Checkpoint.Load(ctx)
		switch {
		case err != nil:
			warn("relay checkpoint: %v", err)
		case found:
			s.checkpoint = &cp
		default:
			s.checkpoint = &relay.Checkpoint{}
		}
	}
	if in.adm != nil {
		commits, err := in.groupCommits(ctx)
		if err != nil {
			warn("consumer group offsets: %v", err)
		} else {
			s.commits, s.commitsLoaded = commits, true
		}
	}
	return s
}

func (in *Inspector) traceEvent(ctx context.Context, ev eventstore.Event, rows []claim.Row, src *sources, warn func(string, ...any)) EventTrace {
	e := ev.Envelope
	et := EventTrace{EventID: e.EventID, Kind: string(e.Kind), EventType: e.EventType, AggregateType: e.AggregateType,
		AggregateID: e.AggregateID, Sequence: e.SequenceNumber, Position: e.Position, OccurredAt: e.OccurredAt.Time()}
	et.Principal, _ = e.Metadata.String(envelope.MetaPrincipal)
	first := Step{Step: "accepted", State: StateDone, At: e.OccurredAt.Time(), Detail: "accepted by the API (occurred_at)"}
	if et.Principal != "" {
		first.Detail = "accepted by the API from " + et.Principal + " (occurred_at)"
	}
	if e.Kind == envelope.KindDomain {
		first = Step{Step: "emitted", State: StateDone, At: e.OccurredAt.Time(), Detail: "emitted by its handler (its occurred_at)"}
		if c := e.Metadata.CausationID(); c != "" {
			first.Detail += ", caused by " + c
		}
	}
	et.Steps = append(et.Steps, first)

	// Appended: the index row of the position.
	app := Step{Step: "appended", State: StateDone, Position: e.Position, Sequence: e.SequenceNumber, Segment: ev.SegmentKey}
	since := e.OccurredAt.Time()
	if idx, err := in.o.Store.Index(ctx, eventstore.IndexQuery{FromPosition: e.Position, ToPosition: e.Position, Limit: 1}); err != nil {
		warn("event store index at %d: %v", e.Position, err)
	} else if len(idx) == 1 {
		app.At = idx[0].CommittedAt
		app.Detail = "reserved " + idx[0].ReservedAt.UTC().Format("15:04:05.000") + ", committed by writer " + idx[0].WriterID
		if !idx[0].ReservedAt.IsZero() && (since.IsZero() || idx[0].ReservedAt.Before(since)) {
			since = idx[0].ReservedAt
		}
	}
	et.Steps = append(et.Steps, app)

	// Published (or parked) by the relay.
	pub, loc := in.published(ctx, ev, since, src, warn)
	et.Steps = append(et.Steps, pub)

	// Each handler's registry row, or its absence.
	seen := map[string]bool{}
	for _, r := range rows {
		if r.EventID != e.EventID {
			continue
		}
		seen[r.Handler] = true
		et.Steps = append(et.Steps, handledStep(r))
		if d, ok := in.document(ctx, e, r.Handler, warn); ok {
			et.Steps = append(et.Steps, d)
		}
	}
	for _, h := range in.o.Handlers {
		if h.Kind == e.Kind && !seen[h.Name] {
			st := Step{Step: "handled", State: StatePending, Handler: h.Name, Detail: "no registry row yet: not claimed"}
			if loc == nil {
				st.Detail += " (not published yet)"
			}
			et.Steps = append(et.Steps, st)
		}
	}

	// Offset commits of every group that consumes the record's partition.
	if loc != nil {
		et.Steps = append(et.Steps, in.commitSteps(e.Kind, *loc, src)...)
	}
	return et
}

// handledStep turns a registry row into a step.
func handledStep(r claim.Row) Step {
	st := Step{Step: "handled", Handler: r.Handler, Status: string(r.Status), Attempts: r.Attempts, Owner: r.Owner,
		StartedAt: r.StartedAt, NextAttempt: r.NextAttemptAt, Error: r.LastError, At: r.ProcessedAt, Sequence: r.Sequence}
	if r.Outcome != nil {
		st.Outcome = string(r.Outcome.Result)
		if r.Outcome.Reason != "" {
			st.Outcome += ": " + r.Outcome.Reason
		}
	}
	switch r.Status {
	case claim.StatusDone:
		st.State, st.Detail = StateDone, "claimed and finished"
	case claim.StatusSkippedStale:
		st.State, st.Detail = StateSkipped, "stale: a later sequence of its aggregate was already finished"
	case claim.StatusProcessing:
		st.State, st.Detail, st.At = StatePending, "claimed, processing (lease held)", r.HeartbeatAt
	case claim.StatusFailed:
		st.State, st.Detail, st.At = StateFailed, "failed, will be retried", r.StartedAt
	case claim.StatusDead:
		st.State, st.Detail = StateDead, "failed for good: dead-lettered"
	default:
		st.State = StateUnknown
	}
	return st
}
