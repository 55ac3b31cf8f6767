// Package instanceworkertest holds test helpers for instanceworker.Verify,
// shared by its own tests and those of `sluice verify`: an event store
// and the shop instances index to fill with events and documents that
// agree or differ.
package instanceworkertest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Verify is an event store on pool and the Elasticsearch client and shop
// instances index (readmodel.DefaultVersion) of a Verify test.
type Verify struct {
	Store *eventstore.Store
	ES    *elasticsearch.Client
	Names readmodel.Names
}

// OpenVerify opens the event store of sc on pool (closed at the end of
// the test) and the Elasticsearch of ec, and creates the shop instances
// index.
func OpenVerify(t testing.TB, pool *pgxpool.Pool, sc eventstore.Config, ec readmodel.Config) *Verify {
	t.Helper()
	ctx := context.Background()
	bucket, err := backend.Open(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := eventstore.New(sc, eventstore.Deps{Pool: pool, Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	es, err := readmodel.NewClient(ec)
	if err != nil {
		t.Fatal(err)
	}
	n, err := readmodel.EnsureIndex(ctx, es, ec.IndexPrefix, "shop", readmodel.DefaultVersion)
	if err != nil {
		t.Fatal(err)
	}
	return &Verify{Store: st, ES: es, Names: n}
}

// Event appends one envelope to aggregate Instance aggID (db:class:id) and
// returns it as stored.
func (v *Verify) Event(t testing.TB, kind envelope.Kind, typ, aggID, data string) envelope.Envelope {
	t.Helper()
	res, err := v.Store.AppendOne(context.Background(), envelope.Envelope{
		EventID: uuid.NewString(), EventType: typ, Kind: kind,
		AggregateType: envelope.AggregateTypeInstance, AggregateID: aggID, Data: json.RawMessage(data),
	})
	if err != nil || res.Err != nil {
		t.Fatalf("append %s %s: %v %v", typ, aggID, err, res.Err)
	}
	return res.Event.Envelope
}

// Doc writes the shop instance document of class and id for e (its slot
// and event id) with the deleted flag and state given.
func (v *Verify) Doc(t testing.TB, class, id string, e envelope.Envelope, deleted bool, state string) {
	t.Helper()
	m := readmodel.Meta{DB: "shop", Class: class, InstanceID: id, SequenceNumber: e.SequenceNumber, EventID: e.EventID,
		CreatedAt: e.OccurredAt, UpdatedAt: e.OccurredAt, Deleted: deleted}
	if _, err := readmodel.WriteInstance(context.Background(), v.ES, v.Names, m, json.RawMessage(state)); err != nil {
		t.Fatalf("write document %s: %v", id, err)
	}
}
