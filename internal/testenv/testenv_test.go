package testenv_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testenv"
)

var s3 *testenv.MinIO

func TestMain(m *testing.M) { os.Exit(testenv.RunWithMinIO(m, func(mi *testenv.MinIO) { s3 = mi })) }

func TestPostgresDatabasePerTest(t *testing.T) {
	ctx := context.Background()
	a := testenv.NewDatabase(t)
	b := testenv.NewDatabase(t)
	if a == b {
		t.Fatal("two tests got the same database")
	}
	conn, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var db string
	if err := conn.QueryRow(ctx, "select current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(db, "sluice_test_") || !strings.Contains(a, db) {
		t.Fatalf("connected to %q through %q", db, a)
	}
}

func TestMigratedDatabaseHasSchema(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	var n int
	if err := pool.QueryRow(context.Background(), `select count(*) from sluice.schema_migrations where is_applied`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n < 1 {
		t.Fatalf("no migration recorded as applied")
	}
}

func TestMinIOConditionalCreateAndRestart(t *testing.T) {
	ctx := context.Background()
	bucket := s3.NewBucket(t)
	c, err := s3.Client()
	if err != nil {
		t.Fatal(err)
	}
	put := func() error {
		opts := minio.PutObjectOptions{}
		opts.SetMatchETagExcept("*") // If-None-Match: *
		_, err := c.PutObject(ctx, bucket, "segments/x.jsonl", bytes.NewReader([]byte("line\n")), 5, opts)
		return err
	}
	if err := put(); err != nil {
		t.Fatalf("first conditional create: %v", err)
	}
	err = put()
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) || resp.StatusCode != 412 {
		t.Fatalf("second conditional create: want 412, got %v", err)
	}
	if os.Getenv("SLUICE_TEST_S3_ENDPOINT") != "" {
		return
	}
	s3.Stop()
	if _, err := c.StatObject(ctx, bucket, "segments/x.jsonl", minio.StatObjectOptions{}); err == nil {
		t.Fatal("stat succeeded while MinIO was stopped")
	}
	if err := s3.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	obj, err := c.GetObject(ctx, bucket, "segments/x.jsonl", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	if err != nil || string(got) != "line\n" {
		t.Fatalf("after restart: %q %v", got, err)
	}
}

func TestKafkaRoundTrip(t *testing.T) {
	k := testenv.NewKafka(t)
	topic := testenv.UniqueName("t-")
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(topic), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal("no record consumed")
		}
		var got *kgo.Record
		fs.EachRecord(func(r *kgo.Record) { got = r })
		if got != nil {
			if string(got.Key) != "k" || string(got.Value) != "v" {
				t.Fatalf("got %q=%q", got.Key, got.Value)
			}
			return
		}
	}
}

// TestMinIODataParent: SLUICE_MINIO_DATA_DIR wins; without it the data goes
// to /dev/shm when that is a tmpfs with room, else to the temp directory;
// and the running server's data folder is under the chosen parent.
func TestMinIODataParent(t *testing.T) {
	want := os.TempDir()
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err == nil && int64(st.Type) == 0x01021994 && st.Bavail*uint64(st.Bsize) >= 1<<30 {
		want = "/dev/shm"
	}
	for _, tc := range []struct{ env, want string }{
		{"", want},
		{"/var/tmp/minio-on-disk", "/var/tmp/minio-on-disk"},
	} {
		t.Setenv("SLUICE_MINIO_DATA_DIR", tc.env)
		if got := testenv.MinIODataParent(); got != tc.want {
			t.Errorf("SLUICE_MINIO_DATA_DIR=%q: MinIODataParent() = %q, want %q", tc.env, got, tc.want)
		}
	}
	if os.Getenv("SLUICE_TEST_S3_ENDPOINT") == "" && !strings.HasPrefix(s3.DataDir(), want+string(os.PathSeparator)) {
		t.Errorf("MinIO's data folder %q is not under %q", s3.DataDir(), want)
	}
}

func TestStep(t *testing.T) {
	var ran []string
	t.Run("script", func(t *testing.T) {
		testenv.Step(t, "one", func(t *testing.T) { ran = append(ran, "one") })
		testenv.Step(t, "two", func(t *testing.T) { ran = append(ran, "two") })
	})
	if got := strings.Join(ran, ","); got != "one,two" {
		t.Fatalf("steps ran %q, want one,two", got)
	}
}
