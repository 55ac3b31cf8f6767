package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/envelope"

	"github.com/sluicehq/sluice/internal/esserver"
	"github.com/sluicehq/sluice/shared/readmodel"
	"github.com/sluicehq/sluice/shared/testenv"
)

// runProjection runs the projection commands on a root of their own (the
// lead wires them into newRootCmd).
func runProjection(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := &cobra.Command{Use: "sluice", SilenceUsage: true, SilenceErrors: true}
	root.SetOut(&out)
	root.SetErr(&errb)
	root.AddCommand(newProjectionCmd(), newProjectionWorkerCmd())
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

func TestProjectionCommands(t *testing.T) {
	url, _ := testenv.NewMigratedDatabase(t)
	kafka := testenv.NewKafka(t)
	ts := httptest.NewServer(esserver.New())
	t.Cleanup(ts.Close)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("ELASTICSEARCH_URLS", ts.URL)
	t.Setenv("KAFKA_BROKERS", strings.Join(kafka.Brokers, ","))
	t.Setenv("EVENTS_TOPIC", testenv.UniqueName("events-"))
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{ts.URL}})
	if err != nil {
		t.Fatal(err)
	}
	// instances v1 is live for db "shop" (as the instance worker creates it).
	if _, err := readmodel.EnsureIndex(context.Background(), es, "sluice_", "shop", 1); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args    []string
		want    []string
		wantErr string
	}{
		{[]string{"projection", "list"}, []string{"instances", "history", "v1"}, ""},
		{[]string{"projection", "status", "instances"}, []string{"sluice_shop_instances_v1", "yes"}, ""},
		{[]string{"projection", "rebuild", "instances", "--version", "1"}, nil, "already live"},
		{[]string{"projection", "rebuild", "instances"}, nil, "--version"},
		{[]string{"projection", "rollback", "instances"}, nil, "no older version"},
		{[]string{"projection", "status", "nope"}, nil, "unknown projection"},
		{[]string{"projection-worker", "--projections", "nope"}, nil, "unknown projection"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, _, err := runProjection(t, tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestProjectionRebuildGuard (issue 27.2): with instances v2 live and v1
// kept, and a v3 index left by an earlier build, rebuild refuses v1 (older:
// pointing to rollback) and v3 (it exists) even with --yes; a fresh v4
// needs --yes on a non-terminal, prints its plan on --dry-run without
// creating anything, and with --yes builds fresh v4 indices and swaps to
// them.
func TestProjectionRebuildGuard(t *testing.T) {
	ctx := context.Background()
	url, _ := testenv.NewMigratedDatabase(t)
	kafka := testenv.NewKafka(t)
	ts := httptest.NewServer(esserver.New())
	t.Cleanup(ts.Close)
	events := testenv.UniqueName("events-")
	t.Setenv("DATABASE_URL", url)
	t.Setenv("ELASTICSEARCH_URLS", ts.URL)
	t.Setenv("KAFKA_BROKERS", strings.Join(kafka.Brokers, ","))
	t.Setenv("EVENTS_TOPIC", events)
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{ts.URL}})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, events); err != nil {
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
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: events, Key: envelope.KafkaKey(ev), Value: raw}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := readmodel.EnsureIndex(ctx, es, "sluice_", "shop", 1); err != nil {
		t.Fatal(err)
	}
	p, err := projectionworker.Lookup("instances")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{2, 3} {
		res, err := es.Indices.Create(projectionworker.IndexNames("sluice_", "shop", "instances", v).Index)
		if err != nil || res.IsError() {
			t.Fatalf("create v%d: %v %v", v, err, res)
		}
		res.Body.Close()
	}
	if _, err := projectionworker.SwapAliases(ctx, es, "sluice_", p, 2); err != nil {
		t.Fatal(err)
	}
	live := func() (versions string) {
		idx, err := projectionworker.Indices(ctx, es, "sluice_", "instances")
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range idx {
			versions += fmt.Sprintf("v%d", i.Version)
			if i.Live {
				versions += "*"
			}
		}
		return versions
	}
	steps := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantIdx  string // versions afterwards, * = live
	}{
		{"older than live", []string{"--version", "1", "--yes"}, exitUnsafe, "use `sluice projection rollback instances`", "v1v2*v3"},
		{"existing index", []string{"--version", "3", "--yes"}, exitUnsafe, "rebuild as v4", "v1v2*v3"},
		{"no --yes on a non-terminal", []string{"--version", "4"}, exitNeedsConfirmation, "pass --yes", "v1v2*v3"},
		{"dry run", []string{"--version", "4", "--dry-run"}, 0, "create sluice_shop_instances_v4; consumer group sluice.projection-instances-v4", "v1v2*v3"},
		{"act", []string{"--version", "4", "--yes", "--settle", "0s", "--json"}, 0, `"to": 4`, "v1v2v3v4*"},
	}
	for _, s := range steps {
		out, _, err := runProjection(t, append([]string{"projection", "rebuild", "instances"}, s.args...)...)
		var ex *exitError
		switch {
		case s.wantCode == 0 && err != nil:
			t.Fatalf("%s: %v\n%s", s.name, err, out)
		case s.wantCode != 0 && (!errors.As(err, &ex) || ex.code != s.wantCode):
			t.Fatalf("%s: want exit %d, got %v\n%s", s.name, s.wantCode, err, out)
		}
		if msg := out + fmt.Sprint(err); !strings.Contains(msg, s.wantOut) {
			t.Errorf("%s: output lacks %q:\n%s", s.name, s.wantOut, msg)
		}
		if got := live(); got != s.wantIdx {
			t.Fatalf("%s: indices %s, want %s", s.name, got, s.wantIdx)
		}
	}
}
