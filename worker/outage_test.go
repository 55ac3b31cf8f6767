package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/failure"
	"github.com/sluicehq/sluice/shared/observability"
)

// realRegistry is a registry on a fresh migrated database, with a short
// heartbeat so that leases kept alive during a test show it.
func realRegistry(t *testing.T, owner string, lease time.Duration) *registry.Registry {
	t.Helper()
	_, pool := testenv.NewMigratedDatabase(t)
	reg, err := registry.New(registry.Config{Owner: owner, LeaseTimeout: lease, HeartbeatInterval: 100 * time.Millisecond,
		BackoffBase: 5 * time.Millisecond, BackoffCap: 20 * time.Millisecond}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// readTopic returns every record of topic (all partitions) present now; a
// topic that does not exist has none.
func readTopic(t *testing.T, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			want[o.Partition] = kgo.NewOffset().AtStart()
			left[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return nil
	}
	cc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var out []*kgo.Record
	for len(left) > 0 {
		fs := cc.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s: %v", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset < end {
				out = append(out, r)
				if r.Offset == end-1 {
					delete(left, r.Partition)
				}
			}
		})
	}
	return out
}

// refused is what a dial to a closed port returns.
func refused() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// TestHandlerOutagePauses: a handler whose dependency is out (an
// OutageError, or an unclassified connection refused that failure.Classify
// calls an outage) for a while spends no attempt: afterwards every record
// is applied exactly once, nothing is in the DLQ, every registry row is
// done at attempt 1; during the outage the lease was heartbeated, the
// readiness check named the dependency and the gauge was 1; afterwards
// both are green again, without help.
func TestHandlerOutagePauses(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  func() error
		dep  string
	}{
		{"OutageError", func() error { return Outage(failure.Elasticsearch, refused()) }, failure.Elasticsearch},
		{"unclassified connection refused", func() error { return fmt.Errorf("index document: %w", refused()) }, "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			brokers, topic, produce := oneTopic(t, "outage-")
			reg := realRegistry(t, "w1", 2*time.Second)
			health := observability.NewHealth()
			var (
				down     atomic.Bool
				answers  atomic.Int32
				mu       sync.Mutex
				applied  = map[string]int{}
				firstIDs []string
			)
			down.Store(true)
			h := HandlerFunc(func(_ context.Context, rec *Record) (claim.Outcome, error) {
				if down.Load() {
					answers.Add(1)
					return claim.Outcome{}, tc.err()
				}
				mu.Lock()
				defer mu.Unlock()
				applied[rec.Envelope.EventID]++
				return claim.Applied(), nil
			})
			var recs []*kgo.Record
			for i := range 6 {
				id := uuid.NewString()
				firstIDs = append(firstIDs, id)
				recs = append(recs, thingRecord(t, id, fmt.Sprintf("a%d", i%3), int64(i/3+1), int64(i+1)))
			}
			produce(recs...)
			c, _ := startConsumer(t, brokers, topic, Config{MaxAttempts: 2, OutageBackoffCap: 50 * time.Millisecond}, Deps{Registry: reg, Handler: h, Health: health})
			ctx := context.Background()

			check := "h:" + tc.dep
			testenv.WaitFor(t, 20*time.Second, "readiness red naming the dependency", func() bool {
				err := health.Ready(ctx)
				return err != nil && strings.Contains(err.Error(), check) && strings.Contains(err.Error(), tc.dep+" unavailable")
			})
			if g := testutil.ToFloat64(c.m.depOutage.WithLabelValues("h", tc.dep)); g != 1 {
				t.Errorf("sluice_worker_dependency_outage{dependency=%q} = %v during the outage, want 1", tc.dep, g)
			}
			if !c.InOutage() {
				t.Error("InOutage false during the outage")
			}
			// Many more outage answers than the retry budget, and the lease
			// of a held claim heartbeated while it waits.
			testenv.WaitFor(t, 20*time.Second, "outage answers past the budget", func() bool { return answers.Load() > 20 })
			row, err := reg.GetRow(ctx, "h", firstIDs[0])
			if err != nil {
				t.Fatal(err)
			}
			if row.Status != claim.StatusProcessing {
				t.Fatalf("row during the outage: %+v, want processing", row)
			}
			testenv.WaitFor(t, 20*time.Second, "the parked lease heartbeated", func() bool {
				r, err := reg.GetRow(ctx, "h", firstIDs[0])
				return err == nil && r.HeartbeatAt.After(row.HeartbeatAt) && r.LeaseToken == row.LeaseToken
			})
			down.Store(false)
			testenv.WaitFor(t, 30*time.Second, "every record committed", func() bool { return committedOffset(c, topic) == int64(len(recs)) })
			testenv.WaitFor(t, 20*time.Second, "readiness green again", func() bool { return health.Ready(ctx) == nil })

			mu.Lock()
			defer mu.Unlock()
			for _, id := range firstIDs {
				if applied[id] != 1 {
					t.Errorf("event %s applied %d times, want 1", id, applied[id])
				}
				row, err := reg.GetRow(ctx, "h", id)
				if err != nil {
					t.Fatal(err)
				}
				if row.Status != claim.StatusDone || row.Attempts != 1 {
					t.Errorf("row %s: status %s attempts %d, want done at attempt 1", id, row.Status, row.Attempts)
				}
			}
			if dl := readTopic(t, brokers, topic+".dlq"); len(dl) != 0 {
				t.Errorf("%d dead letters after an outage, want 0: %s", len(dl), dl[0].Value)
			}
			if g := testutil.ToFloat64(c.m.depOutage.WithLabelValues("h", tc.dep)); g != 0 {
				t.Errorf("sluice_worker_dependency_outage = %v after the outage, want 0", g)
			}
			if c.InOutage() {
				t.Error("InOutage true after the outage")
			}
		})
	}
}

// TestOutageEndsOnAnyAnswer: when the dependency is back but answers the
// held record with a permanent failure (dead-lettered: its own fault), the
// outage is over all the same — readiness does not stay red with nothing
// left to probe it.
func TestOutageEndsOnAnyAnswer(t *testing.T) {
	brokers, topic, produce := oneTopic(t, "outage-end-")
	health := observability.NewHealth()
	var down atomic.Bool
	down.Store(true)
	h := HandlerFunc(func(context.Context, *Record) (claim.Outcome, error) {
		if down.Load() {
			return claim.Outcome{}, Outage(failure.Elasticsearch, refused())
		}
		return claim.Outcome{}, Permanent(errors.New("mapping conflict"))
	})
	produce(thingRecord(t, "", "a", 1, 1))
	c, _ := startConsumer(t, brokers, topic, Config{OutageBackoffCap: 50 * time.Millisecond}, Deps{Registry: realRegistry(t, "w1", 10*time.Second), Handler: h, Health: health})
	ctx := context.Background()
	testenv.WaitFor(t, 20*time.Second, "readiness red", func() bool { return health.Ready(ctx) != nil })
	down.Store(false)
	testenv.WaitFor(t, 20*time.Second, "the record dead-lettered", func() bool { return committedOffset(c, topic) == 1 })
	testenv.WaitFor(t, 20*time.Second, "readiness green with nothing left to probe", func() bool { return health.Ready(ctx) == nil })
	if dl := readTopic(t, brokers, topic+".dlq"); len(dl) != 1 {
		t.Errorf("%d dead letters, want 1 (the permanent failure)", len(dl))
	}
}
