package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/testskip"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/envelope"
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

// relayTestEnv is the environment of the relay command tests: a file
// store, the test Kafka under prefix, a fast poll, quiet logs; kv adds or
// overrides variables, as name, value pairs.
func relayTestEnv(t *testing.T, url string, k *testenv.Kafka, prefix string, kv ...string) map[string]string {
	t.Helper()
	if len(kv)%2 != 0 {
		t.Fatalf("relayTestEnv: %q is not name, value pairs", kv)
	}
	env := map[string]string{
		"DATABASE_URL": url, "EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": t.TempDir(),
		"KAFKA_BROKERS": strings.Join(k.Brokers, ","), "KAFKA_TOPIC_PREFIX": prefix,
		"KAFKA_TOPIC_REPLICATION_FACTOR": "1", "KAFKA_TOPIC_PARTITIONS": "2",
		"SLUICE_HTTP_ADDR": "127.0.0.1:0", "EVENT_PUBLISHER_POLL_INTERVAL": "100ms",
		"EVENT_PUBLISHER_METRICS_LOG_INTERVAL_SECONDS": "0", "SLUICE_LOG_LEVEL": "warn",
	}
	for i := 0; i < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return env
}

// checkpointAt is true once the checkpoint in cps is at position.
func checkpointAt(cps *relay.CheckpointStore, position int64) func() bool {
	return func() bool {
		cp, _, found, err := cps.Load(context.Background())
		return err == nil && found && cp.Position == position
	}
}

// runRelayUntil runs the relay service (`sluice relay`) until reached is
// true (checkpointAt), then stops it; it fails the test when the service
// fails or reached is not true within a minute.
func runRelayUntil(t *testing.T, what string, reached func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		out, err := runRelayCLI(ctx)
		if err != nil {
			t.Log(out)
		}
		done <- err
	}()
	testenv.WaitFor(t, time.Minute, what, reached)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("relay service: %v", err)
	}
}

// endOffsets returns the end offsets of topics, summed over partitions.
func endOffsets(t *testing.T, brokers []string, topics ...string) map[string]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topics...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Topic] += o.Offset })
	return out
}

// The relay commands on the file backend and kfake: run the service until it
// caught up, then show, move, list gaps and republish.
func TestRelayCommands(t *testing.T) {
	ctx := context.Background()
	url, pool := testenv.NewMigratedDatabase(t)
	k := testenv.NewKafka(t)
	prefix := testenv.UniqueName("cli") + "."
	env := relayTestEnv(t, url, k, prefix)
	cfg, bucket, st := openEnvStore(t, pool, env, "")
	appendCommands(t, st, 5, func(i int) string { return fmt.Sprintf("o-%d", i%2) })

	out, err := runRelayCLI(ctx, "checkpoint", "show")
	if err != nil || !strings.Contains(out, "no checkpoint") {
		t.Fatalf("show before: %q %v", out, err)
	}

	// The service, until it has published everything.
	cps := relay.NewCheckpointStore(bucket, cfg.Relay.CheckpointKey)
	runRelayUntil(t, "the relay service to publish everything", checkpointAt(cps, 5))

	out, err = runRelayCLI(ctx, "checkpoint", "show")
	if err != nil || !strings.Contains(out, "position        5") || !strings.Contains(out, "lag             0") || !strings.Contains(out, "lease           expired") {
		t.Fatalf("show: %q %v", out, err)
	}
	if _, err := runRelayCLI(ctx, "checkpoint", "set", "--position", "1", "--time", "2026-01-01T00:00:00Z"); err == nil {
		t.Fatal("set with both --position and --time must fail")
	}
	out, err = runRelayCLI(ctx, "checkpoint", "set", "--position", "2", "--yes")
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
	ends := endOffsets(t, k.Brokers, replay, prefix+"commands")
	if replayed, published := ends[replay], ends[prefix+"commands"]; replayed != 3 || published != 5 {
		t.Fatalf("records: %d on %s (want 3), %d on commands (want 5)", replayed, replay, published)
	}
}

