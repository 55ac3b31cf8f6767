package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// testShards is the number of shards of the sharded stores of these
// tests.
const testShards = 4

// shardedBackend is the real API over a store of testShards shards.
func shardedBackend(t *testing.T) *backend {
	t.Helper()
	b := newBackend(t, backendOptions{shards: testShards})
	if n := b.store.Shards(); n != testShards {
		t.Fatalf("the store has %d shards, want %d", n, testShards)
	}
	return b
}

// aggregatesByShard returns per aggregate ids of type typ in every shard,
// shard by shard.
func aggregatesByShard(typ string, per int) [][]string {
	out := make([][]string, testShards)
	for i, left := 0, testShards*per; left > 0; i++ {
		id := fmt.Sprintf("agg-%d", i)
		if sh := eventstore.ShardOf(typ, id, testShards); len(out[sh]) < per {
			out[sh] = append(out[sh], id)
			left--
		}
	}
	return out
}

// tally is what a reader of the log received: each event id how often,
// and each aggregate's sequences in the order they came.
type tally struct {
	count map[string]int
	// next is each aggregate's next sequence expected.
	next  map[string]int64
	order []string // the event ids in the order received
}

func newTally() *tally { return &tally{count: map[string]int{}, next: map[string]int64{}} }

// add records ev and fails unless it is its aggregate's next event (an
// event twice, or one missed, breaks the sequence).
func (ta *tally) add(t *testing.T, ev client.Event) {
	t.Helper()
	if want := max(ta.next[ev.AggregateID], 1); ev.SequenceNumber != want {
		t.Fatalf("aggregate %s: sequence %d received where %d was next (%d events received) cursor %s pos %d", ev.AggregateID, ev.SequenceNumber, want, len(ta.order), ev.Cursor, ev.Position)
	}
	ta.next[ev.AggregateID] = ev.SequenceNumber + 1
	ta.count[ev.EventID]++
	ta.order = append(ta.order, ev.EventID)
}

// from says that every aggregate of aggs starts at sequence seq.
func (ta *tally) from(aggs [][]string, seq int64) {
	for _, shard := range aggs {
		for _, id := range shard {
			ta.next[id] = seq
		}
	}
}

// has says whether every id of want was received.
func (ta *tally) has(want []string) bool {
	for _, id := range want {
		if ta.count[id] == 0 {
			return false
		}
	}
	return true
}

// exactly fails unless the ids received are want's, each once.
func (ta *tally) exactly(t *testing.T, what string, want []string) {
	t.Helper()
	wanted := map[string]bool{}
	for _, id := range want {
		wanted[id] = true
		if n := ta.count[id]; n != 1 {
			t.Fatalf("%s: event %s received %d times", what, id, n)
		}
	}
	for id, n := range ta.count {
		if !wanted[id] {
			t.Fatalf("%s: event %s received %d times, not wanted", what, id, n)
		}
	}
	if len(ta.order) != len(want) {
		t.Fatalf("%s: %d events received, want %d", what, len(ta.order), len(want))
	}
}

// writer appends events to aggregates of one type and remembers their ids.
type writer struct {
	c   *client.Client
	typ string
	mu  sync.Mutex
	ids []string
}

// add appends n events to aggregate id and returns their ids.
func (w *writer) add(ctx context.Context, id string, n int) ([]string, error) {
	evs := make([]client.EventData, n)
	for i := range evs {
		evs[i] = reading(i)
	}
	res, err := w.c.Append(ctx, w.typ, id, "", evs...)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range res.Events {
		ids = append(ids, e.EventID)
	}
	w.mu.Lock()
	w.ids = append(w.ids, ids...)
	w.mu.Unlock()
	return ids, nil
}

// lastInEveryShard appends one event to the first aggregate of every
// shard (aggs, aggregatesByShard) and returns their ids. It closes a
// subscription check: each shard's events come in position order, so an
// event delivered twice arrives before its shard's last one; no waiting
// for one that does not come.
func (w *writer) lastInEveryShard(t *testing.T, ctx context.Context, aggs [][]string) []string {
	t.Helper()
	var last []string
	for _, shard := range aggs {
		ids, err := w.add(ctx, shard[0], 1)
		if err != nil {
			t.Fatal(err)
		}
		last = append(last, ids...)
	}
	return last
}

