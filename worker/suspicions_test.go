package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/failure"
)

// The suspicions of issue 21, each confirmed (a test that failed before
// its fix) or refuted (a test that proves it does not happen).

// ownerRegistry is a registry of owner on pool (several owners share one
// database, as workers do).
func ownerRegistry(t *testing.T, pool *pgxpool.Pool, owner string, lease time.Duration) *registry.Registry {
	t.Helper()
	reg, err := registry.New(registry.Config{Owner: owner, LeaseTimeout: lease, HeartbeatInterval: 100 * time.Millisecond,
		BackoffBase: 5 * time.Millisecond, BackoffCap: 20 * time.Millisecond}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// healer is a Handler that is also a Healer.
type healer struct {
	HandlerFunc
	heal func(ctx context.Context, rec *Record, wait claim.Result) error
}

func (h healer) Heal(ctx context.Context, rec *Record, wait claim.Result) error {
	return h.heal(ctx, rec, wait)
}

// Confirmed: a heal (wait-for-predecessor) that fails for good was retried
// forever, holding the record (and the commit of its partition) with no
// trace but a log line. Now a permanent failure dead-letters the waiting
// record at once, and retryable ones (or panics) after MaxAttempts, with
// "heal: …" as the reason; the partition moves on. Before the fix each
// subtest timed out waiting for the dead letter.
func TestHealFailureIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       func() error
		class     string
		wantTries int32
	}{
		{"permanent", func() error { return Permanent(errors.New("slot 1 is not a command")) }, ClassPermanent, 1},
		{"retryable", func() error { return Retryable(errors.New("store says no")) }, ClassRetryable, 3},
		{"panic", func() error { panic("heal exploded") }, ClassRetryable, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			brokers, topic, produce := oneTopic(t, "heal-")
			var tries atomic.Int32
			h := healer{
				HandlerFunc: func(context.Context, *Record) (claim.Outcome, error) { return claim.Applied(), nil },
				heal: func(context.Context, *Record, claim.Result) error {
					tries.Add(1)
					return tc.err()
				},
			}
			id := uuid.NewString()
			produce(thingRecord(t, id, "gap", 2, 2)) // slot 1 never arrives: WAIT, heal due after the lease (1 s)
			c, _ := startConsumer(t, brokers, topic, Config{Policy: claim.WaitForPredecessor, MaxAttempts: 3}, Deps{Registry: realRegistry(t, "w1", time.Second), Handler: h})
			testenv.WaitFor(t, 30*time.Second, "the waiting record dead-lettered", func() bool { return committedOffset(c, topic) == 1 })
			dl := readTopic(t, brokers, topic+".dlq")
			if len(dl) != 1 {
				t.Fatalf("%d dead letters, want 1", len(dl))
			}
			var d DLQRecord
			if err := json.Unmarshal(dl[0].Value, &d); err != nil {
				t.Fatal(err)
			}
			if d.ErrorClass != tc.class || !strings.HasPrefix(d.Error, "heal: ") || d.AttemptCount != int(tc.wantTries) || tries.Load() != tc.wantTries {
				t.Errorf("dead letter class %s error %q attempts %d after %d heals; want %s, heal: …, %d", d.ErrorClass, d.Error,
					d.AttemptCount, tries.Load(), tc.class, tc.wantTries)
			}
		})
	}
}

// flakyMarkFailed is a real registry whose MarkFailed reports an outage
// while fail is set.
type flakyMarkFailed struct {
	*registry.Registry
	fail  atomic.Bool
	fails atomic.Int32
}

func (f *flakyMarkFailed) MarkFailed(ctx context.Context, l claim.Lease, fl claim.Failure) (claim.FailResult, error) {
	if f.fail.Load() {
		f.fails.Add(1)
		return claim.FailResult{}, &registry.UnavailableError{Op: "mark failed", Err: errors.New("connection refused")}
	}
	return f.Registry.MarkFailed(ctx, l, fl)
}