// TestRelayParkedCommands: `sluice relay parked list|show|republish|drop`
// on the file backend and kfake. Two records routed to a topic the broker
// refuses to create are parked by the relay service, which moves on; list
// and show report them with their reason; republish and drop need --yes
// (or --dry-run, which changes nothing); a republish refused by Kafka
// fails with its error and leaves the record parked; once the broker takes
// the topic, republish produces it and drop drops the other.
func TestRelayParkedCommands(t *testing.T) {
	ctx := context.Background()
	url, pool := testenv.NewMigratedDatabase(t)
	k := testenv.NewKafka(t)
	if k.Cluster == nil {
		testskip.Skip(t, "needs kfake fault injection")
	}
	prefix := testenv.UniqueName("cli") + "."
	refusedTopic := prefix + "refused"
	fault := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Topic: refusedTopic, Err: kerr.InvalidTopicException, Count: -1})
	env := relayTestEnv(t, url, k, prefix, "EVENT_PUBLISHER_PARK_AFTER_ATTEMPTS", "2")
	cfg, bucket, st := openEnvStore(t, pool, env, "")
	ids := map[int64]string{}
	for i := range 4 {
		e := envelope.Envelope{
			EventID: uuid.NewString(), EventType: "DO_IT", Kind: envelope.KindCommand,
			AggregateType: "Order", AggregateID: fmt.Sprintf("o-%d", i), Data: json.RawMessage(`{}`),
		}
		if i == 1 || i == 2 {
			e.Metadata.SetString(envelope.MetaKafkaTopic, refusedTopic)
		}
		res, err := st.AppendOne(ctx, e)
		if err != nil || res.Err != nil {
			t.Fatalf("append: %v %v", err, res.Err)
		}
		ids[res.Event.Envelope.Position] = e.EventID
	}

	cps := relay.NewCheckpointStore(bucket, cfg.Relay.CheckpointKey)
	runRelayUntil(t, "the relay to pass the refused records", checkpointAt(cps, 4))

	out, err := runRelayCLI(ctx, "parked", "list")
	if err != nil || !strings.Contains(out, "2 records") || strings.Count(out, "invalid_topic") != 2 || !strings.Contains(out, ids[2]) || !strings.Contains(out, ids[3]) {
		t.Fatalf("list: %q %v", out, err)
	}
	if out, err := runRelayCLI(ctx, "parked", "list", "--reason", "too_large"); err != nil || !strings.Contains(out, "0 records") {
		t.Fatalf("list --reason too_large: %q %v", out, err)
	}
	out, err = runRelayCLI(ctx, "parked", "show", "--position", "2")
	if err != nil || !strings.Contains(out, ids[2]) || !strings.Contains(out, "invalid_topic") || !strings.Contains(out, refusedTopic) || !strings.Contains(out, `"event_id":"`+ids[2]) {
		t.Fatalf("show: %q %v", out, err)
	}
	if out, err := runRelayCLI(ctx, "parked", "show", "--position", "9"); err == nil {
		t.Fatalf("show of a position that is not parked: %q, want an error", out)
	}

	// Without --yes: refused; --dry-run: nothing changes.
	if out, err := runRelayCLI(ctx, "parked", "republish", "--position", "2"); err == nil || !strings.Contains(err.Error(), "--yes") || exitCode(err) != exitNeedsConfirmation {
		t.Fatalf("republish without --yes: %q %v", out, err)
	}
	if out, err := runRelayCLI(ctx, "parked", "republish", "--position", "2", "--dry-run"); err != nil || !strings.Contains(out, "dry run") {
		t.Fatalf("republish --dry-run: %q %v", out, err)
	}
	if out, err := runRelayCLI(ctx, "parked", "drop", "--position", "3", "--dry-run"); err != nil || !strings.Contains(out, "dry run") {
		t.Fatalf("drop --dry-run: %q %v", out, err)
	}
	// Still refused by the broker: an error naming it, still parked.
	if out, err := runRelayCLI(ctx, "parked", "republish", "--position", "2", "--yes"); err == nil || !strings.Contains(err.Error(), "INVALID_TOPIC_EXCEPTION") {
		t.Fatalf("republish while the topic is refused: %q %v", out, err)
	}
	if out, err := runRelayCLI(ctx, "parked", "list"); err != nil || !strings.Contains(out, "2 records") {
		t.Fatalf("list after refused republish and dry runs: %q %v", out, err)
	}

	fault.Remove()
	if out, err := runRelayCLI(ctx, "parked", "republish", "--position", "2", "--yes"); err != nil || !strings.Contains(out, "republished parked position 2") {
		t.Fatalf("republish: %q %v", out, err)
	}
	if out, err := runRelayCLI(ctx, "parked", "drop", "--position", "3", "--yes"); err != nil || !strings.Contains(out, "dropped parked position 3") {
		t.Fatalf("drop: %q %v", out, err)
	}
	if out, err := runRelayCLI(ctx, "parked", "drop", "--position", "3", "--yes"); err == nil {
		t.Fatalf("second drop: %q, want an error (no longer parked)", out)
	}
	out, err = runRelayCLI(ctx, "parked", "list", "--state", "all")
	if err != nil || !strings.Contains(out, "republished") || !strings.Contains(out, "dropped") {
		t.Fatalf("list --state all: %q %v", out, err)
	}
	if out, err := runRelayCLI(ctx, "parked", "list"); err != nil || !strings.Contains(out, "0 records") {
		t.Fatalf("list after resolving: %q %v", out, err)
	}
	ends := endOffsets(t, k.Brokers, refusedTopic, prefix+"commands")
	if republished, published := ends[refusedTopic], ends[prefix+"commands"]; republished != 1 || published != 2 {
		t.Fatalf("records: %d on %s (want the 1 republished), %d on commands (want 2)", republished, refusedTopic, published)
	}
}