func (w *writer) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.ids...)
}

// On a store of four shards ReadLog pages by cursor: while writers append
// to every shard, a reader that resumes each pass after the Cursor of the
// last event it received, and a reader of the whole log afterwards, each
// get every committed event once, every aggregate's in its order.
func TestReadLogAcrossShards(t *testing.T) {
	b := shardedBackend(t)
	c := newClient(t, b.serve(nil))
	ctx := ctxT(t)
	aggs := aggregatesByShard("Device", 2)
	var flat []string
	for _, ids := range aggs {
		flat = append(flat, ids...)
	}
	w := &writer{c: c, typ: "Device"}
	for _, id := range flat {
		if _, err := w.add(ctx, id, 1); err != nil {
			t.Fatal(err)
		}
	}

	// Writers append to every shard in two halves; the reader's first
	// pass runs between them.
	const writers, rounds = 4, 10
	halfway := make(chan struct{})
	errc := make(chan error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			for n := range rounds {
				if n == rounds/2 {
					select {
					case <-halfway:
					case <-ctx.Done():
						errc <- ctx.Err()
						return
					}
				}
				if _, err := w.add(ctx, flat[(i*3+n)%len(flat)], 1+n%3); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	writing := make(chan struct{})
	go func() { wg.Wait(); close(writing) }()

	resumed := newTally()
	cursor := ""
	for pass := 0; ; pass++ {
		done := false
		select {
		case <-writing:
			done = true
		default:
		}
		for ev, err := range c.ReadLog(ctx, client.LogOptions{Cursor: cursor, Limit: 5}) {
			if err != nil {
				t.Fatal(err)
			}
			resumed.add(t, ev)
			if ev.Cursor != "" {
				cursor = ev.Cursor
			}
		}
		if pass == 0 {
			close(halfway)
		}
		if done {
			break
		}
	}
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	want := w.all()
	t.Run("resumed after each pass", func(t *testing.T) { resumed.exactly(t, "the passes", want) })

	t.Run("the whole log", func(t *testing.T) {
		whole := newTally()
		for ev, err := range c.ReadLog(ctx, client.LogOptions{Limit: 7}) {
			if err != nil {
				t.Fatal(err)
			}
			whole.add(t, ev)
		}
		whole.exactly(t, "ReadLog", want)
	})

	t.Run("one page", func(t *testing.T) {
		p, err := c.ReadLogPage(ctx, client.LogOptions{Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) != 3 || p.NextCursor == "" || p.NextFromPosition != 0 {
			t.Fatalf("page: %d events, next cursor %q, next position %d", len(p.Events), p.NextCursor, p.NextFromPosition)
		}
		if p.Events[0].Cursor != "" || p.Events[2].Cursor != p.NextCursor {
			t.Fatalf("event cursors %q, %q; the page's next cursor %q", p.Events[0].Cursor, p.Events[2].Cursor, p.NextCursor)
		}
		rest := newTally()
		for _, ev := range p.Events {
			rest.add(t, ev)
		}
		for ev, err := range c.ReadLog(ctx, client.LogOptions{Cursor: p.NextCursor}) {
			if err != nil {
				t.Fatal(err)
			}
			rest.add(t, ev)
		}
		rest.exactly(t, "a page, then ReadLog after its NextCursor", want)
	})
}

// A store of several shards has no global position: FromPosition is
// refused with the server's 400 as a *ValidationError naming the field,
// and so is a cursor of another number of shards; a subscription ends
// with it instead of retrying.
func TestFromPositionOnShards(t *testing.T) {
	b := shardedBackend(t)
	c := newClient(t, b.serve(nil))
	ctx := ctxT(t)
	first := func(seq func(func(client.Event, error) bool)) error {
		for _, err := range seq {
			if err == nil {
				return errors.New("an event, not an error")
			}
			return err
		}
		return errors.New("nothing")
	}
	cases := []struct {
		name, field string
		call        func() error
	}{
		{"ReadLogPage from a position", "from_position", func() error {
			_, err := c.ReadLogPage(ctx, client.LogOptions{FromPosition: 1})
			return err
		}},
		{"ReadLog from a position", "from_position", func() error {
			return first(c.ReadLog(ctx, client.LogOptions{FromPosition: 3}))
		}},
		{"Subscribe from a position", "from_position", func() error {
			return first(c.Subscribe(ctx, client.SubscribeOptions{FromPosition: 1}))
		}},
		{"ReadLog after a one-shard cursor", "cursor", func() error {
			return first(c.ReadLog(ctx, client.LogOptions{Cursor: "7"}))
		}},
		{"Subscribe after a one-shard cursor", "cursor", func() error {
			return first(c.Subscribe(ctx, client.SubscribeOptions{Cursor: "7"}))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var ve *client.ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.field || ve.Code != "invalid_parameter" || ve.Err.Status != http.StatusBadRequest {
				t.Fatalf("want a 400 invalid_parameter on %s, got %v", tc.field, err)
			}
		})
	}
}

// errCut is what a cut stream's writes return to the API's handler.
var errCut = errors.New("the test cut the connection")

// cutStreams cuts the i-th subscription it serves (from 0) in the middle
// of its stream: after after[i] complete events it sends half of the next
// (its id and data lines, not the blank line that completes it), then
// fails every write, so the handler ends the response. cuts counts the
// streams cut.
func cutStreams(after []int, cuts *atomic.Int32) func(http.Handler) http.Handler {
	var conns atomic.Int32
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			i := int(conns.Add(1)) - 1
			if r.URL.Path != "/v1/log/subscribe" || i >= len(after) {
				next.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(&cutWriter{ResponseWriter: w, after: after[i], cuts: cuts}, r)
		})
	}
}

// cutWriter lets after events through, then half of one, then fails.
// The API writes whole SSE blocks, so each write starts a line.
type cutWriter struct {
	http.ResponseWriter
	after, events int
	cut           bool
	cuts          *atomic.Int32
}

func (w *cutWriter) Write(b []byte) (int, error) {
	if w.cut {
		return 0, errCut
	}
	for i := 0; i < len(b); {
		j := bytes.Index(b[i:], []byte("id: "))
		if j < 0 {
			break
		}
		j += i
		i = j + 1
		if j > 0 && b[j-1] != '\n' {
			continue
		}
		if w.events++; w.events <= w.after {
			continue
		}
		// The (after+1)-th event: up to the end of its data line.
		d := bytes.Index(b[j:], []byte("\ndata: "))
		e := bytes.IndexByte(b[j+d+1:], '\n')
		if d < 0 || e < 0 {
			break
		}
		end := j + d + 1 + e + 1
		n, err := w.ResponseWriter.Write(b[:end])
		w.Flush()
		w.cut = true
		w.cuts.Add(1)
		if err == nil {
			err = errCut
		}
		return n, err
	}
	return w.ResponseWriter.Write(b)
}

func (w *cutWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *cutWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// received feeds a subscription's events into a tally.
type received struct {
	mu   sync.Mutex
	ta   *tally
	evs  []client.Event
	errc chan error
}

// subscribe runs a subscription of c with o until ctx ends, recording
// what it delivers.
func subscribe(ctx context.Context, c *client.Client, o client.SubscribeOptions) *received {
	rc := &received{ta: newTally(), errc: make(chan error, 1)}
	go func() {
		for ev, err := range c.Subscribe(ctx, o) {
			if err != nil {
				rc.errc <- err
				return
			}
			rc.mu.Lock()
			rc.evs = append(rc.evs, ev)
			rc.mu.Unlock()
		}
		rc.errc <- errors.New("the subscription ended without an error")
	}()
	return rc
}

// await waits until every id of want was delivered, checking each event
// as it comes (tally.add); a subscription that ends fails the test.
func (rc *received) await(t *testing.T, ctx context.Context, what string, want []string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond) // polls what the subscription delivered; no assertion waits on it
	defer tick.Stop()
	for {
		rc.mu.Lock()
		news := rc.evs[len(rc.ta.order):]
		rc.mu.Unlock()
		for _, ev := range news {
			if ev.Cursor == "" {
				t.Fatalf("%s: event %s without a cursor", what, ev.EventID)
			}
			rc.ta.add(t, ev)
		}
		if rc.ta.has(want) {
			return
		}
		select {
		case err := <-rc.errc:
			t.Fatalf("%s: the subscription ended: %v", what, err)
		case <-ctx.Done():
			t.Fatalf("%s: %d events received, %d wanted", what, len(rc.ta.order), len(want))
		case <-tick.C:
		}
	}
}

// On a store of four shards a subscription started after a cursor, whose
// streams are cut in the middle (half an event sent) while catching up and
// while live, resumes with the cursor of the last event it delivered and
// delivers every event after its start once, every aggregate's in its
// order; a second subscription started after the Cursor of one of those
// events delivers exactly the ones after it.
func TestSubscribeAcrossShardsResumes(t *testing.T) {
	b := shardedBackend(t)
	ctx := ctxT(t)
	w := &writer{c: newClient(t, b.serve(nil)), typ: "Device"}
	aggs := aggregatesByShard("Device", 2)
	appendEach := func(n int) []string {
		t.Helper()
		var ids []string
		for range n {
			for _, shard := range aggs {
				for _, id := range shard {
					got, err := w.add(ctx, id, 1)
					if err != nil {
						t.Fatal(err)
					}
					ids = append(ids, got...)
				}
			}
		}
		return ids
	}
	before := appendEach(1) // before the subscription's start
	start := ""
	for {
		p, err := w.c.ReadLogPage(ctx, client.LogOptions{Cursor: start, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if p.NextCursor == start {
			break
		}
		start = p.NextCursor
	}

	// The first three streams are cut after 5, 4 and 20 events (of the
	// 44 that follow the start), in the middle of the next one.
	var cuts atomic.Int32
	var reconnects atomic.Int32
	positions := make(chan int64, 16)
	url := b.serve(cutStreams([]int{5, 4, 20}, &cuts))
	subCtx, stop := context.WithCancel(ctx)
	defer stop()
	rc := subscribe(subCtx, newClient(t, url), client.SubscribeOptions{Cursor: start,
		OnReconnect: func(_ error, after int64, _ time.Duration) {
			reconnects.Add(1)
			select {
			case positions <- after:
			default:
			}
		}})
	rc.ta.from(aggs, 2) // sequence 1 of each is before the start
	wave1 := appendEach(3)
	rc.await(t, ctx, "wave 1", wave1)
	wave2 := appendEach(2)
	rc.await(t, ctx, "wave 2", wave2)
	last := w.lastInEveryShard(t, ctx, aggs)
	rc.await(t, ctx, "the last events", last)
	want := append(append(append([]string(nil), wave1...), wave2...), last...)
	rc.ta.exactly(t, "the subscription", want)
	for _, id := range before {
		if rc.ta.count[id] > 0 {
			t.Fatalf("event %s from before the start cursor delivered", id)
		}
	}
	if cuts.Load() != 3 || reconnects.Load() < 3 {
		t.Fatalf("%d streams cut, %d reconnections; want 3 and at least 3", cuts.Load(), reconnects.Load())
	}
	close(positions)
	for p := range positions {
		if p != -1 {
			t.Fatalf("OnReconnect named position %d on a store of %d shards", p, testShards)
		}
	}
	stop()
	if err := <-rc.errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the subscription ended with %v, want the context's error", err)
	}

	t.Run("after a delivered event's cursor", func(t *testing.T) {
		rc.mu.Lock()
		from := rc.evs[10]
		rc.mu.Unlock()
		after := rc.ta.order[11:]
		ctx2, stop2 := context.WithCancel(ctx)
		defer stop2()
		again := subscribe(ctx2, newClient(t, b.serve(nil)), client.SubscribeOptions{Cursor: from.Cursor})
		// It starts in the middle of aggregates: their next sequences
		// are those after what the first subscription delivered up to it.
		again.ta.from(aggs, 2)
		for _, ev := range rc.evs[:11] {
			again.ta.next[ev.AggregateID] = ev.SequenceNumber + 1
		}
		again.await(t, ctx, "the second subscription", last)
		again.ta.exactly(t, "the second subscription", after)
	})
}

// On a store of one shard the cursor is the position: pages and events
// carry it, reads take it, FromPosition keeps working, and OnReconnect
// names the position a cut subscription resumes after.
func TestCursorOnOneShard(t *testing.T) {
	b := newBackend(t, backendOptions{})
	c := newClient(t, b.serve(nil))
	ctx := ctxT(t)
	w := &writer{c: c, typ: "Device"}
	for range 5 {
		if _, err := w.add(ctx, "one", 1); err != nil {
			t.Fatal(err)
		}
	}
	positions := func(t *testing.T, seq func(func(client.Event, error) bool)) string {
		t.Helper()
		var got []string
		for ev, err := range seq {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%d%s", ev.Position, map[bool]string{true: "*"}[ev.Cursor == fmt.Sprint(ev.Position)]))
		}
		return fmt.Sprint(got)
	}
	t.Run("a page", func(t *testing.T) {
		p, err := c.ReadLogPage(ctx, client.LogOptions{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) != 2 || p.NextCursor != "2" || p.NextFromPosition != 3 || p.Events[0].Cursor != "" || p.Events[1].Cursor != "2" {
			t.Fatalf("page: %d events, next cursor %q, next position %d, cursors %q %q",
				len(p.Events), p.NextCursor, p.NextFromPosition, p.Events[0].Cursor, p.Events[1].Cursor)
		}
	})
	// A * marks an event whose Cursor is its position: the last of each
	// page of ReadLog.
	cases := []struct {
		name string
		seq  func(func(client.Event, error) bool)
		want string
	}{
		{"ReadLog after a cursor", c.ReadLog(ctx, client.LogOptions{Cursor: "2", Limit: 2}), "[3 4* 5*]"},
		{"ReadLog from a position", c.ReadLog(ctx, client.LogOptions{FromPosition: 2, Limit: 3}), "[2 3 4* 5*]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := positions(t, tc.seq); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
	for _, o := range []client.SubscribeOptions{{Cursor: "3"}, {FromPosition: 4}} {
		t.Run(fmt.Sprintf("Subscribe cursor %q position %d, cut after one event", o.Cursor, o.FromPosition), func(t *testing.T) {
			var cuts atomic.Int32
			after := make(chan int64, 8)
			o.OnReconnect = func(_ error, p int64, _ time.Duration) { after <- p }
			subCtx, stop := context.WithCancel(ctx)
			defer stop()
			var got []string
			for ev, err := range newClient(t, b.serve(cutStreams([]int{1}, &cuts))).Subscribe(subCtx, o) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, fmt.Sprintf("%d:%s", ev.Position, ev.Cursor))
				if len(got) == 2 {
					break
				}
			}
			if fmt.Sprint(got) != "[4:4 5:5]" || cuts.Load() != 1 {
				t.Fatalf("got %v after %d cuts, want [4:4 5:5] after 1", got, cuts.Load())
			}
			if p := <-after; p != 4 {
				t.Fatalf("OnReconnect: resuming after %d, want 4", p)
			}
		})
	}
}

// On a store of four shards a subscription live from the head keeps the
// cursor the server announced (": subscribed after cursor …"): when the
// server restarts before the first event, what was appended meanwhile in
// every shard is delivered, once.
func TestSubscribeAcrossShardsFromTheHead(t *testing.T) {
	b := shardedBackend(t)
	ctx := ctxT(t)
	w := &writer{c: newClient(t, b.serve(nil)), typ: "Device"}
	aggs := aggregatesByShard("Device", 1)
	for _, shard := range aggs {
		if _, err := w.add(ctx, shard[0], 2); err != nil { // before the subscription: not for it
			t.Fatal(err)
		}
	}
	var s seen
	r := newRestartable(t, s.watch(nil)(b.handler))
	subCtx, stop := context.WithCancel(ctx)
	defer stop()
	rc := subscribe(subCtx, newClient(t, r.url()), client.SubscribeOptions{
		OnReconnect: func(error, int64, time.Duration) { s.reconnects.Add(1) }})
	rc.ta.from(aggs, 3)
	testenv.WaitFor(t, 10*time.Second, "the subscription at the head", func() bool { return s.heads.Load() > 0 })
	n := s.reconnects.Load()
	r.stop()
	var want []string
	for _, shard := range aggs { // while the subscription's server is down
		ids, err := w.add(ctx, shard[0], 2)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ids...)
	}
	s.cutAndRefused(t, n)
	r.start()
	rc.await(t, ctx, "appended while the server was down", want)
	last := w.lastInEveryShard(t, ctx, aggs)
	rc.await(t, ctx, "the last events", last)
	rc.ta.exactly(t, "the subscription", append(want, last...))
}
