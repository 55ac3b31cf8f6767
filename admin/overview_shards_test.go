package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/envelope"
)

// newStoreWithEvents is an event store of shards shards on a file bucket
// and a fresh database, holding events events (one per aggregate); the
// test's cleanup closes it.
func newStoreWithEvents(t *testing.T, shards, events int) (*eventstore.Store, objstore.Bucket, *pgxpool.Pool) {
	t.Helper()
	_, pool := testenv.NewMigratedDatabase(t)
	b, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	st, err := eventstore.New(eventstore.Config{Shards: shards, GroupCommitMaxWait: time.Millisecond}, eventstore.Deps{Pool: pool, Bucket: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for i := range events {
		res, err := st.AppendOne(context.Background(), envelope.Envelope{EventID: uuid.NewString(), EventType: "ORDER_PLACED", Kind: envelope.KindDomain,
			AggregateType: "Order", AggregateID: fmt.Sprintf("o-%d", i), Data: json.RawMessage(`{}`)})
		if err != nil || res.Err != nil {
			t.Fatalf("append: %v %v", err, res.Err)
		}
	}
	return st, b, pool
}

// The overview's store part: on a store of several shards every shard's
// head and their sum, no error; on a store of one shard its head alone, as
// before shards.
func TestOverviewStoreShards(t *testing.T) {
	for _, tc := range []struct {
		shards int
		want   string
	}{
		{1, `{"head":6}`},
		{4, ""},
	} {
		t.Run(fmt.Sprintf("%d shards", tc.shards), func(t *testing.T) {
			ctx := context.Background()
			st, _, _ := newStoreWithEvents(t, tc.shards, 6)
			s := &Server{opts: settings{Deps: Deps{Store: st}}}
			ov := &Overview{Errors: map[string]string{}}
			s.overviewStore(ctx, ov)
			if len(ov.Errors) != 0 {
				t.Fatalf("errors %v", ov.Errors)
			}
			got, _ := json.Marshal(ov.Store)
			want := tc.want
			if tc.shards > 1 {
				heads, err := st.Heads(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var sum int64
				var views []ShardHeadView
				for _, h := range heads {
					sum += h.Position
					views = append(views, ShardHeadView{Shard: h.Shard, Head: h.Position})
				}
				if sum != 6 || len(views) != 4 {
					t.Fatalf("heads %+v", heads)
				}
				w, _ := json.Marshal(StoreView{Head: sum, Shards: views})
				want = string(w)
			}
			if string(got) != want {
				t.Fatalf("store view %s, want %s", got, want)
			}
		})
	}
}

// The overview's relay part on a store of four shards: every shard's
// checkpoint, lag and lease (a relay leader per shard, docs/relay.md#shards),
// and their sums; a shard without a lease makes the whole "none".
func TestOverviewRelayShards(t *testing.T) {
	ctx := context.Background()
	st, b, pool := newStoreWithEvents(t, 4, 12)
	heads, err := st.Heads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &sluiceconfig.Config{Relay: relay.DefaultConfig()}
	cfg.Relay.Derive()
	s := &Server{opts: settings{Config: Config{Process: cfg}, Deps: Deps{Store: st, Bucket: b, StorePool: pool}}}
	var wantLag int64
	for _, h := range heads[:3] { // shard 3 has neither checkpoint nor lease
		cp := relay.Checkpoint{Position: h.Position / 2, RelayEpoch: 1}
		wantLag += h.Position - cp.Position
		if _, err := relay.NewCheckpointStore(b, relay.ShardCheckpointKey(cfg.Relay.CheckpointKey, h.Shard, 4)).Save(ctx, cp, ""); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := relay.NewLease(pool, relay.ShardLeaseName(cfg.Relay.Name, h.Shard, 4), fmt.Sprintf("r-%d", h.Shard%2), time.Minute).TryAcquire(ctx); err != nil || !ok {
			t.Fatalf("lease of shard %d: %v %v", h.Shard, ok, err)
		}
	}
	wantLag += heads[3].Position
	ov := &Overview{Errors: map[string]string{}}
	s.overviewRelay(ctx, ov)
	if len(ov.Errors) != 0 {
		t.Fatalf("errors %v", ov.Errors)
	}
	r := ov.Relay
	if len(r.Shards) != 4 || r.Found || r.Lag != wantLag || r.LeaseState != "none" || r.Leader != "r-0,r-1" || r.Epoch != 1 {
		t.Fatalf("relay view %+v, want 4 shards, lag %d, not found, lease none, leaders r-0,r-1", r, wantLag)
	}
	for _, v := range r.Shards[:3] {
		if !v.Found || v.LeaseState != "held" || v.Checkpoint != heads[v.Shard].Position/2 {
			t.Errorf("shard %+v", v)
		}
	}
	if v := r.Shards[3]; v.Found || v.LeaseState != "none" || v.Lag != heads[3].Position {
		t.Errorf("shard 3 %+v, want no checkpoint, no lease, lag = its head", v)
	}
}
