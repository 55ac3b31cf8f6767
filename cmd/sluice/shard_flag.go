package main

import (
	"github.com/spf13/cobra"
)

// The --shard flag of the commands that read or move one shard's
// positions (relay checkpoint|gaps|republish, store segments): one
// decision of which shards a command means, so that every command refuses
// the same values with the same words.

// shardFlag adds --shard to c, -1 when not set.
func shardFlag(c *cobra.Command, shard *int, usage string) {
	c.Flags().IntVar(shard, "shard", -1, usage)
}

// shardArg checks --shard against a store of n shards: -1 (not set) is
// every shard of a store of more than one (-1 returned), or shard 0 of a
// store of one; required refuses -1 for a store of more than one shard.
func shardArg(n, shard int, required bool) (int, error) {
	n = max(n, 1)
	switch {
	case shard >= n || shard < -1:
		return 0, usage("--shard %d: the store has %d shard(s), 0..%d", shard, n, n-1)
	case shard >= 0:
		return shard, nil
	case n == 1:
		return 0, nil
	case required:
		return 0, usage("the store has %d shards, each with its own positions: name one with --shard (0..%d)", n, n-1)
	}
	return -1, nil
}

// openShardStore is the prologue of a command of one shard (or, unless
// required, of every shard): it opens the store's deps with open
// (openStoreDeps, or openReadStoreDeps for a command that only reads) and
// checks --shard against the store (shardArg). The close func releases the
// deps; on an error they are released already.
func openShardStore(cmd *cobra.Command, open func(*cobra.Command) (*storeDeps, func(), error), shard int, required bool) (*storeDeps, int, func(), error) {
	d, closeFn, err := open(cmd)
	if err != nil {
		return nil, 0, nil, err
	}
	sh, err := shardArg(d.store.Shards(), shard, required)
	if err != nil {
		closeFn()
		return nil, 0, nil, err
	}
	return d, sh, closeFn, nil
}
