package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func reading(n int) client.EventData {
	return client.EventData{EventType: "READING_TAKEN", Data: map[string]any{"n": n}}
}

// Appends with each form of expected_sequence; conflicts carry the actual
// sequence and write nothing.
func TestAppendExpectedSequence(t *testing.T) {
	b := newBackend(t, backendOptions{})
	c := newClient(t, b.serve(nil))
	ctx := ctxT(t)
	steps := []struct {
		name     string
		expected client.ExpectedSequence
		events   int
		// wantLast is the stream's last sequence after the step; a
		// conflict wants wantActual (and wantExpected when a number was
		// expected).
		wantLast     int64
		conflict     bool
		wantActual   int64
		wantExpected *int64
	}{
		{name: "exists on an empty stream", expected: client.StreamExists, events: 1, conflict: true, wantActual: 0},
		{name: "no_stream on an empty stream", expected: client.NoStream, events: 2, wantLast: 2},
		{name: "no_stream again", expected: client.NoStream, events: 1, conflict: true, wantActual: 2},
		{name: "stale sequence", expected: client.AtSequence(1), events: 1, conflict: true, wantActual: 2, wantExpected: ptr(int64(1))},
		{name: "the last sequence", expected: client.AtSequence(2), events: 1, wantLast: 3},
		{name: "exists", expected: client.StreamExists, events: 1, wantLast: 4},
		{name: "any (zero value)", expected: "", events: 3, wantLast: 7},
		{name: "any", expected: client.AnySequence, events: 1, wantLast: 8},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			evs := make([]client.EventData, s.events)
			for i := range evs {
				evs[i] = reading(i)
			}
			res, err := c.Append(ctx, "Device", "dev-1", s.expected, evs...)
			if s.conflict {
				var ce *client.ConflictError
				if !errors.As(err, &ce) {
					t.Fatalf("want a *ConflictError, got %v", err)
				}
				if ce.Actual != s.wantActual {
					t.Errorf("Actual = %d, want %d", ce.Actual, s.wantActual)
				}
				if (ce.Expected == nil) != (s.wantExpected == nil) || ce.Expected != nil && *ce.Expected != *s.wantExpected {
					t.Errorf("Expected = %v, want %v", ce.Expected, s.wantExpected)
				}
				var ae *client.Error
				if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != client.CodeConflict || ae.Field != "expected_sequence" {
					t.Errorf("the wrapped *Error: %+v", ae)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.LastSequence != s.wantLast || len(res.Events) != s.events || res.Replayed {
				t.Fatalf("got %+v, want last sequence %d, %d events, not replayed", res, s.wantLast, s.events)
			}
		})
	}
	page, err := c.ReadStreamPage(ctx, "Device", "dev-1", client.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if page.LastSequence != 8 || len(page.Events) != 8 {
		t.Fatalf("the stream holds %d events up to %d, want 8 (conflicts wrote nothing)", len(page.Events), page.LastSequence)
	}
}

func ptr[T any](v T) *T { return &v }

// dropFirstReply is a RoundTripper that lets the first request matching
// it reach the server, reads the whole reply (the server has done its
// work) and then reports a connection failure instead: a reply lost on
// the way back.
type dropFirstReply struct {
	match   func(*http.Request) bool
	dropped atomic.Int32
	sent    atomic.Int32
}

func (d *dropFirstReply) RoundTrip(req *http.Request) (*http.Response, error) {
	if d.match(req) {
		d.sent.Add(1)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || !d.match(req) || !d.dropped.CompareAndSwap(0, 1) {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return nil, fmt.Errorf("read tcp: connection reset by peer (the test dropped the %d reply)", resp.StatusCode)
}

// A write whose reply is lost is retried with the same event ids or
// Idempotency-Key and stored once.
func TestRetryAfterLostReplyWritesOnce(t *testing.T) {
	b := newBackend(t, backendOptions{})
	url := b.serve(nil)
	cases := []struct {
		name  string
		match func(*http.Request) bool
		run   func(t *testing.T, c *client.Client)
	}{
		{"append", func(r *http.Request) bool { return r.Method == http.MethodPost }, func(t *testing.T, c *client.Client) {
			ctx := ctxT(t)
			res, err := c.Append(ctx, "Device", "lost-1", client.NoStream, reading(1), reading(2))
			if err != nil {
				t.Fatal(err)
			}
			if !res.Replayed || res.FirstSequence != 1 || res.LastSequence != 2 {
				t.Fatalf("got %+v, want the replayed batch at 1..2", res)
			}
			var n int
			for ev, err := range c.ReadStream(ctx, "Device", "lost-1", client.StreamOptions{}) {
				if err != nil {
					t.Fatal(err)
				}
				if ev.EventID != res.Events[n].EventID {
					t.Fatalf("event %d is %s, want %s", n, ev.EventID, res.Events[n].EventID)
				}
				n++
			}
			if n != 2 {
				t.Fatalf("the stream holds %d events, want 2", n)
			}
		}},
		{"create instance", func(r *http.Request) bool { return r.Method == http.MethodPost }, func(t *testing.T, c *client.Client) {
			ctx := ctxT(t)
			acc, err := c.CreateInstance(ctx, "shop", "order", "42", map[string]any{"total": 10})
			if err != nil {
				t.Fatal(err)
			}
			if !acc.Replayed || acc.SequenceNumber != 1 || acc.InstanceID != "42" {
				t.Fatalf("got %+v, want the replayed command at 1", acc)
			}
			evs, err := b.store.Stream(ctx, "Instance", "shop:order:42", 1, 0, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 1 || evs[0].Envelope.Kind != "command" || evs[0].Envelope.EventID != acc.EventID {
				t.Fatalf("the instance's stream holds %d events, want the one command %s", len(evs), acc.EventID)
			}
		}},
		{"patch instance", func(r *http.Request) bool { return r.Method == http.MethodPatch }, func(t *testing.T, c *client.Client) {
			ctx := ctxT(t)
			if _, err := c.CreateInstance(ctx, "shop", "order", "43", nil); err != nil {
				t.Fatal(err)
			}
			acc, err := c.PatchInstance(ctx, "shop", "order", "43", map[string]any{"total": 11}, client.WithExpectedSeq(1))
			if err != nil {
				t.Fatal(err)
			}
			if !acc.Replayed || acc.SequenceNumber != 2 {
				t.Fatalf("got %+v, want the replayed command at 2", acc)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rt := &dropFirstReply{match: tc.match}
			c := newClient(t, url, client.WithHTTPClient(&http.Client{Transport: rt}))
			tc.run(t, c)
			if rt.dropped.Load() != 1 || rt.sent.Load() != 2 {
				t.Fatalf("dropped %d replies of %d requests, want 1 of 2", rt.dropped.Load(), rt.sent.Load())
			}
		})
	}
}

// flaky answers the first n requests with status and Retry-After itself,
// after letting the API serve them when serve is set (a reply replaced on
// the way: the outcome is unknown to the client).
type flaky struct {
	next       http.Handler
	n          int32
	status     int
	retryAfter string
	serve      bool
	seen       atomic.Int32
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.seen.Add(1) > f.n {
		f.next.ServeHTTP(w, r)
		return
	}
	if f.serve {
		f.next.ServeHTTP(discard{}, r)
	}
	if f.retryAfter != "" {
		w.Header().Set("Retry-After", f.retryAfter)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(f.status)
	code := strings.ReplaceAll(strings.ToLower(http.StatusText(f.status)), " ", "_")
	_, _ = fmt.Fprintf(w, `{"type":"urn:sluice:problem:%s","title":%q,"status":%d,"detail":"test","code":%q}`, code, http.StatusText(f.status), f.status, code)
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// 429, 502, 503 and 504 are retried after Retry-After (or the backoff);
// other statuses never are.
func TestRetryStatuses(t *testing.T) {
	b := newBackend(t, backendOptions{})
	cases := []struct {
		name       string
		status     int
		retryAfter string
		failures   int32
		serve      bool
		// wantAttempts is how many requests reach the wrapper;
		// wantStatus the *Error's status when the call fails.
		wantAttempts int32
		wantStatus   int
		minElapsed   time.Duration
	}{
		{name: "429 with Retry-After", status: 429, retryAfter: "1", failures: 1, wantAttempts: 2, minElapsed: time.Second},
		{name: "503 after the write, with Retry-After", status: 503, retryAfter: "1", failures: 1, serve: true, wantAttempts: 2, minElapsed: time.Second},
		{name: "502 twice, backoff", status: 502, failures: 2, serve: true, wantAttempts: 3},
		{name: "504", status: 504, failures: 1, wantAttempts: 2},
		{name: "503 until the attempts run out", status: 503, retryAfter: "0", failures: 100, wantAttempts: 6, wantStatus: 503},
		{name: "500 is not retried", status: 500, failures: 1, wantAttempts: 1, wantStatus: 500},
		{name: "400 is not retried", status: 400, failures: 1, wantAttempts: 1, wantStatus: 400},
		{name: "409 is not retried", status: 409, failures: 1, wantAttempts: 1, wantStatus: 409},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &flaky{next: b.handler, n: tc.failures, status: tc.status, retryAfter: tc.retryAfter, serve: tc.serve}
			c := newClient(t, b.serve(func(http.Handler) http.Handler { return f }))
			ctx := ctxT(t)
			stream := fmt.Sprintf("retry-%d", i)
			start := time.Now()
			res, err := c.Append(ctx, "Device", stream, client.NoStream, reading(1))
			elapsed := time.Since(start)
			if got := f.seen.Load(); got != tc.wantAttempts {
				t.Errorf("%d attempts, want %d", got, tc.wantAttempts)
			}
			if elapsed < tc.minElapsed {
				t.Errorf("took %s, want at least %s (Retry-After)", elapsed, tc.minElapsed)
			}
			if tc.wantStatus != 0 {
				var ae *client.Error
				if !errors.As(err, &ae) || ae.Status != tc.wantStatus {
					t.Fatalf("want an *Error %d, got %v", tc.wantStatus, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Replayed != tc.serve || res.LastSequence != 1 {
				t.Fatalf("got %+v, want sequence 1, replayed %v", res, tc.serve)
			}
		})
	}
	t.Run("the context bounds the waiting", func(t *testing.T) {
		f := &flaky{next: b.handler, n: 100, status: 503, retryAfter: "30"}
		c := newClient(t, b.serve(func(http.Handler) http.Handler { return f }))
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		_, err := c.Append(ctx, "Device", "retry-ctx", client.NoStream, reading(1))
		var ae *client.Error
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ae) || ae.RetryAfter != 30*time.Second {
			t.Fatalf("want the deadline and the last 503 (Retry-After 30 s), got %v", err)
		}
	})
}

// The typed errors carry what the problem document says.
func TestTypedErrors(t *testing.T) {
	b := newBackend(t, backendOptions{tokens: []string{"secret"}})
	url := b.serve(nil)
	c := newClient(t, url, client.WithToken("secret"))
	ctx := ctxT(t)
	if _, err := c.CreateInstance(ctx, "shop", "order", "pending-1", nil); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		call func() error
		// check inspects the error.
		check func(t *testing.T, err error)
	}{
		{"invalid event type", func() error {
			_, err := c.Append(ctx, "Device", "v-1", "", client.EventData{EventType: "has space"})
			return err
		}, func(t *testing.T, err error) {
			var ve *client.ValidationError
			if !errors.As(err, &ve) || ve.Field != "events[0].event_type" || ve.Code != client.CodeValidationFailed {
				t.Fatalf("want a *ValidationError on events[0].event_type, got %#v", err)
			}
		}},
		{"data key the read model cannot hold", func() error {
			_, err := c.CreateInstance(ctx, "shop", "order", "v-2", map[string]any{"_id": 1})
			return err
		}, func(t *testing.T, err error) {
			var ve *client.ValidationError
			if !errors.As(err, &ve) || ve.Field != "data._id" || ve.Code != "invalid_data_key" || ve.Limit != "not_metadata_field" {
				t.Fatalf("want a *ValidationError on data._id, got %v (%+v)", err, ve)
			}
		}},
		{"idempotency key reused", func() error {
			if _, err := c.CreateInstance(ctx, "shop", "order", "v-3", nil, client.WithIdempotencyKey("k-1")); err != nil {
				return err
			}
			_, err := c.CreateInstance(ctx, "shop", "order", "v-4", nil, client.WithIdempotencyKey("k-1"))
			return err
		}, func(t *testing.T, err error) {
			var ve *client.ValidationError
			if !errors.As(err, &ve) || ve.Code != client.CodeIdempotencyKeyReused {
				t.Fatalf("want idempotency_key_reused, got %v", err)
			}
		}},
		{"command conflict", func() error {
			_, err := c.PatchInstance(ctx, "shop", "order", "pending-1", map[string]any{"a": 1}, client.WithExpectedSeq(0))
			return err
		}, func(t *testing.T, err error) {
			var ce *client.ConflictError
			if !errors.As(err, &ce) || ce.Actual != 1 || ce.Expected == nil || *ce.Expected != 0 {
				t.Fatalf("want a *ConflictError at 1, got %v", err)
			}
		}},
		{"stream not found", func() error {
			for _, err := range c.ReadStream(ctx, "Device", "nothing-here", client.StreamOptions{}) {
				return err
			}
			return nil
		}, func(t *testing.T, err error) {
			var nf *client.NotFoundError
			if !errors.As(err, &nf) || nf.Code != client.CodeStreamNotFound {
				t.Fatalf("want stream_not_found, got %v", err)
			}
		}},
		{"instance pending", func() error {
			_, err := c.GetInstance(ctx, "shop", "order", "pending-1")
			return err
		}, func(t *testing.T, err error) {
			var nf *client.NotFoundError
			if !errors.As(err, &nf) || nf.Code != client.CodeInstanceNotFound || nf.PendingCommands != 1 || nf.SequenceNumber != 1 {
				t.Fatalf("want instance_not_found with 1 pending command, got %v (%+v)", err, nf)
			}
		}},
		{"command not found", func() error {
			_, err := c.CommandStatus(ctx, "no-such-command")
			return err
		}, func(t *testing.T, err error) {
			var nf *client.NotFoundError
			if !errors.As(err, &nf) || nf.Code != client.CodeCommandNotFound {
				t.Fatalf("want command_not_found, got %v", err)
			}
		}},
		{"no token", func() error {
			anon := newClient(t, url)
			_, err := anon.ReadLogPage(ctx, client.LogOptions{})
			return err
		}, func(t *testing.T, err error) {
			var ae *client.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || ae.Code != client.CodeUnauthorized || ae.Field != "Authorization" {
				t.Fatalf("want 401 unauthorized, got %v", err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatal("want an error")
			}
			tc.check(t, err)
		})
	}
}

// Streams and the log are read page by page, forward and backward.
func TestPaging(t *testing.T) {
	b := newBackend(t, backendOptions{})
	c := newClient(t, b.serve(nil))
	ctx := ctxT(t)
	var want []string
	for i := range 5 {
		evs := make([]client.EventData, 5)
		for j := range evs {
			evs[j] = reading(i*5 + j)
		}
		res, err := c.Append(ctx, "Device", "paged", "", evs...)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range res.Events {
			want = append(want, e.EventID)
		}
		// Another type between, for the log's filter.
		if _, err := c.Append(ctx, "Sensor", "other", "", reading(i)); err != nil {
			t.Fatal(err)
		}
	}
	reversed := make([]string, len(want))
	for i, id := range want {
		reversed[len(want)-1-i] = id
	}
	collect := func(t *testing.T, seq func(func(client.Event, error) bool)) []string {
		var got []string
		for ev, err := range seq {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ev.EventID)
		}
		return got
	}
	cases := []struct {
		name string
		seq  func(func(client.Event, error) bool)
		want []string
	}{
		{"stream forward, pages of 10", c.ReadStream(ctx, "Device", "paged", client.StreamOptions{Limit: 10}), want},
		{"stream forward from 7, pages of 4", c.ReadStream(ctx, "Device", "paged", client.StreamOptions{FromSequence: 7, Limit: 4}), want[6:]},
		{"stream backward, pages of 7", c.ReadStream(ctx, "Device", "paged", client.StreamOptions{Backward: true, Limit: 7}), reversed},
		{"stream backward from 3", c.ReadStream(ctx, "Device", "paged", client.StreamOptions{Backward: true, FromSequence: 3, Limit: 2}), reversed[22:]},
		{"log of one type, pages of 3", c.ReadLog(ctx, client.LogOptions{AggregateType: "Device", Limit: 3}), want},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := collect(t, tc.seq)
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got %d events %v\nwant %d %v", len(got), got, len(tc.want), tc.want)
			}
		})
	}
	t.Run("whole log in position order", func(t *testing.T) {
		var last int64
		n := 0
		for ev, err := range c.ReadLog(ctx, client.LogOptions{Limit: 4}) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Position <= last {
				t.Fatalf("position %d after %d", ev.Position, last)
			}
			last = ev.Position
			n++
		}
		if n != 30 {
			t.Fatalf("%d events in the log, want 30", n)
		}
	})
	t.Run("breaking out stops paging", func(t *testing.T) {
		n := 0
		for _, err := range c.ReadStream(ctx, "Device", "paged", client.StreamOptions{Limit: 2}) {
			if err != nil {
				t.Fatal(err)
			}
			if n++; n == 3 {
				break
			}
		}
	})
	t.Run("one page", func(t *testing.T) {
		p, err := c.ReadStreamPage(ctx, "Device", "paged", client.StreamOptions{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) != 10 || p.NextFromSequence != 11 || p.LastSequence != 25 || p.Events[0].SequenceNumber != 1 {
			t.Fatalf("page: %d events, next %d, last %d", len(p.Events), p.NextFromSequence, p.LastSequence)
		}
		var data struct{ N int }
		if err := json.Unmarshal(p.Events[3].Data, &data); err != nil || data.N != 3 {
			t.Fatalf("event 4's data %s: %v", p.Events[3].Data, err)
		}
	})
}
