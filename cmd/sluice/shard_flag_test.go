package main

import (
	"strings"
	"testing"
)

// TestShardArg pins the one --shard decision the relay and store
// commands share: what a value means on a store of one shard and of
// several, and which values are refused (with the store's shard count).
func TestShardArg(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n, shard int
		required bool
		want     int
		err      string
	}{
		{name: "one shard, not set", n: 1, shard: -1, want: 0},
		{name: "one shard, not set, required", n: 1, shard: -1, required: true, want: 0},
		{name: "unsharded store counts as one", n: 0, shard: -1, required: true, want: 0},
		{name: "one shard, shard 0", n: 1, shard: 0, want: 0},
		{name: "one shard, shard 1", n: 1, shard: 1, err: "--shard 1: the store has 1 shard(s), 0..0"},
		{name: "four shards, not set: every shard", n: 4, shard: -1, want: -1},
		{name: "four shards, not set, required", n: 4, shard: -1, required: true, err: "the store has 4 shards, each with its own positions: name one with --shard (0..3)"},
		{name: "four shards, shard 3", n: 4, shard: 3, required: true, want: 3},
		{name: "four shards, shard 4", n: 4, shard: 4, err: "--shard 4: the store has 4 shard(s), 0..3"},
		{name: "below -1", n: 4, shard: -2, err: "--shard -2: the store has 4 shard(s), 0..3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := shardArg(tc.n, tc.shard, tc.required)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("shardArg(%d, %d, %v) = %d, %v; want error %q", tc.n, tc.shard, tc.required, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("shardArg(%d, %d, %v) = %d, %v; want %d", tc.n, tc.shard, tc.required, got, err, tc.want)
			}
		})
	}
}
