package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/eventstoretest"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/shared/envelope"
)

const testShards = 4

// shardedAPI is the event API on a store of testShards shards on MinIO,
// its subscriptions woken by the store's commit stream.
func shardedAPI(t *testing.T) *testAPI {
	t.Helper()
	a := newTestAPI(t, apiConfig{minio: true, store: func(c *eventstore.Config) { c.Shards = testShards },
		deps: func(d *Deps) { d.Events = d.Store.(EventLog) }})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h, err := New(Config{SSEPollInterval: time.Hour, SSEHeartbeat: 200 * time.Millisecond},
		Deps{Store: a.store, Registry: a.reg, Sequences: a.store, Events: a.store, Commits: StoreCommits(ctx, a.store)})
	if err != nil {
		t.Fatal(err)
	}
	a.h = h
	return a
}

// logEvent is what the tests read of an envelope the API sent.
type logEvent struct {
	EventID        string `json:"event_id"`
	AggregateID    string `json:"aggregate_id"`
	SequenceNumber int64  `json:"sequence_number"`
	Position       int64  `json:"position"`
}

// committedIDs lists the event_ids of the store's committed rows, sorted,
// leaving out those of shard after position below (a shard held at a
// late block: below 0 leaves out none).
func (a *testAPI) committedIDs(t *testing.T, shard int, below int64) []string {
	t.Helper()
	ids, err := eventstoretest.CommittedIDs(context.Background(), a.pool, shard, below)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// checkOnce fails unless evs are exactly the committed events, each once,
// every aggregate's in its order.
func checkOnce(t *testing.T, what string, evs []logEvent, committed []string) {
	t.Helper()
	var ids []string
	last := map[string]int64{}
	for _, ev := range evs {
		if ev.SequenceNumber <= last[ev.AggregateID] {
			t.Fatalf("%s: aggregate %s sequence %d after %d", what, ev.AggregateID, ev.SequenceNumber, last[ev.AggregateID])
		}
		last[ev.AggregateID] = ev.SequenceNumber
		ids = append(ids, ev.EventID)
	}
	slices.Sort(ids)
	if dup := len(ids) - len(slices.Compact(slices.Clone(ids))); dup > 0 {
		t.Fatalf("%s: %d events twice", what, dup)
	}
	if fmt.Sprint(ids) != fmt.Sprint(committed) {
		t.Fatalf("%s: %d events, %d committed", what, len(ids), len(committed))
	}
}

// On a store of four shards, while writers append to every shard and one
// shard holds a late block (a writer stopped between reservation and
// commit): a reader paging GET /v1/log by cursor and a subscriber cut off
// mid-stream that resumes with its last id each get every committed
// event exactly once, every aggregate in its order; no cursor passes the
// late position, the other shards' cursors reach their heads meanwhile,
// and the late event arrives once it commits. Each SSE id is a cursor
// whose position in the event's shard is the event's position.
func TestLogAndSubscribeAcrossShards(t *testing.T) {
	const late = 2
	a := shardedAPI(t)
	srv := httptest.NewServer(a.h)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // guards a broken build only
	defer cancel()

	release, blocked := make(chan struct{}), make(chan struct{})
	var once sync.Once
	slow, err := eventstore.New(eventstore.Config{Shards: testShards, WriterID: "late-writer", GroupCommitMaxWait: 2 * time.Millisecond, AppendTimeout: time.Hour},
		eventstore.Deps{Pool: a.pool, Bucket: a.bucket},
		eventstore.WithCrasher(crashpoint.Func(func(ctx context.Context, worker, point, _ string) error {
			if worker == eventstore.CrashWorker && point == "after_reserve" {
				once.Do(func() { close(blocked); <-release })
			}
			return nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slow.Close() })
	var relOnce sync.Once
	unblock := func() { relOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before slow closes, should the test end early

	var aggs []string // three aggregates of every shard
	lateID := ""
	per := map[int]int{}
	for i := 0; len(aggs) < 3*testShards || lateID == ""; i++ {
		id := fmt.Sprintf("o-%d", i)
		switch sh := eventstore.ShardOf("Order", id, testShards); {
		case sh == late && lateID == "":
			lateID = id
		case per[sh] < 3:
			per[sh]++
			aggs = append(aggs, id)
		}
	}
	path := func(id string) string { return "/v1/streams/Order/" + id + "/events" }
	for _, id := range aggs[:4] {
		a.do("POST", path(id), appendBody("any", newEvents(2, "ORDER_PLACED")...)).expect(t, http.StatusCreated, "")
	}
	lateDone := make(chan error, 1)
	go func() {
		_, err := slow.Append(ctx, envelope.Envelope{EventID: uuid.NewString(), EventType: "ORDER_PLACED", Kind: envelope.KindDomain,
			AggregateType: "Order", AggregateID: lateID, Data: []byte(`{"late":true}`), OccurredAt: envelope.NewTimestamp(time.Now())})
		lateDone <- err
	}()
	<-blocked
	latePos, err := eventstoretest.ReservedPosition(ctx, a.pool, late)
	if err != nil {
		t.Fatalf("the late reservation: %v", err)
	}

	// The subscriber reads a few events from the beginning, then is cut off.
	var sse []logEvent
	lastID := ""
	cursors := map[int]int64{}
	take := func(got []sseEvent) {
		t.Helper()
		for _, e := range got {
			var ev logEvent
			if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
				t.Fatal(err)
			}
			c, err := eventstore.ParseCursor(e.id)
			if err != nil || c.Shards() != testShards {
				t.Fatalf("SSE id %q: %v", e.id, err)
			}
			sh := eventstore.ShardOf("Order", ev.AggregateID, testShards)
			if c.Position(sh) != ev.Position {
				t.Fatalf("SSE id %s for position %d of shard %d", e.id, ev.Position, sh)
			}
			for s := range testShards {
				if c.Position(s) < cursors[s] {
					t.Fatalf("SSE id %s goes back in shard %d (was %d)", e.id, s, cursors[s])
				}
				cursors[s] = c.Position(s)
			}
			if c.Position(late) >= latePos {
				t.Fatalf("SSE id %s passes shard %d's reserved position %d", e.id, late, latePos)
			}
			sse = append(sse, ev)
			lastID = e.id
		}
	}
	ctx1, cut := context.WithCancel(ctx)
	br := openSSE(t, ctx1, srv.URL+"/v1/log/subscribe?cursor="+eventstore.StartCursor(testShards).String(), "")
	take(sseRead(t, br, 5, time.Minute))
	cut()

	// Writers append to every shard while the reader pages.
	const writers, rounds = 4, 12
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range rounds {
				body := appendBody("any", newEvents(1+n%2, "ORDER_PLACED")...)
				resp, err := http.Post(srv.URL+path(aggs[(w*3+n)%len(aggs)]), "application/json", strings.NewReader(body))
				if err != nil {
					errc <- err
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					errc <- fmt.Errorf("append: %d", resp.StatusCode)
					return
				}
			}
		}()
	}
	writing := make(chan struct{})
	go func() { wg.Wait(); close(writing) }()

	var paged []logEvent
	cursor := ""
	page := func() (n int, next eventstore.Cursor) {
		t.Helper()
		target := "/v1/log?limit=5"
		if cursor != "" {
			target += "&cursor=" + url.QueryEscape(cursor)
		}
		r := a.do("GET", target, "").expect(t, http.StatusOK, "")
		var body struct {
			Events     []logEvent `json:"events"`
			NextCursor string     `json:"next_cursor"`
			NextFrom   *int64     `json:"next_from_position"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		if body.NextFrom != nil {
			t.Fatalf("next_from_position on a store of %d shards: %s", testShards, r.body)
		}
		next, err := eventstore.ParseCursor(body.NextCursor)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, body.Events...)
		cursor = body.NextCursor
		return len(body.Events), next
	}
	drain := func() eventstore.Cursor {
		t.Helper()
		for {
			before := cursor
			n, next := page()
			if n == 0 && cursor == before {
				return next
			}
		}
	}
	for done := false; !done; {
		select {
		case <-writing:
			done = true
		default:
		}
		if _, next := page(); next.Position(late) >= latePos {
			t.Fatalf("next_cursor %s passes shard %d's reserved position %d", next, late, latePos)
		}
	}
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	stuck := drain()
	heads, err := a.store.Heads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range heads {
		want := h.Position
		if h.Shard == late {
			want = latePos - 1
		}
		if stuck.Position(h.Shard) != want {
			t.Fatalf("with shard %d late at %d the reader stopped at %s; heads %+v", late, latePos, stuck, heads)
		}
	}

	// The subscriber resumes with its last id and catches up to the late
	// position.
	committed := a.committedIDs(t, late, latePos) // what the late block does not hold back
	br = openSSE(t, ctx, srv.URL+"/v1/log/subscribe", lastID)
	take(sseRead(t, br, len(committed)-len(sse), time.Minute))
	checkOnce(t, "subscriber before the late commit", sse, committed)
	checkOnce(t, "pager before the late commit", paged, committed)

	unblock()
	if err := <-lateDone; err != nil {
		t.Fatalf("the late append: %v", err)
	}
	heldBack := len(a.committedIDs(t, 0, -1)) - len(committed) // the late event and its shard's above it
	latePos = 1 << 62                                          // from now on ids may pass it
	take(sseRead(t, br, heldBack, time.Minute))
	drain()
	committed = a.committedIDs(t, 0, -1)
	checkOnce(t, "subscriber", sse, committed)
	checkOnce(t, "pager", paged, committed)
	if heldBack < 2 {
		t.Fatalf("%d events held back by the late block: the writers appended nothing above it in shard %d", heldBack, late)
	}
	t.Logf("%d events; subscriber ended at %s", len(committed), lastID)
}

// Cursors the API cannot use are 400 invalid_parameter naming the
// parameter; one of another number of shards names both numbers.
// from_position is refused on a store of several shards; on a store of
// one, the cursor is the position before from_position.
func TestLogCursorParameters(t *testing.T) {
	t.Run("several shards", func(t *testing.T) {
		a := shardedAPI(t)
		a.do("POST", "/v1/streams/Order/o-1/events", appendBody("any", newEvents(2, "ORDER_PLACED")...)).expect(t, http.StatusCreated, "")
		r := a.do("GET", "/v1/log", "").expect(t, http.StatusOK, "")
		if len(r.json["events"].([]any)) != 2 || !strings.HasPrefix(r.str("next_cursor"), "v1.4.") {
			t.Fatalf("%s", r.body)
		}
		for _, tc := range []struct{ target, header, field, detail string }{
			{"/v1/log?cursor=v1.4.0.0", "", "cursor", "2 position(s) where it declares 4 shards"},
			{"/v1/log?cursor=v1.4.0.0.0.01", "", "cursor", "position 3"},
			{"/v1/log?cursor=7", "", "cursor", "names 1 shard(s) but the store has 4"},
			{"/v1/log?cursor=v1.2.0.0", "", "cursor", "names 2 shard(s) but the store has 4"},
			{"/v1/log?from_position=1", "", "from_position", "the store has 4 shards"},
			{"/v1/log?cursor=v1.4.0.0.0.0&from_position=1", "", "cursor", "not both"},
			{"/v1/log/subscribe", "Last-Event-ID: 12", "Last-Event-ID", "names 1 shard(s) but the store has 4"},
			{"/v1/log/subscribe?cursor=v2.4.0.0.0.0", "", "cursor", `starts with "v1."`},
			{"/v1/streams/Order/subscribe?from_position=3", "", "from_position", "the store has 4 shards"},
		} {
			t.Run(tc.target+" "+tc.header, func(t *testing.T) {
				var hs []string
				if tc.header != "" {
					hs = append(hs, tc.header)
				}
				r := a.do("GET", tc.target, "", hs...).expect(t, http.StatusBadRequest, CodeInvalidParameter)
				if r.str("field") != tc.field || !strings.Contains(r.str("detail"), tc.detail) {
					t.Fatalf("field %q detail %q; want %q and %q", r.str("field"), r.str("detail"), tc.field, tc.detail)
				}
			})
		}
		a.do("GET", "/readyz", "").expect(t, http.StatusOK, "")
	})
	t.Run("one shard", func(t *testing.T) {
		a := eventAPI(t, false)
		a.do("POST", devicePath, appendBody("any", newEvents(3, "READING_TAKEN")...)).expect(t, http.StatusCreated, "")
		byPos := a.do("GET", "/v1/log?from_position=2", "").expect(t, http.StatusOK, "")
		byCursor := a.do("GET", "/v1/log?cursor=1", "").expect(t, http.StatusOK, "")
		if string(byPos.body) != string(byCursor.body) || byPos.num("next_from_position") != 4 || byPos.str("next_cursor") != "3" {
			t.Fatalf("from_position=2: %s\ncursor=1: %s", byPos.body, byCursor.body)
		}
		r := a.do("GET", "/v1/log?cursor=v1.4.0.0.0.0", "").expect(t, http.StatusBadRequest, CodeInvalidParameter)
		if r.str("field") != "cursor" || !strings.Contains(r.str("detail"), "names 4 shard(s) but the store has 1") {
			t.Fatalf("%s", r.body)
		}
		r = a.do("GET", "/v1/log/subscribe", "", "Last-Event-ID: x").expect(t, http.StatusBadRequest, CodeInvalidParameter)
		if r.str("field") != "Last-Event-ID" || !strings.Contains(r.str("detail"), "must be a log position") {
			t.Fatalf("%s", r.body)
		}
	})
}

// sseFirstComment reads the comment a subscription starts with.
func sseFirstComment(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, ": ") {
			return strings.TrimSpace(line[2:])
		}
	}
}

// A subscription of a store of several shards without a start begins at
// the log's tail: it says which cursor, and gets what commits afterwards.
func TestSubscribeShardedFromTail(t *testing.T) {
	a := shardedAPI(t)
	srv := httptest.NewServer(a.h)
	t.Cleanup(srv.Close)
	a.do("POST", "/v1/streams/Order/o-1/events", appendBody("any", newEvents(2, "ORDER_PLACED")...)).expect(t, http.StatusCreated, "")
	tail, err := a.store.LogTail(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	br := openSSE(t, ctx, srv.URL+"/v1/log/subscribe", "")
	if got := sseFirstComment(t, br); got != "subscribed after cursor "+tail.String() {
		t.Fatalf("first comment %q, want the tail %s", got, tail)
	}
	evs := newEvents(1, "ORDER_PLACED")
	a.do("POST", "/v1/streams/Order/o-2/events", appendBody("any", evs...)).expect(t, http.StatusCreated, "")
	got := sseRead(t, br, 1, time.Minute)
	var ev logEvent
	if err := json.Unmarshal([]byte(got[0].data), &ev); err != nil || ev.EventID != evs[0].ID {
		t.Fatalf("got %+v (%v), want %s", ev, err, evs[0].ID)
	}
}
