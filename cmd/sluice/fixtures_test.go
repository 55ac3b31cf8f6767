package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/envelope"
)

// openEnvStore sets env as the test's process environment (what the
// commands under test read), loads it and opens the event store it names
// on pool, its Config taken from env, writing as writerID ("": a random one). The store is closed at
// the end of the test; closing it earlier is fine.
func openEnvStore(t *testing.T, pool *pgxpool.Pool, env map[string]string, writerID string) (*sluiceconfig.Config, objstore.Bucket, *eventstore.Store) {
	t.Helper()
	cfg := setEnvConfig(t, env)
	bucket, err := backend.Open(context.Background(), cfg.EventStore)
	if err != nil {
		t.Fatal(err)
	}
	sc := cfg.EventStore
	sc.WriterID = writerID
	st, err := eventstore.New(sc, eventstore.Deps{Pool: pool, Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return cfg, bucket, st
}

// setEnvConfig sets env as the test's process environment (what the
// commands under test read) and returns the configuration it loads to.
func setEnvConfig(t *testing.T, env map[string]string) *sluiceconfig.Config {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, err := sluiceconfig.Load(env)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// envDatabase is a fresh migrated database, named in DATABASE_URL for the
// commands under test.
func envDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	url, pool := testenv.NewMigratedDatabase(t)
	t.Setenv("DATABASE_URL", url)
	return pool
}

// envRegistry is envDatabase with a registry on it for owner.
func envRegistry(t *testing.T, owner string) (*pgxpool.Pool, *registry.Registry) {
	t.Helper()
	pool := envDatabase(t)
	reg, err := registry.New(registry.Config{Owner: owner}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	return pool, reg
}

// appendCommands appends n DO_IT commands to the store, the i-th to
// aggregate Order aggID(i), and returns their event ids by position.
func appendCommands(t *testing.T, st *eventstore.Store, n int, aggID func(i int) string) map[int64]string {
	t.Helper()
	ids := map[int64]string{}
	for i := range n {
		res, err := st.AppendOne(context.Background(), envelope.Envelope{
			EventID: uuid.NewString(), EventType: "DO_IT", Kind: envelope.KindCommand,
			AggregateType: "Order", AggregateID: aggID(i), Data: json.RawMessage(`{}`),
		})
		if err != nil || res.Err != nil {
			t.Fatalf("append: %v %v", err, res.Err)
		}
		ids[res.Event.Envelope.Position] = res.Event.Envelope.EventID
	}
	return ids
}

// publishInstanceCreated creates topic (one partition) and produces to it
// one INSTANCE_CREATED of shop:orders:1 at position 1, as the relay would.
func publishInstanceCreated(t *testing.T, brokers []string, topic string) {
	t.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	agg, err := envelope.InstanceAggregateID("shop", "orders", "1")
	if err != nil {
		t.Fatal(err)
	}
	ev := envelope.Envelope{EventID: uuid.NewString(), EventType: "INSTANCE_CREATED", Kind: envelope.KindDomain,
		AggregateType: envelope.AggregateTypeInstance, AggregateID: agg, SequenceNumber: 1, Position: 1,
		OccurredAt: envelope.NewTimestamp(time.Unix(1_700_000_000, 0)), Data: json.RawMessage(`{}`), SchemaVersion: 1}
	raw, err := envelope.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: envelope.KafkaKey(ev), Value: raw}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// checkGuardStep checks one step of a guarded command's table test: it
// fails the test when the command did not exit with wantCode (0: no
// error), and reports each of wantOut missing from its output and error.
func checkGuardStep(t *testing.T, name, out string, err error, wantCode int, wantOut ...string) {
	t.Helper()
	var ex *exitError
	switch {
	case wantCode == 0 && err != nil:
		t.Fatalf("%s: %v\n%s", name, err, out)
	case wantCode != 0 && (!errors.As(err, &ex) || ex.code != wantCode):
		t.Fatalf("%s: want exit %d, got %v\n%s", name, wantCode, err, out)
	}
	for _, w := range wantOut {
		if msg := out + fmt.Sprint(err); !strings.Contains(msg, w) {
			t.Errorf("%s: output lacks %q:\n%s", name, w, msg)
		}
	}
}
