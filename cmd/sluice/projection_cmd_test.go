package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/shared/esserver"
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
