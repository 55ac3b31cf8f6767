// Package declarativetest holds test helpers of the declarative
// projections: the Go twin of examples/projections/order_totals.yaml,
// shared by the projection benchmark of package declarative (in memory)
// and the one of package projectionworker (Kafka to Elasticsearch).
package declarativetest

import (
	"context"
	"encoding/json"

	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Store is the document state a projection reads and writes: both
// declarative.Store and *projectionworker.DocState.
type Store interface {
	Get(ctx context.Context, scope, id string) (projectionworker.Doc, error)
	Put(scope, id string, d projectionworker.Doc)
}

// OrderTotals is examples/projections/order_totals.yaml written in Go, on
// the same document store and with the same bookkeeping (per-aggregate
// applied sequences, deleted, sluice metadata): it computes the same
// documents as the declarative example (TestGoTwinMatchesDeclarative).
func OrderTotals(ctx context.Context, e envelope.Envelope, store Store) ([]projectionworker.Op, error) {
	var data struct {
		CustomerID string  `json:"customer_id"`
		Amount     float64 `json:"amount"`
	}
	if err := json.Unmarshal(e.Data, &data); err != nil {
		return nil, err
	}
	key := data.CustomerID
	id := envelope.ESDocumentID("customer-" + key)
	cur, err := store.Get(ctx, "shop", id)
	if err != nil {
		return nil, err
	}
	type meta struct {
		Applied   map[string]int64 `json:"applied"`
		Key       string           `json:"key"`
		EventID   string           `json:"event_id"`
		UpdatedAt string           `json:"updated_at"`
	}
	var doc struct {
		CustomerID  string   `json:"customer_id"`
		Deleted     bool     `json:"deleted"`
		LastOrderAt string   `json:"last_order_at"`
		OrderIDs    []string `json:"order_ids,omitempty"`
		Orders      float64  `json:"orders"`
		Sluice      meta     `json:"sluice"`
		Total       float64  `json:"total"`
	}
	if cur.Source != nil {
		if err := json.Unmarshal(cur.Source, &doc); err != nil {
			return nil, err
		}
	}
	if doc.Sluice.Applied == nil {
		doc.Sluice.Applied = map[string]int64{}
	}
	ak := envelope.AggregateKey(e.AggregateType, e.AggregateID)
	if last, ok := doc.Sluice.Applied[ak]; ok && e.SequenceNumber <= last {
		return nil, nil
	}
	doc.CustomerID = key
	switch e.EventType {
	case "ORDER_PLACED":
		doc.Total += data.Amount
		doc.Orders++
		doc.OrderIDs = append(doc.OrderIDs, e.AggregateID)
	case "ORDER_CANCELLED":
		doc.Total -= data.Amount
		doc.Orders--
	}
	doc.LastOrderAt = e.OccurredAt.String()
	doc.Sluice.Applied[ak] = e.SequenceNumber
	doc.Sluice.Key, doc.Sluice.EventID, doc.Sluice.UpdatedAt = key, e.EventID, e.OccurredAt.String()
	body, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	store.Put("shop", id, projectionworker.Doc{Source: body, Version: cur.Version + 1})
	return []projectionworker.Op{{Scope: "shop", ID: id, Version: cur.Version + 1, Doc: body}}, nil
}
