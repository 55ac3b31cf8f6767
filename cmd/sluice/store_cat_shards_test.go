package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/envelope"
)

// On a store of four shards `store cat` reads the log by cursor: every
// event once, the cursor to resume after on stderr; resuming from it
// prints only what was appended since; --limit stops early with the
// cursor after the last event printed; --from names positions of a
// one-shard store and is refused; an aggregate or an event id is read as
// on any store.
func TestStoreCatShards(t *testing.T) {
	ctx := context.Background()
	url, pool := testenv.NewMigratedDatabase(t)
	env := map[string]string{"DATABASE_URL": url, "EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": t.TempDir(), "EVENT_STORE_SHARDS": "4"}
	_, _, st := openEnvStore(t, pool, env, "")
	appendN := func(n int) []string {
		var ids []string
		for i := range n {
			id := uuid.NewString()
			ids = append(ids, id)
			res, err := st.AppendOne(ctx, envelope.Envelope{EventID: id, EventType: "INSTANCE_CREATED", Kind: envelope.KindDomain,
				AggregateType: "Instance", AggregateID: fmt.Sprintf("shop:orders:%d", i), Data: json.RawMessage(`{}`)})
			if err != nil || res.Err != nil {
				t.Fatalf("append %d: %v %v", i, err, res.Err)
			}
		}
		return ids
	}
	idsIn := func(out string) []string {
		var ids []string
		for line := range strings.Lines(out) {
			var e struct {
				EventID string `json:"event_id"`
			}
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			ids = append(ids, e.EventID)
		}
		slices.Sort(ids)
		return ids
	}
	cursorIn := func(stderr string) string {
		_, c, ok := strings.Cut(stderr, "cursor: ")
		if !ok {
			t.Fatalf("no cursor in %q", stderr)
		}
		return strings.TrimSpace(c)
	}
	first := appendN(8)
	slices.Sort(first)

	out, stderr, err := run(t, "store", "cat")
	if err != nil || fmt.Sprint(idsIn(out)) != fmt.Sprint(first) || !strings.Contains(stderr, "8 events") {
		t.Fatalf("cat: %q %q %v", out, stderr, err)
	}
	cur := cursorIn(stderr)
	if c, err := eventstore.ParseCursor(cur); err != nil || c.Shards() != 4 {
		t.Fatalf("cursor %q: %v", cur, err)
	}

	second := appendN(3)
	slices.Sort(second)
	out, stderr, err = run(t, "store", "cat", "--cursor", cur)
	if err != nil || fmt.Sprint(idsIn(out)) != fmt.Sprint(second) {
		t.Fatalf("cat --cursor %s: %q %q %v", cur, out, stderr, err)
	}

	out, stderr, err = run(t, "store", "cat", "--limit", "5")
	if err != nil || len(idsIn(out)) != 5 {
		t.Fatalf("cat --limit 5: %q %q %v", out, stderr, err)
	}
	rest, stderr2, err := run(t, "store", "cat", "--cursor", cursorIn(stderr))
	all := append(idsIn(out), idsIn(rest)...)
	slices.Sort(all)
	if want := slices.Sorted(slices.Values(append(slices.Clone(first), second...))); err != nil || fmt.Sprint(all) != fmt.Sprint(want) {
		t.Fatalf("cat --limit 5 then the rest: %d events, want %d (%q %v)", len(all), len(want), stderr2, err)
	}

	if _, _, err := run(t, "store", "cat", "--from", "2"); err == nil || !strings.Contains(err.Error(), "4 shards") {
		t.Fatalf("cat --from on 4 shards: %v", err)
	}
	if _, _, err := run(t, "store", "cat", "--cursor", "12"); err == nil || !strings.Contains(err.Error(), "names 1 shard(s) but the store has 4") {
		t.Fatalf("cat --cursor 12 on 4 shards: %v", err)
	}
	out, _, err = run(t, "store", "cat", "--aggregate-type", "Instance", "--aggregate-id", "shop:orders:1")
	if err != nil || strings.Count(out, "\n") != 2 {
		t.Fatalf("cat aggregate: %q %v", out, err)
	}

	// store segments per shard: the shards' listings together hold every
	// position of every shard once (11 events), each shard's from 1 up.
	heads, err := st.Heads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for _, h := range heads {
		out, _, err := run(t, "store", "segments", "--shard", strconv.Itoa(h.Shard))
		if err != nil {
			t.Fatalf("segments --shard %d: %v", h.Shard, err)
		}
		want := fmt.Sprintf("%d positions", h.Position)
		if !strings.Contains(out, want) {
			t.Fatalf("segments --shard %d: %q, want %q (its head)", h.Shard, out, want)
		}
		total += h.Position
	}
	if total != 11 {
		t.Fatalf("the shards' heads sum to %d, want the 11 events", total)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"store", "segments"}, "the store has 4 shards, each with its own positions: name one with --shard (0..3)"},
		{[]string{"store", "segments", "--shard", "4"}, "--shard 4: the store has 4 shard(s), 0..3"},
	} {
		if _, _, err := run(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v on 4 shards: %v, want %q", tc.args, err, tc.want)
		}
	}
}
