package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/shared/observability"
)

// Environment of the browser tests.
const (
	// envChromium names the Chromium binary (default: chromium on PATH,
	// which scripts/test-deps.sh installs).
	envChromium = "SLUICE_CHROMIUM"
	// envArtifacts is the directory screenshots are saved to (default
	// bin/artifacts at the repository root).
	envArtifacts = "SLUICE_ARTIFACTS"
	// envUpdateDocs, set to 1, also writes the screenshots into
	// docs/console/ (how the pictures in docs/console.md are made).
	envUpdateDocs = "SLUICE_UPDATE_DOCS_SCREENSHOTS"
)

// chromium returns the browser binary. A missing browser fails the test:
// CI installs it (scripts/test-deps.sh), so a skip would hide a broken
// setup.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(envChromium); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("no Chromium found (install Debian's chromium, as scripts/test-deps.sh does, or set %s)", envChromium)
	return ""
}

// artifacts returns the screenshot directory, created.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(envArtifacts)
	if dir == "" {
		dir = filepath.Join("..", "..", "bin", "artifacts")
	}
	dir = filepath.Join(dir, "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// devConsole is `sluice dev` in this process with the console's admin
// token, and an Elasticsearch fault switch.
type devConsole struct {
	api    string
	client *http.Client
	// token is the operator token sluice dev made and printed (the test
	// sets none).
	token string
	// failLoads, while set, answers 500 to the instance worker's reads of
	// the instance documents whose request names failID (its state load
	// before the append), so that commands for that instance exhaust their
	// retries and go to the DLQ.
	failLoads atomic.Bool
	failID    string
	faults    atomic.Int64
}

func startDevConsole(t *testing.T) *devConsole {
	t.Helper()
	t.Setenv("DATABASE_URL", testenv.NewDatabase(t))
	t.Setenv("SLUICE_HTTP_ADDR", "off")
	t.Setenv("SLUICE_LOG_LEVEL", "warn")
	// No token: sluice dev makes one and prints it with the console's URL.
	t.Setenv("SLUICE_ADMIN_TOKEN", "")
	t.Setenv("SLUICE_ADMIN_TOKEN_FILE", "")
	t.Setenv("INSTANCE_WORKER_MAX_RETRY_ATTEMPTS", "2")
	t.Setenv("WORKER_RETRY_BACKOFF_BASE", "50ms")
	t.Setenv("WORKER_RETRY_BACKOFF_CAP", "200ms")
	api := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	t.Setenv("SLUICE_API_ADDR", api)
	d := &devConsole{api: "http://" + api, client: &http.Client{Timeout: 30 * time.Second}, failID: "dlq-demo"}
	dataDir := t.TempDir()
	f := devFlags{dataDir: dataDir, esAddr: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)),
		kafkaAddr: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)), wrapES: d.wrapES}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb testenv.Buffer
	done := make(chan error, 1)
	go func() {
		cfg, err := sluiceconfig.FromOS()
		if err != nil {
			done <- err
			return
		}
		logger, err := observability.NewLogger(&errb, cfg.Log.Format, cfg.Log.Level)
		if err != nil {
			done <- err
			return
		}
		done <- runDev(ctx, &out, cfg, logger, f)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("dev did not stop within a minute")
		}
		if t.Failed() {
			t.Logf("dev output:\n%s\n%s", out.String(), errb.String())
		}
	})
	testenv.WaitFor(t, time.Minute, "the api", func() bool {
		select {
		case err := <-done:
			t.Fatalf("dev stopped: %v\n%s\n%s", err, out.String(), errb.String())
		default:
		}
		r, err := d.client.Get(d.api + "/livez")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
	testenv.WaitFor(t, time.Minute, "the console's URL and token printed", func() bool {
		return strings.Contains(out.String(), "admin token: ")
	})
	tok, err := os.ReadFile(filepath.Join(dataDir, devAdminTokenFile))
	if err != nil {
		t.Fatalf("the token sluice dev made: %v", err)
	}
	d.token = strings.TrimSpace(string(tok))
	if st, err := os.Stat(filepath.Join(dataDir, devAdminTokenFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("token file: %v %v, want mode 0600", st, err)
	}
	if o := out.String(); !strings.Contains(o, "Console: "+d.api+"/console/") || !strings.Contains(o, "admin token: "+d.token) {
		t.Errorf("sluice dev did not print the console's URL and its token:\n%s", o)
	}
	return d
}

// admin calls the admin API with the operator token and decodes its answer.
func (d *devConsole) admin(t *testing.T, method, path string, body any) map[string]any {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, d.api+path, rd)
	req.Header.Set("Authorization", "Bearer "+d.token)
	res, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out := map[string]any{}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %v %v", method, path, res.StatusCode, out, err)
	}
	return out
}

