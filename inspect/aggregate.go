package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
)

// AggregateQuery selects a page of one aggregate's slots: FromSeq..FromSeq
// + Limit - 1, or the last Limit slots when FromSeq is 0. Limit defaults to
// DefaultPageSize and is at most MaxPageSize.
type AggregateQuery struct {
	Type    string
	ID      string
	FromSeq int64
	Limit   int
}

// HandlerRow is one handler's registry row of an event.
type HandlerRow struct {
	Handler     string    `json:"handler"`
	Status      string    `json:"status"`
	Attempts    int       `json:"attempts"`
	Outcome     string    `json:"outcome,omitempty"`
	Error       string    `json:"error,omitempty"`
	ProcessedAt time.Time `json:"processed_at,omitzero"`
}

// AggregateEvent is one stored event of the aggregate.
type AggregateEvent struct {
	EventID    string          `json:"event_id"`
	Kind       string          `json:"kind"`
	EventType  string          `json:"event_type"`
	Sequence   int64           `json:"sequence_number"`
	Position   int64           `json:"position"`
	OccurredAt time.Time       `json:"occurred_at,omitzero"`
	CommandID  string          `json:"command_id,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
	Handlers   []HandlerRow    `json:"handlers"`
}

// Guard is one handler's sequence-guard state of the aggregate: the highest
// finished sequence (docs/registry.md#sequence-guard-policies-per-handler).
type Guard struct {
	Handler      string    `json:"handler"`
	LastSequence int64     `json:"last_sequence"`
	UpdatedAt    time.Time `json:"updated_at,omitzero"`
	// Behind is how many slots the guard is behind the aggregate's last.
	Behind int64 `json:"behind"`
}

// AggregateView is the answer of Inspector.Aggregate.
type AggregateView struct {
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	// Key is the aggregate's registry key (envelope.AggregateKey).
	Key          string           `json:"key"`
	LastSequence int64            `json:"last_sequence"`
	FromSeq      int64            `json:"from_seq"`
	ToSeq        int64            `json:"to_seq"`
	Events       []AggregateEvent `json:"events"`
	Guards       []Guard          `json:"guards"`
	// Document is the aggregate's read-model document (instances), shown
	// beside its last event; nil when the aggregate has none.
	Document *Document `json:"document,omitempty"`
	Warnings []string  `json:"warnings,omitempty"`
}

// Aggregate returns a page of one aggregate's events with each handler's
// rows, every handler's guard and the read-model document. ErrNotFound
// when the aggregate has no slot.
func (in *Inspector) Aggregate(ctx context.Context, q AggregateQuery) (AggregateView, error) {
	if !envelope.IsAggregateType(q.Type) {
		// A type no event can have: refused, not looked up and not found.
		return AggregateView{}, invalidAt("aggregate_type", "aggregate type %q must match %s", q.Type, envelope.AggregateTypePattern)
	}
	id, err := envelope.NormalizeAggregateID(q.ID)
	if err != nil {
		return AggregateView{}, invalidAt("aggregate_id", "aggregate id: %v", err)
	}
	if q.Limit <= 0 {
		q.Limit = DefaultPageSize
	}
	q.Limit = min(q.Limit, MaxPageSize)
	last, err := in.o.Sequences.LastSequence(ctx, q.Type, id)
	if err != nil {
		return AggregateView{}, fmt.Errorf("inspect: last sequence: %w", err)
	}
	if last == 0 {
		return AggregateView{}, fmt.Errorf("%w: no aggregate %s %q", ErrNotFound, q.Type, id)
	}
	v := AggregateView{AggregateType: q.Type, AggregateID: id, Key: envelope.AggregateKey(q.Type, id), LastSequence: last}
	v.FromSeq = q.FromSeq
	if v.FromSeq <= 0 {
		v.FromSeq = max(1, last-int64(q.Limit)+1)
	}
	v.ToSeq = v.FromSeq + int64(q.Limit) - 1
	evs, err := in.o.Store.Stream(ctx, q.Type, id, v.FromSeq, v.ToSeq, "")
	if err != nil {
		return AggregateView{}, fmt.Errorf("inspect: events: %w", err)
	}
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.Envelope.EventID
	}
	rows, err := in.o.Registry.GetMany(ctx, ids)
	if err != nil {
		return AggregateView{}, fmt.Errorf("inspect: registry rows: %w", err)
	}
	byEvent := map[string][]claim.Row{}
	handlers := []string{}
	for _, r := range rows {
		byEvent[r.EventID] = append(byEvent[r.EventID], r)
		handlers = append(handlers, r.Handler)
	}
	for _, h := range in.o.Handlers {
		handlers = append(handlers, h.Name)
	}
	v.Events = []AggregateEvent{}
	for _, ev := range evs {
		e := ev.Envelope
		ae := AggregateEvent{EventID: e.EventID, Kind: string(e.Kind), EventType: e.EventType, Sequence: e.SequenceNumber,
			Position: e.Position, OccurredAt: e.OccurredAt.Time(), CommandID: e.Metadata.CommandID(), Data: json.RawMessage(e.Data),
			Handlers: []HandlerRow{}}
		for _, r := range byEvent[e.EventID] {
			hr := HandlerRow{Handler: r.Handler, Status: string(r.Status), Attempts: r.Attempts, Error: r.LastError, ProcessedAt: r.ProcessedAt}
			if r.Outcome != nil {
				hr.Outcome = string(r.Outcome.Result)
				if r.Outcome.Reason != "" {
					hr.Outcome += ": " + r.Outcome.Reason
				}
			}
			ae.Handlers = append(ae.Handlers, hr)
		}
		v.Events = append(v.Events, ae)
	}
	vs, err := in.o.Registry.Versions(ctx, v.Key, handlers)
	if err != nil {
		return AggregateView{}, fmt.Errorf("inspect: sequence guards: %w", err)
	}
	v.Guards = []Guard{}
	for _, g := range vs {
		v.Guards = append(v.Guards, Guard{Handler: g.Handler, LastSequence: g.LastSequence, UpdatedAt: g.UpdatedAt, Behind: max(0, last-g.LastSequence)})
	}
	if in.o.ES != nil && q.Type == envelope.AggregateTypeInstance {
		if db, class, iid, err := envelope.ParseInstanceAggregateID(id); err == nil {
			d, err := in.getDoc(ctx, readmodel.InstanceNames(in.o.IndexPrefix, db, 0).WriteAlias, readmodel.DocumentID(class, iid))
			if err != nil {
				v.Warnings = append(v.Warnings, "elasticsearch: "+err.Error())
			} else {
				v.Document = &d
			}
		}
	}
	return v, nil
}
