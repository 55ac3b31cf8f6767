package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// apiProc is a `sluice api` process started from the built binary.
type apiProc struct {
	cmd  *exec.Cmd
	out  *testenv.Buffer
	done chan struct{}
}

func startAPIProc(t *testing.T, bin string, env []string, base string) *apiProc {
	t.Helper()
	c := exec.Command(bin, "api")
	c.Env = env
	p := &apiProc{cmd: c, out: &testenv.Buffer{}, done: make(chan struct{})}
	c.Stdout, c.Stderr = p.out, p.out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = c.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(90 * time.Second):
			_ = c.Process.Kill()
			<-p.done
		}
	})
	testenv.WaitFor(t, 60*time.Second, "sluice api to answer /readyz", func() bool {
		select {
		case <-p.done:
			t.Fatalf("sluice api exited at start-up:\n%s", p.out.String())
		default:
		}
		r, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
	return p
}

// sseItem is one thing a subscriber read: an event (its id), a comment,
// or the end of the stream.
type sseItem struct {
	id      int64
	comment string
	end     error // io.EOF or the read error; set on the last item only
}

// sseSub is one subscriber of the shutdown test.
type sseSub struct {
	name    string
	path    string // route and query
	start   int64  // the Last-Event-ID of its first request (-1: none)
	aggType string // "" = every type
	ids     []int64
	items   chan sseItem
}

// open requests the subscription, resuming after lastID when >= 0, and
// reads it in the background into s.items.
func (s *sseSub) open(t *testing.T, base string, lastID int64) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+s.path, nil)
	if lastID >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(lastID, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: subscribe: %v", s.name, err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%s: subscribe: %d %s", s.name, resp.StatusCode, b)
	}
	s.items = make(chan sseItem, 1024)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		id := int64(-1)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, ":"):
				s.items <- sseItem{comment: strings.TrimSpace(line[1:])}
			case strings.HasPrefix(line, "id: "):
				id, _ = strconv.ParseInt(line[len("id: "):], 10, 64)
			case line == "" && id >= 0:
				s.items <- sseItem{id: id}
				id = -1
			}
		}
		end := sc.Err()
		if end == nil {
			end = io.EOF
		}
		s.items <- sseItem{end: end}
	}()
}

// next is the next item; waiting is bounded only so that a broken build
// fails instead of hanging.
func (s *sseSub) next(t *testing.T) sseItem {
	t.Helper()
	select {
	case it := <-s.items:
		return it
	case <-time.After(120 * time.Second):
		t.Fatalf("%s: nothing read for 120 s", s.name)
		return sseItem{}
	}
}

// readThrough reads events until it has seen position last.
func (s *sseSub) readThrough(t *testing.T, last int64) {
	t.Helper()
	for len(s.ids) == 0 || s.ids[len(s.ids)-1] < last {
		it := s.next(t)
		if it.end != nil {
			t.Fatalf("%s: stream ended (%v) before position %d; read %v", s.name, it.end, last, s.ids)
		}
		if it.comment == "" {
			s.ids = append(s.ids, it.id)
		}
	}
}

// lastID is the Last-Event-ID the subscriber would resume with.
func (s *sseSub) lastID() int64 {
	if len(s.ids) == 0 {
		return s.start
	}
	return s.ids[len(s.ids)-1]
}