// Confirmed: a worker that drains on shutdown after a dead letter was
// acknowledged but before the row was marked dead (MarkFailed hit an
// outage) released the claim; the next owner ran the record again and
// wrote a second dead letter. The drain now marks the row dead; the next
// owner gets DEAD and writes nothing. Before the fix: 2 dead letters.
func TestDrainWritesNoDuplicateDeadLetter(t *testing.T) {
	brokers, topic, produce := oneTopic(t, "drain-")
	_, pool := testenv.NewMigratedDatabase(t)
	bad, after := uuid.NewString(), uuid.NewString()
	h := HandlerFunc(func(_ context.Context, rec *Record) (claim.Outcome, error) {
		if rec.Envelope.EventID == bad {
			return claim.Outcome{}, Permanent(errors.New("unknown command"))
		}
		return claim.Applied(), nil
	})
	produce(thingRecord(t, bad, "a", 1, 1))
	flaky := &flakyMarkFailed{Registry: ownerRegistry(t, pool, "w1", 10*time.Second)}
	flaky.fail.Store(true)
	// Long backoffs: after the failed MarkFailed nothing is retried before
	// the drain.
	_, stop1 := startConsumer(t, brokers, topic, Config{Settings: Settings{Backoff: claim.Backoff{RetryBackoffBase: time.Minute}}, OutageBackoffCap: 2 * time.Minute}, Deps{Registry: flaky, Handler: h})
	testenv.WaitFor(t, 30*time.Second, "the dead letter acked and MarkFailed refused", func() bool {
		return flaky.fails.Load() > 0 && len(readTopic(t, brokers, topic+".dlq")) == 1
	})
	flaky.fail.Store(false) // Postgres is back as the worker drains
	stop1()

	produce(thingRecord(t, after, "b", 1, 2))
	c2, _ := startConsumer(t, brokers, topic, Config{}, Deps{Registry: ownerRegistry(t, pool, "w2", 10*time.Second), Handler: h})
	testenv.WaitFor(t, 30*time.Second, "the next owner past both records", func() bool { return committedOffset(c2, topic) == 2 })
	if dl := readTopic(t, brokers, topic+".dlq"); len(dl) != 1 {
		t.Errorf("%d dead letters for one dead record, want 1", len(dl))
	}
	row, err := flaky.GetRow(context.Background(), "h", bad)
	if err != nil || row.Status != claim.StatusDead {
		t.Errorf("row %+v %v, want dead", row, err)
	}
}

// Confirmed: claims held on a partition that is revoked (here: parked in
// a dependency outage) stayed leased to the old owner — its heartbeats
// even went on — so the new owner got IN_PROGRESS for as long as the lease
// lived. Revocation now hands the claims back (Release) and the new owner
// claims them at once. Before the fix the test timed out waiting for the
// new owner to apply the record.
func TestRevokedPartitionHandsBackClaims(t *testing.T) {
	topic := testenv.UniqueName("revoke-")
	k := testenv.NewKafka(t, kfake.SeedTopics(2, topic, topic+".dlq"))
	brokers := k.Brokers
	pcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	ids := []string{uuid.NewString(), uuid.NewString()}
	for p, id := range ids {
		r := thingRecord(t, id, "agg"+id[:4], 1, int64(p+1))
		r.Partition = int32(p)
		if err := pcl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	_, pool := testenv.NewMigratedDatabase(t)
	var mu sync.Mutex
	held := map[string]bool{}   // by the first owner (its Elasticsearch is out)
	applied := map[string]int{} // by the second
	// The first owner answers the outage only once it holds both records:
	// once an outage is on, a worker that holds claims retries those and
	// claims nothing new, so a record fetched after the first answer would
	// never be held (the two partitions may arrive in separate polls).
	bothHeld := make(chan struct{})
	down := HandlerFunc(func(ctx context.Context, rec *Record) (claim.Outcome, error) {
		mu.Lock()
		if !held[rec.Envelope.EventID] {
			held[rec.Envelope.EventID] = true
			if len(held) == 2 {
				close(bothHeld)
			}
		}
		mu.Unlock()
		select {
		case <-bothHeld:
		case <-ctx.Done():
		case <-time.After(20 * time.Second):
		}
		return claim.Outcome{}, Outage(failure.Elasticsearch, refused())
	})
	up := HandlerFunc(func(_ context.Context, rec *Record) (claim.Outcome, error) {
		mu.Lock()
		applied[rec.Envelope.EventID]++
		mu.Unlock()
		return claim.Applied(), nil
	})
	lease := 10 * time.Minute // the new owner must not wait for it
	startConsumer(t, brokers, topic, Config{OutageBackoffCap: 50 * time.Millisecond}, Deps{Registry: ownerRegistry(t, pool, "w1", lease), Handler: down})
	testenv.WaitFor(t, 30*time.Second, "both records claimed and parked by the first owner", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(held) == 2
	})
	startConsumer(t, brokers, topic, Config{}, Deps{Registry: ownerRegistry(t, pool, "w2", lease), Handler: up})
	testenv.WaitFor(t, 60*time.Second, "the second owner applies the record of the partition it took over", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(applied) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	for id, n := range applied {
		if n != 1 {
			t.Errorf("event %s applied %d times, want 1", id, n)
		}
	}
}