func (d *devConsole) wrapES(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.failLoads.Load() {
			var body []byte
			if r.Body != nil {
				body, _ = io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
			read := r.Method == http.MethodGet || strings.HasSuffix(r.URL.Path, "/_mget")
			if read && (strings.Contains(r.URL.Path, d.failID) || bytes.Contains(body, []byte(d.failID))) {
				d.faults.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, `{"error":{"type":"test_fault","reason":"injected by the console test"},"status":500}`)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// send posts a create and returns its command_id.
func (d *devConsole) send(t *testing.T, id string, total int) string {
	t.Helper()
	res, err := d.client.Post(d.api+"/v1/dbs/shop/classes/orders/instances", "application/json",
		strings.NewReader(fmt.Sprintf(`{"instance_id":%q,"data":{"total":%d}}`, id, total)))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var acc struct {
		CommandID string `json:"command_id"`
	}
	if err := json.NewDecoder(res.Body).Decode(&acc); err != nil || res.StatusCode != http.StatusAccepted {
		t.Fatalf("create %s: %d %v", id, res.StatusCode, err)
	}
	return acc.CommandID
}

// status is the command's status from the command API.
func (d *devConsole) status(t *testing.T, cid string) string {
	t.Helper()
	res, err := d.client.Get(d.api + "/v1/commands/" + cid)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var st struct {
		Status string `json:"status"`
	}
	_ = json.NewDecoder(res.Body).Decode(&st)
	return st.Status
}

// browser is one headless Chromium tab on the console.
type browser struct {
	t     *testing.T
	ctx   context.Context
	dir   string
	loads *int
}

// with returns b reporting to t (a subtest).
func (b *browser) with(t *testing.T) *browser {
	c := *b
	c.t = t
	return &c
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)), chromedp.NoSandbox, chromedp.WindowSize(1440, 1000),
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancel(); cancelA() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browser{t: t, ctx: ctx, dir: artifacts(t), loads: new(int)}
}

// open loads the console afresh at the view named by hash (a new query
// string each time, so that it is a new document and not a hash change).
func (b *browser) open(api, hash string) chromedp.Action[chromedp.Void] {
	*b.loads++
	return chromedp.Navigate(api + "/console/?load=" + strconv.Itoa(*b.loads) + hash)
}

// run runs actions with a deadline.
func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.fail(what, err)
	}
}

// value runs one action that returns a value, with a deadline.
func value[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.fail(what, err)
	}
	return v
}

func (b *browser) fail(what string, err error) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	page, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("main")))
	b.shot(strings.ReplaceAll(what, " ", "-") + "-failed")
	b.t.Fatalf("%s: %v\npage: %.3000s", what, err, page)
}

// shot saves a full-page screenshot as name.png in the artifact directory
// (and in docs/console when SLUICE_UPDATE_DOCS_SCREENSHOTS=1).
func (b *browser) shot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	dirs := []string{b.dir}
	if os.Getenv(envUpdateDocs) == "1" && !strings.HasSuffix(name, "-failed") {
		dirs = append(dirs, filepath.Join("..", "..", "docs", "console"))
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.t.Fatal(err)
		}
		p := filepath.Join(dir, name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			b.t.Fatal(err)
		}
		b.t.Logf("screenshot %s (%d bytes)", p, len(png))
	}
}

