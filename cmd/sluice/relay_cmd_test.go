package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/testenv"
)

// runRelayCLI executes `sluice relay args...` in-process.
func runRelayCLI(ctx context.Context, args ...string) (string, error) {
	var out, errb bytes.Buffer
	c := newRelayCmd()
	c.SetOut(&out)
	c.SetErr(&errb)
	c.SetArgs(args)
	err := c.ExecuteContext(ctx)
	return out.String() + errb.String(), err
}

// The relay commands on the file backend and kfake: run the service until it
// caught up, then show, move, list gaps and republish.
func TestRelayCommands(t *testing.T) {
	ctx := context.Background()
	url, pool := testenv.NewMigratedDatabase(t)
	k := testenv.NewKafka(t)
	prefix := testenv.UniqueName("cli") + "."
	env := map[string]string{
		"DATABASE_URL": url, "EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": t.TempDir(),
		"KAFKA_BROKERS": strings.Join(k.Brokers, ","), "KAFKA_TOPIC_PREFIX": prefix,
		"KAFKA_TOPIC_REPLICATION_FACTOR": "1", "KAFKA_TOPIC_PARTITIONS": "2",
		"SLUICE_HTTP_ADDR": "127.0.0.1:0", "EVENT_PUBLISHER_POLL_INTERVAL": "100ms",
		"EVENT_PUBLISHER_METRICS_LOG_INTERVAL_SECONDS": "0", "SLUICE_LOG_LEVEL": "warn",
	}
	for key, v := range env {
		t.Setenv(key, v)
	}
	cfg, err := config.Load(env)
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := backend.Open(ctx, cfg.EventStore)
	if err != nil {
		t.Fatal(err)
	}
	st, err := eventstore.New(pool, bucket, eventstore.Options{Config: cfg.EventStore})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	for i := range 5 {
		res, err := st.AppendOne(ctx, envelope.Envelope{
			EventID: uuid.NewString(), EventType: "DO_IT", Kind: envelope.KindCommand,
			AggregateType: "Order", AggregateID: fmt.Sprintf("o-%d", i%2), Data: json.RawMessage(`{}`),
		})
		if err != nil || res.Err != nil {
			t.Fatalf("append: %v %v", err, res.Err)
		}
	}

	out, err := runRelayCLI(ctx, "checkpoint", "show")
	if err != nil || !strings.Contains(out, "no checkpoint") {
		t.Fatalf("show before: %q %v", out, err)
	}

	// The service, until it has published everything.
	cps := relay.NewCheckpointStore(bucket, cfg.Relay.CheckpointKey)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		out, err := runRelayCLI(rctx)
		if err != nil {
			t.Log(out)
		}
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cp, _, found, err := cps.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if found && cp.Position == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay service did not publish: checkpoint %+v", cp)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("relay service: %v", err)
	}

	out, err = runRelayCLI(ctx, "checkpoint", "show")
	if err != nil || !strings.Contains(out, "position        5") || !strings.Contains(out, "lag             0") || !strings.Contains(out, "lease           expired") {
		t.Fatalf("show: %q %v", out, err)
	}
	if _, err := runRelayCLI(ctx, "checkpoint", "set", "--position", "1", "--time", "2026-01-01T00:00:00Z"); err == nil {
		t.Fatal("set with both --position and --time must fail")
	}
	out, err = runRelayCLI(ctx, "checkpoint", "set", "--position", "2")
	if err != nil || !strings.Contains(out, "5 -> 2") {
		t.Fatalf("set: %q %v", out, err)
	}
	if cp, _, _, err := cps.Load(ctx); err != nil || cp.Position != 2 || len(cp.RecentEventIDs) != 0 {
		t.Fatalf("after set: %+v %v", cp, err)
	}
	out, err = runRelayCLI(ctx, "gaps")
	if err != nil || !strings.Contains(out, "0 ranges") {
		t.Fatalf("gaps: %q %v", out, err)
	}
	replay := prefix + "replay"
	out, err = runRelayCLI(ctx, "republish", "--from-position", "2", "--to-position", "4", "--topic", replay)
	if err != nil || !strings.Contains(out, "republished 3 records") {
		t.Fatalf("republish: %q %v", out, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, replay, prefix+"commands")
	if err != nil {
		t.Fatal(err)
	}
	var replayed, published int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic == replay {
			replayed += o.Offset
		} else {
			published += o.Offset
		}
	})
	if replayed != 3 || published != 5 {
		t.Fatalf("records: %d on %s (want 3), %d on commands (want 5)", replayed, replay, published)
	}
}
