package relay

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// The relay walks one global position: until it has a leader per shard
// (issue 33 item 3) it refuses a store of more than one shard at its
// start, and so do its operator tools (item 4), with the store's typed
// error — never a relay that publishes one shard and skips the others.
func TestRelayRefusesShardedStore(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	_, pool := testenv.NewMigratedDatabase(t)
	sharded, err := eventstore.New(eventstore.Config{Shards: 4, AppendTimeout: e.appendTO},
		eventstore.Deps{Pool: pool, Bucket: e.bucket, Logger: testLogger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sharded.Close() })
	ctx := ctxT(t, time.Minute)
	cps := NewCheckpointStore(e.bucket, "checkpoints/sharded.json")
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"New", func() error {
			a := e.opts(t)
			a.Deps.Store, a.Deps.Pool = sharded, pool
			r, err := a.new()
			if err == nil {
				r.Close()
			}
			return err
		}},
		{"PlanCheckpoint", func() error { _, err := PlanCheckpoint(ctx, sharded, cps, 1); return err }},
		{"Gaps", func() error { _, err := Gaps(ctx, sharded, Checkpoint{}); return err }},
		{"Republish", func() error { _, err := Republish(ctx, sharded, nil, nil, 1, 2, "", nil); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			var se *eventstore.ShardsNotSupportedError
			if !errors.As(err, &se) || se.Shards != 4 || !strings.Contains(err.Error(), "issue 33 items 3 and 4") {
				t.Fatalf("%s over a store of four shards: %v, want a *eventstore.ShardsNotSupportedError", c.name, err)
			}
		})
	}
	t.Run("a store of one shard is served", func(t *testing.T) {
		r, err := e.opts(t).new()
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
	})
}
