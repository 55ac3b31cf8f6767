package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/envelope"
)

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
			_, pool := testenv.NewMigratedDatabase(t)
			b, err := filestore.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			st, err := eventstore.New(eventstore.Config{Shards: tc.shards, GroupCommitMaxWait: time.Millisecond}, eventstore.Deps{Pool: pool, Bucket: b})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			for i := range 6 {
				res, err := st.AppendOne(ctx, envelope.Envelope{EventID: uuid.NewString(), EventType: "ORDER_PLACED", Kind: envelope.KindDomain,
					AggregateType: "Order", AggregateID: fmt.Sprintf("o-%d", i), Data: json.RawMessage(`{}`)})
				if err != nil || res.Err != nil {
					t.Fatalf("append: %v %v", err, res.Err)
				}
			}
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
