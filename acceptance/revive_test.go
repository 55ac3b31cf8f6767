package acceptance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/eventstoretest"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/s3store"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/observability"
)

// lostPutBucket is a bucket whose writes never arrive and whose reads fail
// as during an outage: a writer using it leaves its reservation behind
// exactly as one that crashed between reservation and PUT.
type lostPutBucket struct{ objstore.Bucket }

func (lostPutBucket) Create(context.Context, string, []byte) (objstore.ObjectInfo, error) {
	return objstore.ObjectInfo{}, objstore.ErrUnavailable
}

func (lostPutBucket) Get(context.Context, string) ([]byte, objstore.ObjectInfo, error) {
	return nil, objstore.ObjectInfo{}, objstore.ErrUnavailable
}

// Issue 21 item 2, end to end on real Postgres, MinIO and kfake: a
// reservation left by a dead writer is abandoned by the relay after the
// append timeout, the relay's checkpoint passes it and its pending gap
// leaves the bounded lookback; then the producer retries the append with
// the same event_id. The retry is acknowledged, so the relay must publish
// it (docs/architecture.md#no-lost-work) — it did not while the store re-committed the event at
// its old position, behind the checkpoint.
func TestAbandonedAppendRetriedAfterTheLookbackIsPublished(t *testing.T) {
	const appendTimeout, lookback = time.Second, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, pool := testenv.NewMigratedDatabase(t)
	mi := sharedMinIO(t)
	bucket, err := s3store.New(ctx, s3store.Options{Bucket: mi.NewBucket(t), Endpoint: mi.Endpoint, PathStyle: true,
		AccessKeyID: mi.AccessKey, SecretAccessKey: mi.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	storeCfg := eventstore.Config{GroupCommitMaxWait: 2 * time.Millisecond, GroupCommitMaxEvents: 500, AppendTimeout: appendTimeout}
	open := func(b objstore.Bucket) *eventstore.Store {
		st, err := eventstore.New(storeCfg, eventstore.Deps{Pool: pool, Bucket: b, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	store, dead := open(bucket), open(lostPutBucket{bucket})
	cmd := func(id string) envelope.Envelope {
		return envelope.Envelope{EventID: uuid.NewString(), EventType: "DO_SOMETHING", Kind: envelope.KindCommand,
			AggregateType: "Order", AggregateID: id, Data: json.RawMessage(`{"n":1}`),
			OccurredAt: envelope.NewTimestamp(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))}
	}
	retried := cmd("retried")
	if _, err := store.AppendOne(ctx, cmd("before")); err != nil {
		t.Fatal(err)
	}
	if _, err := dead.AppendOne(ctx, retried); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("append through the dead writer: %v, want the write error", err)
	}
	after, err := store.AppendOne(ctx, cmd("after"))
	if err != nil {
		t.Fatal(err)
	}

	kf := testenv.NewKafka(t)
	prefix := testenv.UniqueName("revive") + "."
	const cpKey = "checkpoints/revive.json"
	r, err := relay.New(relay.Config{Name: "revive", CheckpointKey: cpKey, BatchSize: 200, KafkaFlushBatchSize: 200,
		KafkaFlushTimeout: 2 * time.Second, PollInterval: 100 * time.Millisecond, LeaderLease: 2 * time.Second,
		ParallelGets: 8, StallAfter: time.Minute, Lookback: lookback, LookbackMaxKeys: 50,
		DedupMaxEvents: 10000, DedupCheckpointMaxEvents: 2000, AppendTimeout: appendTimeout,
	}, relay.Deps{Store: store, Bucket: bucket, Pool: pool,
		Kafka:  kafka.Config{Brokers: kf.Brokers, TopicPrefix: prefix, TopicPartitions: 1, ReplicationFactor: 1},
		Logger: log,
		Health: observability.NewHealth(),
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunInBackground(t, "relay Run", r.Run, r.Close)

	// The relay abandons the dead reservation, passes it, and lets its
	// pending gap leave the lookback.
	cps := relay.NewCheckpointStore(bucket, cpKey)
	testenv.WaitFor(t, time.Minute, "the relay's checkpoint past the abandoned position with no pending gap", func() bool {
		cp, _, found, err := cps.Load(ctx)
		return err == nil && found && cp.Position >= after.Event.Envelope.Position && len(cp.PendingGaps) == 0
	})
	var state string
	rows, err := eventstoretest.Select(ctx, pool, eventstoretest.Filter{EventID: retried.EventID})
	if err == nil && len(rows) != 1 {
		err = fmt.Errorf("%d rows", len(rows))
	} else if err == nil {
		state = rows[0].State
	}
	if err != nil || state != eventstore.StateAbandoned {
		t.Fatalf("dead writer's row: %q %v, want abandoned", state, err)
	}

	// The producer retries: acknowledged, so it must reach Kafka.
	res, err := store.AppendOne(ctx, retried)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	t.Logf("retry acknowledged at position %d, sequence %d", res.Event.Envelope.Position, res.Event.Envelope.SequenceNumber)
	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.Brokers...), kgo.ConsumeTopics(prefix+"commands"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]int{}
	testenv.WaitFor(t, time.Minute, "the acknowledged retry published", func() bool {
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer pcancel()
		cl.PollFetches(pctx).EachRecord(func(rec *kgo.Record) {
			for _, h := range rec.Headers {
				if h.Key == "event_id" {
					seen[string(h.Value)]++
				}
			}
		})
		return seen[retried.EventID] > 0
	})
	if seen[retried.EventID] != 1 {
		t.Errorf("the retried event was published %d times", seen[retried.EventID])
	}
}

type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
