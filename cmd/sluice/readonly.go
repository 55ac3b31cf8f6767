package main

import (
	"context"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
)

// openReadStoreDeps opens config, pool, bucket and store for a command that
// only reads the event store (store segments|cat, relay checkpoint
// show|gaps, verify): the bucket is opened without the conditional-create
// self-test, whose probe is a write, so read-only credentials (an S3 user
// with only s3:GetObject and s3:ListBucket, MinIO's readonly policy) are
// enough. Nothing these commands do writes to the bucket.
func openReadStoreDeps(cmd *cobra.Command) (*storeDeps, func(), error) {
	return openDepsWith(cmd, func(ctx context.Context, cfg *sluiceconfig.Config, _ *slog.Logger) (objstore.Bucket, error) {
		return backend.New(ctx, cfg.EventStore)
	})
}

// openReadStore is openReadStoreDeps for commands that need only the store.
func openReadStore(cmd *cobra.Command) (*eventstore.Store, func(), error) {
	d, closeFn, err := openReadStoreDeps(cmd)
	if err != nil {
		return nil, nil, err
	}
	return d.store, closeFn, nil
}

// oneShard refuses, at the start of a command that reads the log by one
// global position, a store of more than one shard, which has none
// (*eventstore.ShardsNotSupportedError names the reads by cursor or shard).
func oneShard(cmd *cobra.Command, st *eventstore.Store) error {
	return st.RequireOneShard(cmd.CommandPath())
}