// TestConfigCheckSizeBudget: `sluice config check` fails when the Kafka
// budget (KAFKA_MAX_MESSAGE_BYTES) is below what an envelope at
// EVENT_STORE_MAX_ENVELOPE_BYTES needs, naming the variable; the derived
// budget passes.
func TestConfigCheckSizeBudget(t *testing.T) {
	cases := []struct {
		name, maxMsg, envelope, want string
	}{
		{"derived", "", "", "configuration OK"},
		{"large enough", "2000000", "", "configuration OK"},
		{"franz-go default below the envelope limit", "1000012", "", "KAFKA_MAX_MESSAGE_BYTES=1000012"},
		{"envelope limit raised past an explicit budget", "1100000", "2097152", "KAFKA_MAX_MESSAGE_BYTES=1100000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DATABASE_URL", "postgres://u:p@localhost:5432/db")
			t.Setenv("KAFKA_MAX_MESSAGE_BYTES", tc.maxMsg)
			if tc.envelope != "" {
				t.Setenv("EVENT_STORE_MAX_ENVELOPE_BYTES", tc.envelope)
			}
			var out bytes.Buffer
			c := newConfigCmd()
			c.SetOut(&out)
			c.SetErr(&out)
			c.SetArgs([]string{"check"})
			err := c.Execute()
			got := out.String()
			if err != nil {
				got += err.Error()
			}
			if !strings.Contains(got, tc.want) || (tc.want == "configuration OK") != (err == nil) {
				t.Errorf("config check: %q (err %v), want %q", got, err, tc.want)
			}
		})
	}
}

// TestCheckpointMovedLine: relay checkpoint set says whether it moved the
// checkpoint forward, back, or not at all; run twice it said "moved
// forward: 30 -> 30".
func TestCheckpointMovedLine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to int64
		want     string
	}{
		{"back", 41, 30, "moved back (positions after it are published again): 41 -> 30"},
		{"forward", 30, 41, "moved forward: 30 -> 41"},
		{"same position", 30, 30, "unchanged: already at 30"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkpointMovedLine("checkpoints/default.json", tc.from, tc.to); !strings.Contains(got, tc.want) {
				t.Errorf("%q, want %q", got, tc.want)
			}
		})
	}
}

// TestRelayRepublishSideTopicDefaultEnv: relay republish --topic creates
// the side topic with the cluster's default replication factor unless
// KAFKA_TOPIC_REPLICATION_FACTOR is set, as dlq's handled topic does; with
// the variable unset (config default 3) it failed on the one-broker dev
// Kafka with INVALID_REPLICATION_FACTOR. Set, it is used.
func TestRelayRepublishSideTopicDefaultEnv(t *testing.T) {
	ctx := context.Background()
	k := testenv.NewKafka(t)
	for _, tc := range []struct {
		name string
		rf   string // "" unset
	}{
		{"replication factor unset", ""},
		{"replication factor 1", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, pool := testenv.NewMigratedDatabase(t)
			prefix := testenv.UniqueName("side") + "."
			_, _, st := openEnvStore(t, pool, relayTestEnv(t, url, k, prefix), "")
			if tc.rf == "" {
				if err := os.Unsetenv("KAFKA_TOPIC_REPLICATION_FACTOR"); err != nil { // restored by t.Setenv
					t.Fatal(err)
				}
			} else {
				t.Setenv("KAFKA_TOPIC_REPLICATION_FACTOR", tc.rf)
			}
			appendCommands(t, st, 3, func(i int) string { return fmt.Sprintf("o-%d", i) })
			replay := prefix + "replay"
			out, err := runRelayCLI(ctx, "republish", "--from-position", "1", "--to-position", "3", "--topic", replay)
			if err != nil || !strings.Contains(out, "republished 3 records") {
				t.Fatalf("republish --topic %s: %q %v", replay, out, err)
			}
			if n := endOffsets(t, k.Brokers, replay)[replay]; n != 3 {
				t.Fatalf("%d records on %s, want 3", n, replay)
			}
		})
	}
}