// TestAPIStopsPromptlyWithSubscribers is issue #39 part 2: a real `sluice
// api` with open SSE subscribers stops on SIGTERM without waiting out
// SHUTDOWN_TIMEOUT (60 s here, so that an exit within it proves the
// mechanism): readiness turns red, every stream ends at once with the
// shutdown comment, a request in flight still finishes, the exit code is 0,
// and each subscriber resumes from its Last-Event-ID on a restarted API
// without losing or doubling an event of the full log.
func TestAPIStopsPromptlyWithSubscribers(t *testing.T) {
	bin := buildSluice(t)
	dbURL, _ := testenv.NewMigratedDatabase(t)
	apiAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	httpAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	base, probe := "http://"+apiAddr, "http://"+httpAddr
	env := append(os.Environ(), "DATABASE_URL="+dbURL, "EVENT_STORE_BACKEND=file", "EVENT_STORE_FILE_DIR="+t.TempDir(),
		"SLUICE_API_ADDR="+apiAddr, "SLUICE_HTTP_ADDR="+httpAddr, "SHUTDOWN_TIMEOUT=60s",
		"SLUICE_API_TOKENS=", "SLUICE_LOG_LEVEL=info")

	n := 0
	appendEvents := func(t *testing.T, count int) int64 {
		t.Helper()
		var last int64
		for range count {
			n++
			typ := []string{"Order", "Invoice"}[n%2]
			resp, err := http.Post(fmt.Sprintf("%s/v1/streams/%s/x-%d/events", base, typ, n), "application/json",
				strings.NewReader(`{"events":[{"event_type":"HAPPENED","data":{"n":`+strconv.Itoa(n)+`}}]}`))
			if err != nil {
				t.Fatal(err)
			}
			var rep struct {
				Events []struct {
					Position int64 `json:"position"`
				} `json:"events"`
			}
			err = json.NewDecoder(resp.Body).Decode(&rep)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusCreated || len(rep.Events) != 1 {
				t.Fatalf("append %d: %d %v %+v", n, resp.StatusCode, err, rep)
			}
			last = rep.Events[0].Position
		}
		return last
	}

	subs := []*sseSub{
		{name: "whole log from the start", path: "/v1/log/subscribe?from_position=1", start: -1},
		{name: "one type by its stream route", path: "/v1/streams/Order/subscribe?from_position=1", start: -1, aggType: "Order"},
		{name: "log of one type after a Last-Event-ID", path: "/v1/log/subscribe?aggregate_type=Invoice", start: 2, aggType: "Invoice"},
	}
	p := startAPIProc(t, bin, env, base)
	var head int64
	t.Run("subscribers catch up and follow live appends", func(t *testing.T) {
		head = appendEvents(t, 6)
		for _, s := range subs {
			s.open(t, base, s.start)
			s.readThrough(t, lastOfType(head, s.aggType))
		}
		head = appendEvents(t, 4)
		for _, s := range subs {
			s.readThrough(t, lastOfType(head, s.aggType))
		}
	})

	// A request in flight at SIGTERM: its handler is reading the body
	// (the server answered 100 Continue) and the test holds the rest back.
	bodyW, held := holdRequest(t, base+"/v1/streams/Order/held-1/events")

	var sigterm time.Time
	t.Run("SIGTERM ends every stream with the shutdown comment", func(t *testing.T) {
		sigterm = time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		for _, s := range subs {
			var last sseItem
			for {
				it := s.next(t)
				if it.end != nil {
					break
				}
				if it.comment == "" {
					t.Errorf("%s: event %d after SIGTERM (every event was already read)", s.name, it.id)
				}
				last = it
			}
			if !strings.HasPrefix(last.comment, "shutting down") {
				t.Errorf("%s: the stream's last item is %+v, want the comment \"shutting down…\"", s.name, last)
			}
		}
		t.Logf("all %d streams ended %s after SIGTERM", len(subs), time.Since(sigterm).Round(time.Millisecond))
	})
	t.Run("readiness is red while the API drains", func(t *testing.T) {
		resp, err := http.Get(probe + "/readyz")
		if err != nil {
			t.Fatalf("/readyz on SLUICE_HTTP_ADDR during the drain: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "shutting down") {
			t.Fatalf("/readyz during the drain: %d %s; want 503 naming \"shutting down\"", resp.StatusCode, b)
		}
	})
	t.Run("the request in flight still finishes", func(t *testing.T) {
		if _, err := io.WriteString(bodyW, `{"events":[{"event_type":"HELD","data":{}}]}`); err != nil {
			t.Fatal(err)
		}
		bodyW.Close()
		r := <-held
		if r.err != nil || r.status != http.StatusCreated {
			t.Fatalf("held append: %d %v", r.status, r.err)
		}
	})
	t.Run("the process exits 0 within SHUTDOWN_TIMEOUT", func(t *testing.T) {
		select {
		case <-p.done:
		case <-time.After(120 * time.Second):
			t.Fatal("sluice api did not exit")
		}
		t.Logf("sluice api exited %s after SIGTERM (SHUTDOWN_TIMEOUT=60s)", time.Since(sigterm).Round(time.Millisecond))
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("exit code %d, want 0; output:\n%s", code, p.out.String())
		}
		if p.out.Contains("deadline exceeded") {
			t.Errorf("output mentions a deadline:\n%s", p.out.String())
		}
		if !p.out.Contains("readiness red") {
			t.Errorf("no log line saying readiness turned red:\n%s", p.out.String())
		}
	})

	startAPIProc(t, bin, env, base) // stopped at the end of the test
	t.Run("each subscriber resumes from its Last-Event-ID, losing and doubling nothing", func(t *testing.T) {
		head = appendEvents(t, 4)
		log := fullLog(t, base)
		for _, s := range subs {
			t.Run(s.name, func(t *testing.T) {
				var want []int64
				for _, e := range log {
					if e.Position > s.start && (s.aggType == "" || e.AggregateType == s.aggType) {
						want = append(want, e.Position)
					}
				}
				s.open(t, base, s.lastID())
				s.readThrough(t, want[len(want)-1])
				if !slices.Equal(s.ids, want) {
					t.Fatalf("read %v\nwant %v (the full log's positions of the subscription)", s.ids, want)
				}
			})
		}
	})
}

// lastOfType is the last position up to head of the test's alternating
// appends (odd n Invoice, even n Order, position = n) of type typ.
func lastOfType(head int64, typ string) int64 {
	switch {
	case typ == "Order" && head%2 != 0, typ == "Invoice" && head%2 == 0:
		return head - 1
	}
	return head
}

type heldResult struct {
	status int
	err    error
}

// holdRequest starts a POST whose body the test writes later, and returns
// once the handler is reading it (the server's 100 Continue arrived).
func holdRequest(t *testing.T, url string) (io.WriteCloser, <-chan heldResult) {
	t.Helper()
	pr, pw := io.Pipe()
	got100 := make(chan struct{})
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got100Continue: func() { close(got100) },
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, pr)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Expect", "100-continue")
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Minute}}
	res := make(chan heldResult, 1)
	go func() {
		resp, err := client.Do(req)
		if err != nil {
			res <- heldResult{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		res <- heldResult{status: resp.StatusCode}
	}()
	select {
	case <-got100:
	case r := <-res:
		t.Fatalf("held request ended before its body was sent: %+v", r)
	case <-time.After(60 * time.Second):
		t.Fatal("no 100 Continue")
	}
	return pw, res
}

type logEntry struct {
	Position      int64  `json:"position"`
	AggregateType string `json:"aggregate_type"`
}

// fullLog reads the whole log through GET /v1/log.
func fullLog(t *testing.T, base string) []logEntry {
	t.Helper()
	var all []logEntry
	from := int64(1)
	for {
		resp, err := http.Get(base + "/v1/log?limit=1000&from_position=" + strconv.FormatInt(from, 10))
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Events           []logEntry `json:"events"`
			NextFromPosition int64      `json:"next_from_position"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/v1/log: %d %v", resp.StatusCode, err)
		}
		all = append(all, page.Events...)
		if len(page.Events) == 0 {
			return all
		}
		from = page.NextFromPosition
	}
}
