package main

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/envelope"
)

// storeDeps are what the commands that touch the event store open: config,
// logger, pool, bucket (self-tested) and store. The close func releases them.
type storeDeps struct {
	cfg    *config.Config
	logger *slog.Logger
	pool   *pgxpool.Pool
	bucket objstore.Bucket
	store  *eventstore.Store
}

func openStoreDeps(cmd *cobra.Command) (*storeDeps, func(), error) {
	cfg, logger, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	pool, err := openPool(cmd, cfg)
	if err != nil {
		return nil, nil, err
	}
	bucket, err := backend.Open(cmd.Context(), cfg.EventStore)
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

// openStore opens the configured event store; the caller calls the returned close.
func openStore(cmd *cobra.Command) (*eventstore.Store, func(), error) {
	d, closeFn, err := openStoreDeps(cmd)
	if err != nil {
		return nil, nil, err
	}
	return d.store, closeFn, nil
}

// envelopeLimits are the store's envelope limits (EVENT_STORE_MAX_*).
func envelopeLimits(c config.EventStore) envelope.Limits {
	return envelope.Limits{
		MaxEnvelopeBytes: c.MaxEnvelopeBytes,
		MaxDataDepth:     c.MaxDataDepth,
		MaxMetadataBytes: c.MaxMetadataBytes,
	}
}
