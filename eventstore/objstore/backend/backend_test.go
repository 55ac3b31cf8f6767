package backend_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/eventstore/objstore/s3store"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/config"
)

var minio *testenv.MinIO

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithMinIO(m, func(mi *testenv.MinIO) { minio = mi }))
}

// loadConfig reads the configuration from an environment map, as the
// binaries do, so the test covers the real variable names.
func loadConfig(t *testing.T, env map[string]string) eventstore.Config {
	t.Helper()
	var c eventstore.Config
	if err := config.Parse(&c, env); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestOpenFileCreatesRoot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "yet")
	cfg := loadConfig(t, map[string]string{"EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": dir})
	b, err := backend.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(*filestore.Bucket); !ok {
		t.Fatalf("Open(file) = %T", b)
	}
	if _, err := b.Create(t.Context(), "segments/a.jsonl", []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sluice-events", "segments", "a.jsonl")); err != nil {
		t.Fatalf("object not below FILE_DIR/BUCKET: %v", err)
	}
}

func TestOpenS3(t *testing.T) {
	bucket := minio.NewBucket(t)
	cfg := loadConfig(t, map[string]string{
		"EVENT_STORE_BACKEND":              "s3",
		"EVENT_STORE_BUCKET":               bucket,
		"EVENT_STORE_S3_ENDPOINT":          minio.Endpoint,
		"EVENT_STORE_S3_ACCESS_KEY_ID":     minio.AccessKey,
		"EVENT_STORE_S3_SECRET_ACCESS_KEY": minio.SecretKey,
	})
	b, err := backend.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(*s3store.Bucket); !ok {
		t.Fatalf("Open(s3) = %T", b)
	}
	if _, err := b.Create(t.Context(), "segments/a.jsonl", []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
}

func TestOpenS3MissingBucketViaMinIOBootstrap(t *testing.T) {
	bucket := "sluice-boot-" + testenv.RandomSuffix(8)
	cfg := loadConfig(t, map[string]string{
		"EVENT_STORE_BACKEND":              "s3",
		"EVENT_STORE_BUCKET":               bucket,
		"EVENT_STORE_S3_ENDPOINT":          minio.Endpoint,
		"EVENT_STORE_S3_ACCESS_KEY_ID":     minio.AccessKey,
		"EVENT_STORE_S3_SECRET_ACCESS_KEY": minio.SecretKey,
	})
	_, err := backend.Open(t.Context(), cfg)
	if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), bucket) {
		t.Fatalf("Open on a missing bucket = %v, want ErrNotFound naming the bucket", err)
	}
	mc, err := backend.MinIO(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := mc.EnsureBucket(t.Context(), bucket); err != nil {
		t.Fatal(err)
	}
	if _, err := backend.Open(t.Context(), cfg); err != nil {
		t.Fatalf("Open after EnsureBucket: %v", err)
	}
}

func TestOpenS3Unreachable(t *testing.T) {
	cfg := loadConfig(t, map[string]string{
		"EVENT_STORE_BACKEND":              "s3",
		"EVENT_STORE_S3_ENDPOINT":          "http://127.0.0.1:1",
		"EVENT_STORE_S3_ACCESS_KEY_ID":     "a",
		"EVENT_STORE_S3_SECRET_ACCESS_KEY": "secret-value-not-logged",
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := backend.Open(ctx, cfg)
	if !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("Open on a closed port = %v, want ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), "secret-value-not-logged") {
		t.Fatalf("error leaks the secret: %v", err)
	}
}

func TestUnknownBackend(t *testing.T) {
	if _, err := backend.Open(t.Context(), eventstore.Config{Backend: "gcs", Bucket: "b"}); err == nil {
		t.Fatal("Open accepted an unknown backend")
	}
}
