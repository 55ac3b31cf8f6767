package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/relay"
)

// `sluice relay …` over a store of four shards (docs/relay.md#shards): the
// service publishes every shard, each with its own checkpoint; checkpoint
// show prints a line per shard (or one in full with --shard); set and
// republish need --shard and act on that shard's positions; gaps lists
// every shard.
func TestRelayCommandsSharded(t *testing.T) {
	const shards = 4
	ctx := context.Background()
	url, pool := testenv.NewMigratedDatabase(t)
	k := testenv.NewKafka(t)
	prefix := testenv.UniqueName("clis") + "."
	env := relayTestEnv(t, url, k, prefix, "EVENT_STORE_SHARDS", fmt.Sprint(shards))
	cfg, bucket, st := openEnvStore(t, pool, env, "")
	appendCommands(t, st, 40, func(i int) string { return fmt.Sprintf("o-%d", i%10) })
	heads, err := st.Heads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cps := func(sh int) *relay.CheckpointStore {
		return relay.NewCheckpointStore(bucket, relay.ShardCheckpointKey(cfg.Relay.CheckpointKey, sh, shards))
	}

	runRelayUntil(t, "every shard published", func() bool {
		for _, h := range heads {
			cp, _, found, err := cps(h.Shard).Load(ctx)
			if err != nil || !found || cp.Position != h.Position {
				return false
			}
		}
		return true
	})

	out, err := runRelayCLI(ctx, "checkpoint", "show")
	if err != nil || !strings.Contains(out, "4 shards, lag 0 in all") || !strings.Contains(out, "checkpoints/default/shard-0003.json") {
		t.Fatalf("show: %q %v", out, err)
	}
	sh := 1
	for _, h := range heads {
		if h.Position > heads[sh].Position {
			sh = h.Shard
		}
	}
	out, err = runRelayCLI(ctx, "checkpoint", "show", "--shard", fmt.Sprint(sh))
	if err != nil || !strings.Contains(out, fmt.Sprintf("position        %d", heads[sh].Position)) || !strings.Contains(out, "lease           expired") {
		t.Fatalf("show --shard %d: %q %v", sh, out, err)
	}
	if out, err := runRelayCLI(ctx, "checkpoint", "set", "--position", "1", "--yes"); err == nil || !strings.Contains(err.Error(), "name one with --shard (0..3)") {
		t.Fatalf("set without --shard over four shards: %q %v", out, err)
	}
	if out, err := runRelayCLI(ctx, "checkpoint", "show", "--shard", "4"); err == nil {
		t.Fatalf("show --shard 4 of four shards: %q", out)
	}
	out, err = runRelayCLI(ctx, "checkpoint", "set", "--shard", fmt.Sprint(sh), "--position", "1", "--yes")
	if err != nil || !strings.Contains(out, fmt.Sprintf("%d -> 1", heads[sh].Position)) {
		t.Fatalf("set --shard: %q %v", out, err)
	}
	for _, h := range heads {
		cp, _, _, err := cps(h.Shard).Load(ctx)
		want := h.Position
		if h.Shard == sh {
			want = 1
		}
		if err != nil || cp.Position != want {
			t.Fatalf("shard %d checkpoint after set: %d %v, want %d", h.Shard, cp.Position, err, want)
		}
	}
	out, err = runRelayCLI(ctx, "gaps")
	if err != nil || !strings.Contains(out, "0 ranges") || !strings.Contains(out, "checkpoints by shard") {
		t.Fatalf("gaps: %q %v", out, err)
	}
	replay := prefix + "replay"
	out, err = runRelayCLI(ctx, "republish", "--shard", fmt.Sprint(sh), "--from-position", "1", "--to-position", fmt.Sprint(heads[sh].Position), "--topic", replay)
	if err != nil || !strings.Contains(out, fmt.Sprintf("republished %d records", heads[sh].Position)) {
		t.Fatalf("republish: %q %v", out, err)
	}
	ends := endOffsets(t, k.Brokers, replay, prefix+"commands")
	if replayed, published := ends[replay], ends[prefix+"commands"]; replayed != heads[sh].Position || published != 40 {
		t.Fatalf("records: %d on %s (want %d), %d on commands (want 40)", replayed, replay, heads[sh].Position, published)
	}
}
