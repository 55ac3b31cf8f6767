package projectionworker

import (
	"encoding/json"
	"fmt"

	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Domain event types of instances (docs/instanceworker.md).
const (
	InstanceCreated = "INSTANCE_CREATED"
	InstanceUpdated = "INSTANCE_UPDATED"
	InstanceDeleted = "INSTANCE_DELETED"
)

// Metadata key a domain event may carry with the occurred_at of the
// instance's creating event; the instances projection uses it for
// created_at of updates and deletes (the instance worker knows it; a pure
// projection of one event does not otherwise).
const MetaCreatedAt = "created_at"

// Instances is the built-in `instances` projection: the current state of
// every instance, the same document (readmodel) the instance worker
// writes. The instance worker owns the live documents; the projection
// worker runs instances to rebuild them (docs/instanceworker.md, docs/projectionworker.md#rebuild-and-rollback-runbook).
type Instances struct{}

// Name is readmodel.Projection ("instances").
func (Instances) Name() string { return readmodel.Projection }

// Version is readmodel.DefaultVersion.
func (Instances) Version() int { return readmodel.DefaultVersion }

// Handles instance domain events.
func (Instances) Handles(e envelope.Envelope) bool {
	if e.Kind != envelope.KindDomain || e.AggregateType != envelope.AggregateTypeInstance {
		return false
	}
	switch e.EventType {
	case InstanceCreated, InstanceUpdated, InstanceDeleted:
		return true
	}
	return false
}

// Template is readmodel.Mappings with the read alias filter deleted:false.
func (Instances) Template() Template {
	m := readmodel.Mappings()
	s, _ := m["settings"].(map[string]any)
	mp, _ := m["mappings"].(map[string]any)
	return Template{Settings: s, Mappings: mp, ReadFilter: map[string]any{"term": map[string]any{"deleted": false}}}
}

// Project returns one versioned index operation: the readmodel.Document of
// the event's full state, or a tombstone for a delete.
func (Instances) Project(e envelope.Envelope) ([]Op, error) {
	db, class, id, err := envelope.ParseInstanceAggregateID(e.AggregateID)
	if err != nil {
		return nil, fmt.Errorf("instances: %w", err)
	}
	m := readmodel.Meta{DB: db, Class: class, InstanceID: id, SequenceNumber: e.SequenceNumber, EventID: e.EventID,
		UpdatedAt: e.OccurredAt, Deleted: e.EventType == InstanceDeleted}
	if e.EventType == InstanceCreated {
		m.CreatedAt = e.OccurredAt
	} else if raw, ok := e.Metadata[MetaCreatedAt]; ok {
		_ = json.Unmarshal(raw, &m.CreatedAt)
	}
	doc, err := readmodel.Document(m, e.Data)
	if err != nil {
		return nil, fmt.Errorf("instances: %w", err)
	}
	// readmodel.Document writes compact JSON.
	return []Op{{Scope: db, ID: readmodel.DocumentID(class, id), Version: e.SequenceNumber, Doc: doc, Compact: true}}, nil
}

// History is the built-in `history` projection: one document per instance
// domain event, _id = event_id, op_type = create, in
// {prefix}{db}_history_v{N}.
type History struct{}

// Name is "history".
func (History) Name() string { return "history" }

// Version is 1.
func (History) Version() int { return 1 }

// SequenceGuard is claim.Unguarded: every domain event has a document of
// its own, including one published late after newer events of its aggregate
// (docs/relay.md#gaps-and-the-bounded-lookback); op_type create and the registry row keep it to one.
func (History) SequenceGuard() claim.Policy { return claim.Unguarded }

// Handles instance domain events (any type).
func (History) Handles(e envelope.Envelope) bool {
	return e.Kind == envelope.KindDomain && e.AggregateType == envelope.AggregateTypeInstance
}

// Template maps the event fields; the mapping is not dynamic, so data is
// stored but not indexed and any state shape is accepted.
func (History) Template() Template {
	kw := map[string]any{"type": "keyword"}
	return Template{
		Settings: map[string]any{"number_of_shards": 1},
		Mappings: map[string]any{
			"dynamic": false,
			"properties": map[string]any{
				"event_id": kw, "event_type": kw, "aggregate_type": kw, "aggregate_id": kw,
				"db": kw, "class": kw, "instance_id": kw, "actor": kw, "command_id": kw, "correlation_id": kw,
				"sequence_number": map[string]any{"type": "long"},
				"position":        map[string]any{"type": "long"},
				"occurred_at":     map[string]any{"type": "date"},
			},
		},
	}
}

// historyDoc is the body of a history document.
type historyDoc struct {
	EventID        string             `json:"event_id"`
	EventType      string             `json:"event_type"`
	AggregateType  string             `json:"aggregate_type"`
	AggregateID    string             `json:"aggregate_id"`
	DB             string             `json:"db"`
	Class          string             `json:"class"`
	InstanceID     string             `json:"instance_id"`
	SequenceNumber int64              `json:"sequence_number"`
	Position       int64              `json:"position,omitempty"`
	OccurredAt     envelope.Timestamp `json:"occurred_at,omitzero"`
	Actor          string             `json:"actor,omitempty"`
	CommandID      string             `json:"command_id,omitempty"`
	CorrelationID  string             `json:"correlation_id,omitempty"`
	Data           json.RawMessage    `json:"data,omitempty"`
}

// Project returns one create operation with _id = event_id.
func (History) Project(e envelope.Envelope) ([]Op, error) {
	db, class, id, err := envelope.ParseInstanceAggregateID(e.AggregateID)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	d := historyDoc{EventID: e.EventID, EventType: e.EventType, AggregateType: e.AggregateType, AggregateID: e.AggregateID,
		DB: db, Class: class, InstanceID: id, SequenceNumber: e.SequenceNumber, Position: e.Position,
		OccurredAt: e.OccurredAt, Actor: e.Actor, Data: e.Data}
	d.CommandID = metaString(e, envelope.MetaCommandID)
	d.CorrelationID = metaString(e, "correlation_id")
	doc, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	// json.Marshal writes compact JSON (a RawMessage compacted too), so the
	// bulk line copies it instead of compacting it again.
	return []Op{{Scope: db, ID: envelope.ESDocumentID(e.EventID), Create: true, Doc: doc, Compact: true}}, nil
}

func metaString(e envelope.Envelope, key string) string {
	var s string
	if raw, ok := e.Metadata[key]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}
