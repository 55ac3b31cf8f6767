package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/eventstoretest"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/envelope"
)

// The store commands on the file backend: append through the library, then
// list, print (by range, aggregate, event id), repair and reindex via the CLI.
func TestStoreCommands(t *testing.T) {
	ctx := context.Background()
	url, pool := testenv.NewMigratedDatabase(t)
	env := map[string]string{"DATABASE_URL": url, "EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": t.TempDir()}
	_, _, st := openEnvStore(t, pool, env, "")
	var ids []string
	for i, agg := range []string{"shop:orders:1", "shop:orders:2", "shop:orders:1"} {
		id := uuid.NewString()
		ids = append(ids, id)
		res, err := st.AppendOne(ctx, envelope.Envelope{
			EventID: id, EventType: "INSTANCE_CREATED", Kind: envelope.KindDomain,
			AggregateType: "Instance", AggregateID: agg, Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
		})
		if err != nil || res.Err != nil {
			t.Fatalf("append %d: %v %v", i, err, res.Err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	out, _, err := run(t, "store", "segments")
	if err != nil || !strings.Contains(out, "segments/") || !strings.Contains(out, "3 positions") {
		t.Fatalf("segments: %q %v", out, err)
	}
	out, _, err = run(t, "store", "cat", "--from", "2", "--to", "3")
	if err != nil || strings.Count(out, "\n") != 2 || !strings.Contains(out, ids[1]) || strings.Contains(out, ids[0]) {
		t.Fatalf("cat range: %q %v", out, err)
	}
	out, _, err = run(t, "store", "cat", "--aggregate-type", "Instance", "--aggregate-id", "shop:orders:1")
	if err != nil || strings.Count(out, "\n") != 2 || !strings.Contains(out, ids[0]) || !strings.Contains(out, ids[2]) {
		t.Fatalf("cat aggregate: %q %v", out, err)
	}
	out, _, err = run(t, "store", "cat", "--event-id", ids[1])
	if err != nil || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"position":2`) {
		t.Fatalf("cat event: %q %v", out, err)
	}
	if _, _, err := run(t, "store", "cat", "--aggregate-id", "x"); err == nil {
		t.Fatal("cat --aggregate-id without type must fail")
	}
	out, _, err = run(t, "store", "repair")
	if err != nil || !strings.Contains(out, "0 rows committed, 0 abandoned") {
		t.Fatalf("repair: %q %v", out, err)
	}
	if err := eventstoretest.DeleteRows(ctx, pool); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, "store", "reindex", "--yes")
	if err != nil || !strings.Contains(out, "3 events, 2 aggregates") || !strings.Contains(out, "next position 4") {
		t.Fatalf("reindex: %q %v", out, err)
	}
	n, err := eventstoretest.Count(ctx, pool, eventstoretest.Filter{State: eventstore.StateCommitted})
	if err != nil || n != 3 {
		t.Fatalf("after reindex: %d committed rows, %v", n, err)
	}
}

// TestStoreReindexGuard (issue 27.2): reindex is refused (even with --yes)
// while a writer reserved positions within the quiet window; once the
// writers are quiet it refuses to act without --yes on a non-terminal,
// prints its plan on --dry-run without changing the index, and rebuilds it
// with --yes, with a --json summary.
func TestStoreReindexGuard(t *testing.T) {
	ctx := context.Background()
	url, pool := testenv.NewMigratedDatabase(t)
	env := map[string]string{"DATABASE_URL": url, "EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": t.TempDir()}
	_, _, st := openEnvStore(t, pool, env, "api-7")
	for i := range 3 {
		res, err := st.AppendOne(ctx, envelope.Envelope{
			EventID: uuid.NewString(), EventType: "INSTANCE_CREATED", Kind: envelope.KindDomain,
			AggregateType: "Instance", AggregateID: fmt.Sprintf("shop:orders:%d", i), Data: json.RawMessage(`{}`),
		})
		if err != nil || res.Err != nil {
			t.Fatalf("append %d: %v %v", i, err, res.Err)
		}
	}
	rows := func() int {
		n, err := eventstoretest.Count(ctx, pool, eventstoretest.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	// The writer is live: it reserved just now. Its lost row is what reindex
	// would restore, and it must not while the writer may append.
	if err := eventstoretest.DeleteRows(ctx, pool, 3); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name     string
		before   func() error // run first
		args     []string
		wantCode int
		wantOut  []string
		wantRows int
	}{
		{"live writer", nil, []string{"--yes"}, exitUnsafe, []string{"a writer is live", "api-7"}, 2},
		{"no --yes on a non-terminal", func() error { return eventstoretest.AgeReservations(ctx, pool, time.Hour) }, nil, exitNeedsConfirmation, []string{"pass --yes"}, 2},
		{"dry run", nil, []string{"--dry-run"}, 0, []string{"read 3 segments (3 positions", "replace 2 index rows", "nothing changed"}, 2},
		{"act", nil, []string{"--yes", "--json"}, 0, []string{`"events": 3`, `"events_per_second"`}, 3},
	}
	for _, s := range steps {
		if s.before != nil {
			if err := s.before(); err != nil {
				t.Fatal(err)
			}
		}
		out, _, err := run(t, append([]string{"store", "reindex"}, s.args...)...)
		checkGuardStep(t, s.name, out, err, s.wantCode, s.wantOut...)
		if got := rows(); got != s.wantRows {
			t.Fatalf("%s: %d index rows, want %d", s.name, got, s.wantRows)
		}
	}
}

// TestStoreFlagHelp: the help of store flags says what they do. repair's
// --older-than said "abandon reservations older than this", but a
// reservation without a segment is abandoned only once older than the
// append timeout, whatever --older-than (eventstore.Repair): the flag
// chooses which reservations repair looks at.
func TestStoreFlagHelp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cmd     *cobra.Command
		flag    string
		says    []string
		notSays string
	}{
		{"repair --older-than", newStoreRepairCmd(), "older-than",
			[]string{"look at reservations at least this old", "abandoned only once older than EVENT_STORE_APPEND_TIMEOUT"}, "abandon reservations older than this"},
		{"reindex --quiet-for", newStoreReindexCmd(), "quiet-for",
			[]string{"at least EVENT_STORE_APPEND_TIMEOUT"}, "> 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			usage := tc.cmd.Flags().Lookup(tc.flag).Usage
			for _, s := range tc.says {
				if !strings.Contains(usage, s) {
					t.Errorf("--%s help %q does not say %q", tc.flag, usage, s)
				}
			}
			if strings.Contains(usage, tc.notSays) {
				t.Errorf("--%s help %q still says %q", tc.flag, usage, tc.notSays)
			}
		})
	}
}

// TestReindexError: an interrupted reindex says that the index it was
// replacing is as it was and to run it again; it said only "read
// segments/…: context canceled". Other errors are left as they are.
func TestReindexError(t *testing.T) {
	canceled := fmt.Errorf("eventstore: reindex: read segments/1-1.jsonl: %w", context.Canceled)
	other := errors.New("eventstore: reindex: boom")
	for _, tc := range []struct {
		name    string
		err     error
		servers bool
		want    string
	}{
		{"interrupted", canceled, false, "context canceled: reindex interrupted; nothing changed (the index is replaced in one transaction); run it again"},
		{"interrupted, several servers", canceled, true, "reindex interrupted; the server it was reindexing keeps its index as it was"},
		{"another error", other, false, "eventstore: reindex: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := eventstore.DefaultConfig()
			if tc.servers {
				cfg.Shards, cfg.ShardMap = 2, "0-0=postgres://a/sluice,1-1=postgres://b/sluice"
			}
			got := reindexError(tc.err, cfg)
			if !errors.Is(got, tc.err) || !strings.Contains(got.Error(), tc.want) {
				t.Errorf("%q, want it to wrap %v and say %q", got, tc.err, tc.want)
			}
			if tc.err == other && got.Error() != other.Error() {
				t.Errorf("%q, want the error unchanged", got)
			}
		})
	}
}