// The console on a running dev pipeline, in headless Chromium: the token
// is refused until entered, a command's trace shows every step done, and
// the aggregate view shows its events, guards and document.
func TestConsoleInBrowser(t *testing.T) {
	start := time.Now()
	d := startDevConsole(t)
	t.Logf("dev pipeline up in %s", time.Since(start).Round(time.Millisecond))
	b := newBrowser(t)
	cid := d.send(t, "42", 10)
	testenv.WaitFor(t, time.Minute, "the command applied", func() bool { return d.status(t, cid) == "APPLIED" })
	t.Logf("browser up and command applied at %s", time.Since(start).Round(time.Millisecond))
	defer func() { t.Logf("browser tests done at %s", time.Since(start).Round(time.Millisecond)) }()

	testenv.Step(t, "token", func(t *testing.T) {
		b := b.with(t)
		// Without a token the admin API answers 401 and the page says so.
		b.run("open without a token", b.open(d.api, "#/trace/"+cid), chromedp.WaitVisible(chromedp.ID("error")))
		msg := value(b, "read the error", chromedp.Text(chromedp.ID("error")))
		if !strings.Contains(msg, "401") {
			t.Errorf("error without a token: %q", msg)
		}
		b.run("enter the token",
			chromedp.SendKeys(chromedp.ID("token"), d.token),
			chromedp.Click(chromedp.CSS("#token-form button")),
			chromedp.WaitVisible(chromedp.CSS(`li[data-step="published"]`)))
	})

	t.Run("trace", func(t *testing.T) {
		b := b.with(t)
		// Every step done, the offset commits included (they follow the
		// handlers' work: reload until they show).
		sel := `section[data-kind="domain"] li[data-step="offset_commit"][data-state="done"]`
		deadline := time.Now().Add(time.Minute)
		for {
			b.run("trace", b.open(d.api, "#/trace/"+cid),
				chromedp.WaitVisible(chromedp.CSS(`section[data-kind="command"] li[data-step="published"]`)))
			n := value(b, "count done commits", chromedp.Evaluate[int](`document.querySelectorAll('`+sel+`').length`))
			if n > 0 {
				break
			}
			if time.Now().After(deadline) {
				b.shot("trace-incomplete")
				t.Fatal("the trace never showed the domain event's offset commit done")
			}
			time.Sleep(time.Second)
		}
		states := value(b, "read the steps", chromedp.Evaluate[[]map[string]string](`[...document.querySelectorAll('li[data-step]')].map(li => ({kind: li.closest('section').dataset.kind, step: li.dataset.step, state: li.dataset.state, who: li.dataset.handler, text: li.innerText}))`))
		want := []string{
			"command accepted done", "command appended done", "command published done", "command handled done instanceworker",
			"command document done instanceworker", "command offset_commit done sluice.instance-worker",
			"domain emitted done", "domain appended done", "domain published done", "domain handled done projection:history:v1",
			"domain document done projection:history:v1", "domain offset_commit done sluice.projection-history-v1",
		}
		var got []string
		for _, s := range states {
			g := s["kind"] + " " + s["step"] + " " + s["state"]
			if s["who"] != "" {
				g += " " + s["who"]
			}
			got = append(got, g)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("trace steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		for _, s := range states {
			if s["step"] == "published" && !strings.Contains(s["text"], "@ offset") {
				t.Errorf("published step without partition and offset: %q", s["text"])
			}
		}
		b.shot("trace")
	})

	t.Run("aggregate", func(t *testing.T) {
		b := b.with(t)
		b.run("aggregate", b.open(d.api, "#/aggregate/Instance/shop:orders:42"), chromedp.WaitVisible(chromedp.CSS(".doc-version")))
		version := value(b, "document version", chromedp.Text(chromedp.CSS(".doc-version")))
		rows := value(b, "events and guards", chromedp.Evaluate[string](`[...document.querySelectorAll('table.events tbody tr')].map(r => r.dataset.seq + r.dataset.kind[0]).join(' ') + ' | ' +
				[...document.querySelectorAll('table.guards tbody tr')].map(r => r.dataset.handler + '=' + r.cells[1].innerText).join(' ')`))
		if version != "1" {
			t.Errorf("document version %q, want 1", version)
		}
		if !strings.HasPrefix(rows, "1c 1d | ") || !strings.Contains(rows, "instanceworker=1") {
			t.Errorf("events | guards: %q", rows)
		}
		b.shot("aggregate")
	})

	t.Run("overview", func(t *testing.T) {
		b := b.with(t)
		b.run("overview", b.open(d.api, "#/overview"),
			chromedp.WaitVisible(chromedp.CSS(`#figures .figure[data-key="relay lag"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#charts .chart[data-series]`)))
		// Human labels, not field names; the raw dump only behind details.
		figures := value(b, "figures", chromedp.Evaluate[string](`[...document.querySelectorAll('#figures .figure')].map(f => f.innerText).join(' | ')`))
		for _, want := range []string{"Relay backlog", "Events stored", "Parked records", "Events being handled", "Dead letters open"} {
			if !strings.Contains(figures, want) {
				t.Errorf("no figure %q in %q", want, figures)
			}
		}
		for _, raw := range []string{"parked parked", "pending_gaps", "in_progress"} {
			if strings.Contains(figures, raw) {
				t.Errorf("a raw field name %q in the figures: %q", raw, figures)
			}
		}
		if open := value(b, "details closed", chromedp.Evaluate[bool](`document.querySelector('#details').open`)); open {
			t.Error("the raw overview is open by default")
		}
		// The lag charts gather points over the refreshes: wait for two.
		b.run("lag charts with two points", chromedp.WaitVisible(chromedp.CSS(`#charts .chart[data-series="relay / lag"]:not([data-points="0"]):not([data-points="1"])`)))
		charts := value(b, "lag charts", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#charts .chart')].map(c =>
			c.dataset.series + '=' + c.querySelector('.lag-value').innerText + ' (' + c.dataset.points + ' points)')`))
		joined := strings.Join(charts, "\n")
		for _, want := range []string{"relay / lag=0 behind", "instance-worker / lag=0 behind", "projection-history-v1 / lag=0 behind"} {
			if !strings.Contains(joined, want) {
				t.Errorf("no lag chart %q in:\n%s", want, joined)
			}
		}
		// Only the groups that run: dev runs the history projection, not
		// the instances one, so that group is not listed (nor charted).
		groups := value(b, "groups", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#groups tr[data-group]')].map(r => r.dataset.group + '=' + r.dataset.status)`))
		if g := strings.Join(groups, " "); !strings.Contains(g, "sluice.instance-worker=running") || !strings.Contains(g, "sluice.projection-history-v1=running") || strings.Contains(g, "instances") {
			t.Errorf("worker groups: %s", g)
		}
		if strings.Contains(joined, "instances") {
			t.Errorf("a lag chart of a group nobody runs:\n%s", joined)
		}
		b.run("details", chromedp.Click(chromedp.CSS("#details summary")), chromedp.WaitVisible(chromedp.CSS("#overview-body .kv")))
		b.run("details closed", chromedp.Click(chromedp.CSS("#details summary")))
		b.shot("overview")
	})

	t.Run("health", func(t *testing.T) {
		b := b.with(t)
		b.run("health strip", b.open(d.api, "#/overview"),
			chromedp.WaitVisible(chromedp.CSS(`#health .health-row[data-kind="dependency"][data-name="Object storage"]`)))
		rows := value(b, "health rows", chromedp.Evaluate[[]map[string]string](`[...document.querySelectorAll('#health .health-row')].map(r =>
			({kind: r.dataset.kind, name: r.dataset.name, ready: r.dataset.ready, reason: r.querySelector('.reason').innerText, text: r.innerText}))`))
		got := map[string]map[string]string{}
		for _, r := range rows {
			got[r["kind"]+" "+r["name"]] = r
		}
		for _, want := range []string{"service api", "service relay", "service instance-worker", "service projection-worker",
			"dependency Postgres", "dependency Kafka", "dependency Elasticsearch", "dependency Object storage",
			"group sluice.instance-worker", "group sluice.projection-history-v1"} {
			r, ok := got[want]
			switch {
			case !ok:
				t.Errorf("no health row %q in %v", want, rows)
			case r["ready"] != "true":
				t.Errorf("%s not ready: %v", want, r)
			case strings.TrimSpace(r["reason"]) == "":
				t.Errorf("%s without a reason: %v", want, r)
			}
		}
		if r := got["dependency Kafka"]; r != nil && !strings.Contains(r["reason"], "answered in") {
			t.Errorf("Kafka's reason: %q", r["reason"])
		}
		if r := got["group sluice.instance-worker"]; r != nil && !strings.Contains(r["text"], "running") {
			t.Errorf("the instance worker's group row does not show its pause state: %q", r["text"])
		}
		b.shot("health")
	})

	t.Run("flow", func(t *testing.T) {
		b := b.with(t)
		b.run("flow charts", b.open(d.api, "#/overview"), chromedp.WaitVisible(chromedp.CSS(`#flow .chart[data-series="flow applied"]`)))
		// Commands while the page watches: the rates and the latency move.
		var cids []string
		for i := range 5 {
			cids = append(cids, d.send(t, fmt.Sprintf("flow-%d", i), i))
		}
		for _, c := range cids {
			testenv.WaitFor(t, time.Minute, "the command applied", func() bool { return d.status(t, c) == "APPLIED" })
		}
		b.run("latency shown", chromedp.WaitVisible(chromedp.CSS(`#flow .chart[data-series="latency"]:not([data-points="0"]):not([data-points="1"])`)))
		testenv.WaitFor(t, 30*time.Second, "a p50 in the latency chart", func() bool {
			v := value(b, "latency value", chromedp.Evaluate[string](`document.querySelector('#flow .chart[data-series="latency"] .value').innerText`))
			return strings.HasPrefix(v, "p50 ") && !strings.HasPrefix(v, "p50 —") && strings.Contains(v, "p99 ")
		})
		charts := value(b, "flow charts", chromedp.Evaluate[[]map[string]string](`[...document.querySelectorAll('#flow .chart')].map(c =>
			({series: c.dataset.series, points: c.dataset.points, text: c.innerText, ticks: [...c.querySelectorAll('text.tick')].map(x => x.textContent).join(',')}))`))
		titles := map[string]string{"flow appended": "Appended", "flow published": "Published", "flow applied": "Applied", "flow projected": "Projected", "latency": "Request → readable"}
		seen := 0
		for _, c := range charts {
			title, ok := titles[c["series"]]
			if !ok {
				continue
			}
			seen++
			n, _ := strconv.Atoi(c["points"])
			if n < 2 || !strings.Contains(c["text"], title) || !strings.Contains(c["ticks"], "0,") || !regexp.MustCompile(`−\d+ (s|min),now$`).MatchString(c["ticks"]) {
				t.Errorf("chart %s: %d points, %q, ticks %q", c["series"], n, c["text"], c["ticks"])
			}
			if c["series"] != "latency" && !strings.Contains(c["text"], "/s") {
				t.Errorf("chart %s without its unit: %q", c["series"], c["text"])
			}
		}
		if seen != len(titles) {
			t.Errorf("flow charts: %v", charts)
		}
		b.shot("flow")
	})

	t.Run("streams", func(t *testing.T) {
		b := b.with(t)
		res, err := d.client.Post(d.api+"/v1/streams/Order/o-1/events", "application/json", strings.NewReader(
			`{"events":[{"event_type":"ORDER_PLACED","data":{"n":1}},{"event_type":"ORDER_PAID","data":{"n":2}},{"event_type":"ORDER_SHIPPED","data":{"n":3}}]}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("append: %d", res.StatusCode)
		}
		seqs := func() string {
			return value(b, "stream rows", chromedp.Evaluate[string](`[...document.querySelectorAll('#stream-body tr.stream-event')].map(r => r.dataset.seq + ':' + r.dataset.type).join(' ')`))
		}
		// showing waits until the table shows exactly want (the page's own
		// first load, with the default page size, may still be on screen).
		showing := func(want string) {
			value(b, "the stream table shows "+want, chromedp.Poll[bool](`[...document.querySelectorAll('#stream-body tr.stream-event')].map(r => r.dataset.seq + ':' + r.dataset.type).join(' ') === `+strconv.Quote(want),
				chromedp.WithPollingInterval(50*time.Millisecond)))
		}
		b.run("stream page 1", b.open(d.api, "#/streams/Order/o-1"), chromedp.WaitVisible(chromedp.ID("stream-limit")),
			chromedp.SetValue(chromedp.ID("stream-limit"), "2"), chromedp.Click(chromedp.ID("stream-read")))
		showing("1:ORDER_PLACED 2:ORDER_PAID")
		if got := seqs(); got != "1:ORDER_PLACED 2:ORDER_PAID" {
			t.Errorf("page 1: %q", got)
		}
		b.run("stream page 2", chromedp.Click(chromedp.ID("stream-next")))
		showing("3:ORDER_SHIPPED")
		if got := seqs(); got != "3:ORDER_SHIPPED" {
			t.Errorf("page 2: %q", got)
		}
		b.run("stream back to page 1", chromedp.Click(chromedp.ID("stream-prev")))
		showing("1:ORDER_PLACED 2:ORDER_PAID")
		b.run("newest first", chromedp.SetValue(chromedp.ID("stream-dir"), "backward"), chromedp.Click(chromedp.ID("stream-read")))
		showing("3:ORDER_SHIPPED 2:ORDER_PAID")
		if got := seqs(); got != "3:ORDER_SHIPPED 2:ORDER_PAID" {
			t.Errorf("backward page 1: %q", got)
		}
		b.run("open an event", chromedp.Click(chromedp.CSS(`#stream-body tr.stream-event[data-seq="3"] button.open`)),
			chromedp.WaitVisible(chromedp.CSS(`#stream-body tr.event-detail pre`)))
		doc := value(b, "the event", chromedp.Text(chromedp.CSS(`#stream-body tr.event-detail:not([hidden]) pre`)))
		evID := value(b, "its id", chromedp.Evaluate[string](`document.querySelector('#stream-body tr.stream-event[data-seq="3"]').dataset.eventId`))
		if !strings.Contains(doc, `"event_type": "ORDER_SHIPPED"`) || !strings.Contains(doc, evID) {
			t.Errorf("the opened event: %s", doc)
		}
		b.shot("streams")
		b.run("jump to its trace", chromedp.Click(chromedp.CSS(`#stream-body tr.stream-event[data-seq="3"] a.trace-link`)),
			chromedp.WaitVisible(chromedp.CSS(`#view-trace section[data-event-id="`+evID+`"] li[data-step="appended"][data-state="done"]`)))
	})

	t.Run("follow", func(t *testing.T) {
		b := b.with(t)
		b.run("follow", b.open(d.api, "#/streams"), chromedp.WaitVisible(chromedp.ID("follow-start")),
			chromedp.SetValue(chromedp.ID("follow-type"), "PARCEL_DELIVERED"), chromedp.Click(chromedp.ID("follow-start")),
			chromedp.WaitVisible(chromedp.CSS(`#follow-state[data-state="following"]`)))
		for i, typ := range []string{"PARCEL_SENT", "PARCEL_DELIVERED", "PARCEL_SENT", "PARCEL_DELIVERED"} {
			res, err := d.client.Post(d.api+"/v1/streams/Parcel/p-"+strconv.Itoa(i/2)+"/events", "application/json",
				strings.NewReader(`{"events":[{"event_type":"`+typ+`","data":{"i":`+strconv.Itoa(i)+`}}]}`))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
		}
		// Positive evidence first: all four received, then only the two
		// delivered shown.
		b.run("four received", chromedp.WaitVisible(chromedp.CSS(`#follow-state[data-state="following"]`)))
		testenv.WaitFor(t, 30*time.Second, "the four events received", func() bool {
			return strings.Contains(value(b, "follow state", chromedp.Text(chromedp.ID("follow-state"))), "4 events received")
		})
		rows := value(b, "followed rows", chromedp.Evaluate[string](`[...document.querySelectorAll('#follow-body tr.follow-event')].map(r => r.dataset.type).join(' ')`))
		if rows != "PARCEL_DELIVERED PARCEL_DELIVERED" {
			t.Errorf("followed with the filter PARCEL_DELIVERED: %q", rows)
		}
		b.shot("follow")
		b.run("stop", chromedp.Click(chromedp.ID("follow-stop")), chromedp.WaitVisible(chromedp.CSS(`#follow-state[data-state="stopped"]`)))
	})

	t.Run("pause and resume", func(t *testing.T) {
		b := b.with(t)
		group := d.admin(t, "GET", "/admin/v1/overview", nil)
		name := ""
		for _, g := range group["groups"].([]any) {
			if n := g.(map[string]any)["group"].(string); strings.HasSuffix(n, "instance-worker") {
				name = n
			}
		}
		if name == "" {
			t.Fatalf("no instance-worker group in the overview: %v", group["groups"])
		}
		pausePath := "/admin/v1/consumers/" + name + "/pause"
		row := `#groups tr[data-group="` + name + `"]`
		// Auto-refresh off: the page refreshes the overview itself after
		// the action, which is what this test looks at.
		b.run("overview groups", b.open(d.api, "#/overview"), chromedp.WaitVisible(chromedp.CSS(row+`[data-paused="false"]`)),
			chromedp.Click(chromedp.ID("auto")))
		// Clicked in the page in one step: a refresh that was in flight
		// when auto-refresh went off may still re-render the table, and a
		// node chromedp found could be replaced before its click lands.
		value(b, "pause: dry run clicked", chromedp.Poll[bool](`(() => { const x = document.querySelector(`+strconv.Quote(row+" button.pause")+`); if (!x) return false; x.click(); return true; })()`,
			chromedp.WithPollingInterval(50*time.Millisecond)))
		b.run("pause: dry run", chromedp.WaitVisible(chromedp.ID("confirm-summary")))
		summary := value(b, "pause preview", chromedp.Text(chromedp.ID("confirm-summary")))
		preview := value(b, "pause preview JSON", chromedp.Text(chromedp.ID("confirm-preview")))
		if !strings.Contains(summary, "would pause "+name) || !strings.Contains(preview, `"dry_run": true`) {
			t.Errorf("pause preview: %q\n%s", summary, preview)
		}
		if st := d.admin(t, "GET", pausePath, nil); st["paused"] != false {
			t.Fatalf("the dry run paused the group: %v", st)
		}
		// A second action while this one's dialog is open is refused, so
		// that one Confirm runs one action, the one previewed. (The modal
		// dialog makes the page inert to the mouse; a script's click still
		// reaches the button.)
		value(b, "second action while the first is open", chromedp.Evaluate[bool](`(document.querySelector('`+row+` button.pause').click(), true)`))
		b.run("busy message", chromedp.WaitVisible(chromedp.ID("error")))
		if msg := value(b, "busy message", chromedp.Text(chromedp.ID("error"))); !strings.Contains(msg, "another action is in progress") {
			t.Errorf("a second action during the first one's preview was not refused: %q", msg)
		}
		if again := value(b, "pause preview after the second click", chromedp.Text(chromedp.ID("confirm-summary"))); again != summary {
			t.Errorf("the second action replaced the preview: %q, was %q", again, summary)
		}
		b.shot("pause-confirm")
		b.run("pause: confirm", chromedp.SendKeys(chromedp.ID("confirm-reason"), "browser test"), chromedp.Click(chromedp.ID("confirm-ok")),
			chromedp.WaitVisible(chromedp.CSS(row+`[data-paused="true"]`)))
		if st := d.admin(t, "GET", pausePath, nil); st["paused"] != true || st["reason"] != "browser test" || st["by"] != "admin:operator" {
			t.Errorf("pause state after confirm: %v", st)
		}
		// The badge says paused once the worker's pause has taken effect
		// (sluice_worker_paused): auto-refresh on until the page shows it,
		// then off again for the clicks that follow.
		b.run("pause: taken effect", chromedp.Click(chromedp.ID("auto")), chromedp.WaitVisible(chromedp.CSS(row+`[data-pause-state="paused"]`)),
			chromedp.Click(chromedp.ID("auto")))
		badge := value(b, "pause badge", chromedp.Text(chromedp.CSS(row+" .state.paused")))
		if badge != "paused" {
			t.Errorf("the overview's pause badge: %q", badge)
		}
		if ov := d.admin(t, "GET", "/admin/v1/overview", nil); !groupPausedIn(ov, name) {
			t.Errorf("the page says paused, the overview does not: %v", ov["groups"])
		}
		b.shot("overview-paused")
		value(b, "resume: dry run clicked", chromedp.Poll[bool](`(() => { const x = document.querySelector(`+strconv.Quote(row+" button.resume")+`); if (!x) return false; x.click(); return true; })()`,
			chromedp.WithPollingInterval(50*time.Millisecond)))
		b.run("resume: dry run", chromedp.WaitVisible(chromedp.ID("confirm-summary")))
		if summary := value(b, "resume preview", chromedp.Text(chromedp.ID("confirm-summary"))); !strings.Contains(summary, "would resume "+name) {
			t.Errorf("resume preview: %q", summary)
		}
		if st := d.admin(t, "GET", pausePath, nil); st["paused"] != true {
			t.Fatalf("the resume dry run changed the group: %v", st)
		}
		b.run("resume: confirm", chromedp.Click(chromedp.ID("confirm-ok")), chromedp.WaitVisible(chromedp.CSS(row+`[data-paused="false"]`)))
		if st := d.admin(t, "GET", pausePath, nil); st["paused"] != false {
			t.Errorf("pause state after resume: %v", st)
		}
		b.run("resume: taken effect", chromedp.Click(chromedp.ID("auto")), chromedp.WaitVisible(chromedp.CSS(row+`[data-pause-state="running"]`)),
			chromedp.Click(chromedp.ID("auto")))
	})

	t.Run("checkpoint dry run", func(t *testing.T) {
		// Each button waits until the last action (its dry run, dialog or
		// real call) has finished: the console refuses a second action
		// meanwhile ("another action is in progress"), and on a loaded
		// machine a cancelled dialog's promise chain can end after the
		// next click is sent.
		b := b.with(t)
		before := d.admin(t, "GET", "/admin/v1/overview", nil)["relay"].(map[string]any)["checkpoint"]
		b.run("actions", b.open(d.api, "#/actions"), chromedp.WaitVisible(chromedp.CSS(`#cp-position[placeholder^="now "]`)),
			chromedp.SendKeys(chromedp.ID("cp-position"), "0"), chromedp.WaitReady(chromedp.CSS(`#confirm:not([data-busy])`)), chromedp.Click(chromedp.ID("cp-set")),
			chromedp.WaitVisible(chromedp.ID("confirm-summary")))
		summary := value(b, "checkpoint preview", chromedp.Text(chromedp.ID("confirm-summary")))
		if !strings.Contains(summary, "would move the relay checkpoint from ") || !strings.Contains(summary, " to 0 ") || !strings.Contains(summary, "republish ") {
			t.Errorf("checkpoint preview: %q", summary)
		}
		b.shot("checkpoint-confirm")
		b.run("checkpoint: cancel", chromedp.Click(chromedp.ID("confirm-cancel")), chromedp.WaitNotVisible(chromedp.ID("confirm-summary")))
		time.Sleep(500 * time.Millisecond)
		if after := d.admin(t, "GET", "/admin/v1/overview", nil)["relay"].(map[string]any)["checkpoint"]; after != before {
			t.Errorf("the checkpoint moved from %v to %v without a confirm", before, after)
		}
		// A consumer reset's preview lists the partitions and the live
		// member; cancelled, nothing is committed.
		b.run("reset: dry run", chromedp.SetValue(chromedp.ID("reset-to"), "earliest"), chromedp.WaitReady(chromedp.CSS(`#confirm:not([data-busy])`)), chromedp.Click(chromedp.ID("group-reset")),
			chromedp.WaitVisible(chromedp.ID("confirm-summary")))
		if summary := value(b, "reset preview", chromedp.Text(chromedp.ID("confirm-summary"))); !strings.Contains(summary, "would reset ") ||
			!strings.Contains(summary, " to earliest on 3 partitions; live members: ") {
			t.Errorf("reset preview: %q", summary)
		}
		b.run("reset: cancel", chromedp.Click(chromedp.ID("confirm-cancel")), chromedp.WaitNotVisible(chromedp.ID("confirm-summary")))
		// An action the API refuses shows its problem+json: a checkpoint
		// past the head is unsafe (422).
		b.run("checkpoint past the head", chromedp.SetValue(chromedp.ID("cp-position"), "999999"), chromedp.WaitReady(chromedp.CSS(`#confirm:not([data-busy])`)), chromedp.Click(chromedp.ID("cp-set")),
			chromedp.WaitVisible(chromedp.CSS(`#error[data-code="unsafe"]`)))
		if msg := value(b, "the refusal", chromedp.Text(chromedp.ID("error"))); !strings.Contains(msg, "422 unsafe") {
			t.Errorf("refused checkpoint: %q", msg)
		}
		// Verify: dry run, confirm, the report.
		b.run("verify", chromedp.WaitReady(chromedp.CSS(`#confirm:not([data-busy])`)), chromedp.Click(chromedp.ID("verify-run")), chromedp.WaitVisible(chromedp.ID("confirm-summary")))
		if summary := value(b, "verify preview", chromedp.Text(chromedp.ID("confirm-summary"))); !strings.Contains(summary, "would compare every instance of shop/orders") {
			t.Errorf("verify preview: %q", summary)
		}
		b.run("verify: confirm", chromedp.Click(chromedp.ID("confirm-ok")), chromedp.WaitVisible(chromedp.CSS(`.verify-report[data-class="orders"]`)))
		if res := value(b, "verify result", chromedp.Text(chromedp.ID("result"))); !strings.Contains(res, "missing") || !strings.Contains(res, " 0 mismatched") {
			t.Errorf("verify result: %q", res)
		}
		b.shot("actions")
	})

	t.Run("dlq redrive", func(t *testing.T) {
		b := b.with(t)
		d.failLoads.Store(true)
		dead := d.send(t, d.failID, 5)
		testenv.WaitFor(t, time.Minute, "the command dead-lettered", func() bool { return d.status(t, dead) == "DEAD" })
		d.failLoads.Store(false)
		row := `tr[data-letter]:has(a[href="#/trace/` + api.EventIDForCommand(dead) + `"])`
		b.run("dlq list", b.open(d.api, "#/dlq"), chromedp.WaitVisible(chromedp.CSS(row)))
		b.shot("dlq")
		b.run("redrive: dry run", chromedp.Click(chromedp.CSS(row+" button.redrive")), chromedp.WaitVisible(chromedp.ID("confirm-preview")))
		preview := value(b, "preview", chromedp.Text(chromedp.ID("confirm-preview")))
		if !strings.Contains(preview, "dry_run") {
			t.Errorf("the preview is not a dry run: %s", preview)
		}
		if st := d.status(t, dead); st != "DEAD" {
			t.Fatalf("the dry run changed the command: %s", st)
		}
		b.shot("dlq-confirm")
		b.run("redrive: confirm", chromedp.Click(chromedp.ID("confirm-ok")), chromedp.WaitVisible(chromedp.CSS(`.result[data-action="redrive"]`)))
		testenv.WaitFor(t, time.Minute, "the redriven command applied", func() bool { return d.status(t, dead) == "APPLIED" })
		// The trace shows it: the instance worker's row done after its
		// failed attempts, the document written.
		b.run("trace the redriven command", b.open(d.api, "#/trace/"+dead),
			chromedp.WaitVisible(chromedp.CSS(`section[data-kind="command"] li[data-step="handled"][data-state="done"]`)),
			chromedp.WaitVisible(chromedp.CSS(`section[data-kind="command"] li[data-step="document"][data-state="done"]`)))
		b.shot("dlq-redriven-trace")
	})

	t.Run("projection rebuild", func(t *testing.T) {
		b := b.with(t)
		b.run("actions", b.open(d.api, "#/actions"), chromedp.WaitVisible(chromedp.CSS(`#cp-position[placeholder^="now "]`)),
			chromedp.SetValue(chromedp.ID("proj-name"), "history"), chromedp.SetValue(chromedp.ID("proj-version"), "2"),
			chromedp.SetValue(chromedp.ID("proj-settle"), "0s"),
			chromedp.Click(chromedp.ID("proj-rebuild")), chromedp.WaitVisible(chromedp.ID("confirm-summary")))
		if summary := value(b, "rebuild preview", chromedp.Text(chromedp.ID("confirm-summary"))); !strings.Contains(summary, "would build history v2 into ") {
			t.Errorf("rebuild preview: %q", summary)
		}
		if jobs := d.admin(t, "GET", "/admin/v1/overview", nil)["jobs"].([]any); len(jobs) != 0 {
			t.Fatalf("the rebuild dry run started a job: %v", jobs)
		}
		b.run("rebuild: confirm", chromedp.Click(chromedp.ID("confirm-ok")),
			chromedp.WaitVisible(chromedp.CSS(`#result[data-action="projection.rebuild"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#jobs tr[data-job][data-state="done"]`)))
		if res := value(b, "rebuild result", chromedp.Text(chromedp.ID("result"))); !strings.Contains(res, "started job rebuild-history-") {
			t.Errorf("rebuild result: %q", res)
		}
		// The jobs table is redrawn every refresh while a job runs, so the
		// row is read in one script call, again until it says done (a
		// read between two redraws finds the old row detached and empty).
		var prog string
		testenv.WaitFor(t, 30*time.Second, "the finished job's row", func() bool {
			prog = value(b, "job progress", chromedp.Evaluate[string](`(document.querySelector('#jobs tr[data-job][data-state="done"]') || {innerText: ""}).innerText`))
			return strings.Contains(prog, "done: v1 → v2")
		})
		// The job's summary is read by its JSON names (records and ms, not
		// undefined or NaN).
		if strings.Contains(prog, "undefined") || strings.Contains(prog, "NaN") || !strings.Contains(prog, " records · ") {
			t.Errorf("job row: %q", prog)
		}
		b.shot("rebuild-job")
		// Rollback: its preview names the versions and lists the indices,
		// read by their JSON names (index, version, live: they were Go
		// field names); cancelled, nothing runs.
		b.run("rollback: dry run", chromedp.Click(chromedp.ID("proj-rollback")), chromedp.WaitVisible(chromedp.ID("confirm-summary")))
		if summary := value(b, "rollback preview", chromedp.Text(chromedp.ID("confirm-summary"))); !strings.Contains(summary, "would roll back from v2 to v1") ||
			!strings.Contains(summary, "_history_v1 v1, ") || !strings.Contains(summary, "_history_v2 v2 (live)") || strings.Contains(summary, "undefined") {
			t.Errorf("rollback preview: %q", summary)
		}
		b.run("rollback: cancel", chromedp.Click(chromedp.ID("confirm-cancel")), chromedp.WaitNotVisible(chromedp.ID("confirm-summary")))
		if jobs := d.admin(t, "GET", "/admin/v1/overview", nil)["jobs"].([]any); len(jobs) != 1 {
			t.Errorf("jobs after a cancelled rollback: %v, want the rebuild only", jobs)
		}
	})
}

// groupPausedIn reports whether the overview ov shows group's pause in
// effect (pause_state paused).
func groupPausedIn(ov map[string]any, group string) bool {
	gs, _ := ov["groups"].([]any)
	for _, g := range gs {
		if g, ok := g.(map[string]any); ok && g["group"] == group {
			return g["pause_state"] == "paused"
		}
	}
	return false
}
