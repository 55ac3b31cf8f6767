// Package backend provides Open, which builds the objstore.Bucket that the
// configuration names (EVENT_STORE_BACKEND: s3 or file) and refuses it
// unless it passes objstore.SelfTest — so no sluice process ever runs on a
// store that could overwrite a segment (docs/objstore.md#backends).
//
// It lives apart from objstore because it imports both backends, which
// import objstore.
package backend

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/eventstore/objstore/minioext"
	"github.com/sluicehq/sluice/eventstore/objstore/s3store"
)

// Open builds the configured backend and runs objstore.SelfTest on it.
// The file backend's root is EVENT_STORE_FILE_DIR/EVENT_STORE_BUCKET,
// created if missing; the s3 bucket must exist (see minioext.EnsureBucket
// for dev and tests). Errors wrap objstore.ErrUnavailable when the store
// could not be reached, so callers may retry, and
// objstore.ErrNoConditionalCreate when it must never be used.
func Open(ctx context.Context, cfg eventstore.Config) (objstore.Bucket, error) {
	b, err := New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := objstore.SelfTest(ctx, b); err != nil {
		if c, ok := b.(interface{ Close() error }); ok {
			_ = c.Close()
		}
		return nil, fmt.Errorf("event store %s backend (bucket %s): %w", cfg.Backend, cfg.Bucket, err)
	}
	return b, nil
}

// New builds the configured backend without the self-test, for tools that
// only read.
func New(ctx context.Context, cfg eventstore.Config) (objstore.Bucket, error) {
	switch cfg.Backend {
	case "s3":
		b, err := s3store.New(ctx, S3Options(cfg))
		if err != nil {
			return nil, err
		}
		return b, nil
	case "file":
		if cfg.FileDir == "" {
			return nil, fmt.Errorf("event store: EVENT_STORE_FILE_DIR must be set when EVENT_STORE_BACKEND=file")
		}
		b, err := filestore.New(filepath.Join(cfg.FileDir, cfg.Bucket))
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	return nil, fmt.Errorf("event store: EVENT_STORE_BACKEND=%q: want s3 or file", cfg.Backend)
}

// S3Options maps the EVENT_STORE_S3_* settings to s3store.Options.
func S3Options(cfg eventstore.Config) s3store.Options {
	return s3store.Options{
		Bucket:          cfg.Bucket,
		Endpoint:        cfg.S3Endpoint,
		Region:          cfg.S3Region,
		PathStyle:       cfg.S3PathStyle,
		AccessKeyID:     cfg.S3AccessKeyID,
		SecretAccessKey: cfg.S3SecretAccessKey.Value(),
		Timeout:         cfg.ObjectTimeout,
	}
}

// MinIO returns a minioext client for the configured S3 endpoint (bucket
// bootstrap, notifications); it needs EVENT_STORE_S3_ENDPOINT.
func MinIO(cfg eventstore.Config) (*minioext.Client, error) {
	return minioext.New(minioext.Options{
		Endpoint:        cfg.S3Endpoint,
		Region:          cfg.S3Region,
		AccessKeyID:     cfg.S3AccessKeyID,
		SecretAccessKey: cfg.S3SecretAccessKey.Value(),
	})
}
