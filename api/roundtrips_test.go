package api

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/schema"
)

// createCounter counts the segment creates of a bucket.
type createCounter struct {
	objstore.Bucket
	n atomic.Int64
}

func (b *createCounter) Create(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	b.n.Add(1)
	return b.Bucket.Create(ctx, key, body)
}

// TestRequestWork pins what one write request costs (issue 32: the cost
// per request, counted, not timed): a create, an event append and a batch
// are each one group commit of the store — one segment and at most two
// Postgres round trips (the reservation, the commit), three for the
// atomic batch of an event append — and nothing else on any pool,
// with API-key authentication and the schema registry at the door (both
// are snapshots refreshed by time, never read per request). A layer that
// queried per request, or an append that took a round trip more, fails it.
func TestRequestWork(t *testing.T) {
	ctx := context.Background()
	url, _ := testenv.NewMigratedDatabase(t)
	var storeTrips, mainTrips, regTrips testenv.RoundTrips
	storePool, mainPool, regPool := testenv.TracedPool(t, url, &storeTrips), testenv.TracedPool(t, url, &mainTrips), testenv.TracedPool(t, url, &regTrips)
	fb, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fb.Close() })
	bucket := &createCounter{Bucket: fb}
	st, err := eventstore.New(eventstore.Config{GroupCommitMaxWait: 2 * time.Millisecond, GroupCommitMaxEvents: 500, AppendTimeout: 30 * time.Second},
		eventstore.Deps{Pool: storePool, Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	reg, err := registry.New(registry.Config{Owner: "api-test"}, registry.Deps{Pool: regPool})
	if err != nil {
		t.Fatal(err)
	}
	keys := auth.NewKeys(mainPool, auth.KeysOptions{Refresh: time.Hour})
	g, err := auth.ParseGrant("append,command,read=*")
	if err != nil {
		t.Fatal(err)
	}
	_, secret, err := keys.Create(ctx, auth.CreateRequest{Principal: "writer", Grants: []auth.Grant{g}, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	schemas := schema.New(mainPool, schema.Config{Mode: schema.ModeOpen, RefreshInterval: time.Hour}, nil)
	if _, err := schemas.Register(ctx, "OrderPlaced", []byte(orderSchema), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{}, Deps{Store: st, Registry: reg, Sequences: st, Events: st, Schemas: schemas,
		Auth: auth.NewAuthenticator(auth.Options{Keys: keys, Required: true})})
	if err != nil {
		t.Fatal(err)
	}
	bearer := "Authorization: Bearer " + secret
	create := func(i int) {
		doHandler(t, h, "POST", base, fmt.Sprintf(`{"instance_id":"o-%d","data":{"total":%d}}`, i, i), bearer).expect(t, 202, "")
	}
	appendEvent := func(i int) {
		doHandler(t, h, "POST", fmt.Sprintf("/v1/streams/Order/o-%d/events", i),
			appendBody(nil, evIn{uuid.NewString(), "OrderPlaced", map[string]any{"id": "o", "total": i}}), bearer).expect(t, 201, "")
	}
	batch := func(i int) {
		items := make([]string, 10)
		for k := range items {
			items[k] = fmt.Sprintf(`{"op":"create","instance_id":"b-%d-%d","data":{"total":%d}}`, i, k, k)
		}
		doHandler(t, h, "POST", base+":batch", `{"items":[`+strings.Join(items, ",")+`]}`, bearer).expect(t, 207, "")
	}
	// Warm-up: the key and schema snapshots load once, the statements are
	// prepared.
	create(100)
	appendEvent(100)
	batch(100)
	const n = 5
	// trips is the store's round trips per request: a group commit of
	// commands is the reservation and the commit; an event append is an
	// atomic batch, whose reservation first reads its facts (the lookup,
	// docs/eventstore.md#append-protocol-group-commit), as at d2453f7.
	steps := []struct {
		name  string
		run   func(int)
		trips int64
	}{{"create", create, 2}, {"event append with schema validation", appendEvent, 3}, {"batch of 10 creates", batch, 2}}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			s0, m0, r0, b0 := storeTrips.N(), mainTrips.N(), regTrips.N(), bucket.n.Load()
			for i := range n {
				step.run(i)
			}
			s, m, r, b := storeTrips.N()-s0, mainTrips.N()-m0, regTrips.N()-r0, bucket.n.Load()-b0
			t.Logf("%d requests: store %d round trips, main %d, registry %d; %d segments", n, s, m, r, b)
			if s < n {
				// at least the reservation of each request: a counter that
				// counts nothing would pass the bound below
				t.Fatalf("%d requests counted %d store round trips: the tracer does not count", n, s)
			}
			if s > step.trips*n || b != n {
				t.Errorf("%d requests took %d store round trips and %d segments, want at most %d and %d (one group commit each)", n, s, b, step.trips*n, n)
			}
			if m != 0 || r != 0 {
				t.Errorf("%d requests took %d round trips on the main pool (keys, schemas) and %d on the registry's, want none: the snapshots serve them", n, m, r)
			}
		})
	}
}
