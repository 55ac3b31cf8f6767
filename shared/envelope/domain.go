package envelope

import (
	"encoding/json"
	"fmt"
	"math"
)

// DomainEventFor is the domain event that command cmd (its id commandID)
// yields with event type evType and the full new state (docs/architecture.md,
// "The flow of one command"): a deterministic event_id, the command's
// aggregate and slot, its occurred_at and actor, command_id, correlation_id
// (the command's, else its id), causation_id (the command's event_id), and
// the ordering key and trace context carried over. The instance worker
// appends exactly this; the API builds it too, to refuse at the door a
// command whose domain event the store would refuse.
func DomainEventFor(cmd Envelope, commandID, evType string, state json.RawMessage) Envelope {
	ev := Envelope{
		EventID:        DomainEventID(commandID, evType, cmd.AggregateType, cmd.AggregateID).String(),
		EventType:      evType,
		Kind:           KindDomain,
		AggregateType:  cmd.AggregateType,
		AggregateID:    cmd.AggregateID,
		SequenceNumber: cmd.SequenceNumber,
		OccurredAt:     cmd.OccurredAt,
		Actor:          cmd.Actor,
		Data:           state,
		SchemaVersion:  1,
		Metadata:       Metadata{},
	}
	ev.Metadata.SetString(MetaCommandID, commandID)
	corr := cmd.Metadata.CorrelationID()
	if corr == "" {
		corr = commandID
	}
	ev.Metadata.SetString(MetaCorrelationID, corr)
	ev.Metadata.SetString(MetaCausationID, cmd.EventID)
	for _, k := range []string{MetaOrderingKey, MetaTraceparent, MetaTracestate, MetaPrincipal} {
		if v, ok := cmd.Metadata.String(k); ok && v != "" {
			ev.Metadata.SetString(k, v)
		}
	}
	return ev
}

// MaxStoredSize is the largest size e's line can have in a segment: its
// encoding with sequence_number and position at their widest (19 digits
// each), whatever the store assigns. EVENT_STORE_MAX_ENVELOPE_BYTES bounds
// this size (the one size budget, docs/architecture.md).
func MaxStoredSize(e Envelope) (int, error) {
	e.SequenceNumber, e.Position = math.MaxInt64, math.MaxInt64
	b, err := Marshal(e)
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

// CheckStoredSize refuses e with a limit_exceeded *ValidationError when its
// stored line could exceed limit bytes (MaxStoredSize). It expects a valid
// e (Validate): one under the limit by EncodedBound is not encoded at all.
func CheckStoredSize(e Envelope, limit int) error {
	if EncodedBound(e) <= limit {
		return nil // it cannot exceed the limit: no need to encode it
	}
	n, err := MaxStoredSize(e)
	if err != nil {
		return err
	}
	if n > limit {
		return &ValidationError{Code: CodeLimitExceeded, Field: "data", Limit: fmt.Sprintf("%d bytes", limit),
			Reason: fmt.Sprintf("envelope of %d bytes as stored (sequence_number and position at their widest) exceeds the limit of %d bytes", n, limit)}
	}
	return nil
}
