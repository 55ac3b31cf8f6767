package main

import (
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
)

// openReadStoreDeps opens config, pool, bucket and store for a command that
// only reads the event store (store segments|cat, relay checkpoint
// show|gaps, verify): the bucket is opened without the conditional-create
// self-test, whose probe is a write, so read-only credentials (an S3 user
// with only s3:GetObject and s3:ListBucket, MinIO's readonly policy) are
// enough. Nothing these commands do writes to the bucket.
func openReadStoreDeps(cmd *cobra.Command) (*storeDeps, func(), error) {
	cfg, logger, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	pool, err := openPool(cmd, cfg)
	if err != nil {
		return nil, nil, err
	}
	bucket, err := backend.New(cmd.Context(), cfg.EventStore)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	st, err := eventstore.New(pool, bucket, eventstore.Options{Config: cfg.EventStore, Logger: logger})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return &storeDeps{cfg: cfg, logger: logger, pool: pool, bucket: bucket, store: st}, func() { _ = st.Close(); pool.Close() }, nil
}

// openReadStore is openReadStoreDeps for commands that need only the store.
func openReadStore(cmd *cobra.Command) (*eventstore.Store, func(), error) {
	d, closeFn, err := openReadStoreDeps(cmd)
	if err != nil {
		return nil, nil, err
	}
	return d.store, closeFn, nil
}
