package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// devProc is a `sluice dev` process started from the built binary.
type devProc struct {
	cmd  *exec.Cmd
	out  *testenv.Buffer
	done chan struct{}
}

// buildSluice builds the sluice binary once for the test.
func buildSluice(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// devStack is the addresses of one dev data dir.
type devStack struct {
	bin, dataDir               string
	apiAddr, esAddr, kafkaAddr string
	pgPort                     int
	env                        []string
}

func newDevStack(t *testing.T, bin, databaseURL string) *devStack {
	free := func() string { return "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) }
	d := &devStack{bin: bin, dataDir: t.TempDir(), apiAddr: free(), esAddr: free(), kafkaAddr: free(), pgPort: testenv.FreePort(t)}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EVENT_STORE_BACKEND=") { // dev's own file backend
			d.env = append(d.env, kv)
		}
	}
	d.env = append(d.env, "DATABASE_URL="+databaseURL, "SLUICE_API_ADDR="+d.apiAddr, "SLUICE_HTTP_ADDR=off", "SLUICE_LOG_LEVEL=warn")
	return d
}

func (d *devStack) start(t *testing.T) *devProc {
	t.Helper()
	c := exec.Command(d.bin, "dev", "--data-dir", d.dataDir, "--es-addr", d.esAddr, "--kafka-addr", d.kafkaAddr,
		"--postgres-port", strconv.Itoa(d.pgPort))
	c.Env = d.env
	p := &devProc{cmd: c, out: &testenv.Buffer{}, done: make(chan struct{})}
	c.Stdout, c.Stderr = p.out, p.out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = c.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(60 * time.Second):
			_ = c.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *devProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and requires a clean exit.
func (p *devProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("sluice dev did not stop within 60s of SIGTERM\n%s", p.out.String())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("sluice dev exited %d after SIGTERM\n%s", code, p.out.String())
	}
}

var devHTTP = &http.Client{Timeout: 5 * time.Second}

// httpDo returns the status and body, or 0 when the server does not answer.
func httpDo(method, url, body string) (int, []byte) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := devHTTP.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// esHits returns every document of an index: id → version, seq_no and source.
func esHits(esAddr, index string) (map[string]string, bool) {
	code, b := httpDo("GET", "http://"+esAddr+"/"+index+"/_search?size=1000&version=true&seq_no_primary_term=true", "")
	if code != 200 {
		return nil, false
	}
	var res struct {
		Hits struct {
			Hits []struct {
				ID      string          `json:"_id"`
				Version int64           `json:"_version"`
				SeqNo   int64           `json:"_seq_no"`
				Source  json.RawMessage `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if json.Unmarshal(b, &res) != nil {
		return nil, false
	}
	out := map[string]string{}
	for _, h := range res.Hits.Hits {
		out[h.ID] = fmt.Sprintf("v%d seq%d %s", h.Version, h.SeqNo, h.Source)
	}
	return out, true
}

// The dev loop survives a restart (issue 27.1): instances created through
// the API are in Elasticsearch; after SIGTERM and a second `sluice dev` on
// the same data dir every document is still there, with the same _version
// and _seq_no, and `sluice verify` finds every instance ok.
func TestDevRestartKeepsEveryReadModel(t *testing.T) {
	bin := buildSluice(t)
	d := newDevStack(t, bin, testenv.NewDatabase(t))
	const n = 6
	p1 := d.start(t)
	for i := 0; i < n; i++ {
		body := fmt.Sprintf(`{"instance_id":"i%d","data":{"total":%d}}`, i, 10*i)
		testenv.WaitForEvery(t, 90*time.Second, 200*time.Millisecond, "the API to accept create "+strconv.Itoa(i), func() bool {
			if p1.exited() {
				t.Fatalf("sluice dev exited\n%s", p1.out.String())
			}
			code, _ := httpDo("POST", "http://"+d.apiAddr+"/v1/dbs/shop/classes/orders/instances", body)
			return code == http.StatusAccepted
		})
	}
	indices := []string{"sluice_shop_instances", "sluice_shop_history"}
	before := map[string]map[string]string{}
	testenv.WaitForEvery(t, 90*time.Second, 200*time.Millisecond, "every instance and history document in Elasticsearch", func() bool {
		for _, ix := range indices {
			hits, ok := esHits(d.esAddr, ix)
			if !ok || len(hits) < n {
				return false
			}
			before[ix] = hits
		}
		return true
	})
	p1.stop(t)

	p2 := d.start(t)
	testenv.WaitForEvery(t, 90*time.Second, 200*time.Millisecond, "the restarted Elasticsearch test server", func() bool {
		if p2.exited() {
			t.Fatalf("second sluice dev exited\n%s", p2.out.String())
		}
		code, _ := httpDo("GET", "http://"+d.esAddr+"/", "")
		return code == 200
	})
	for _, ix := range indices {
		after, ok := esHits(d.esAddr, ix)
		if !ok || !reflect.DeepEqual(after, before[ix]) {
			t.Errorf("%s after the restart:\n got %v\nwant %v", ix, after, before[ix])
		}
	}
	verify := exec.Command(bin, "verify", "--db", "shop", "--class", "orders")
	verify.Env = append(d.env, "EVENT_STORE_BACKEND=file", "EVENT_STORE_FILE_DIR="+filepath.Join(d.dataDir, "events"),
		"ELASTICSEARCH_URLS=http://"+d.esAddr)
	out, err := verify.CombinedOutput()
	if want := fmt.Sprintf("verify: %d instances, %d ok, 0 missing, 0 stale, 0 extra, 0 mismatched", n, n); err != nil || !strings.Contains(string(out), want) {
		t.Errorf("sluice verify after the restart: %v, want %q\n%s", err, want, out)
	}
	p2.stop(t)
}

// One owner per data dir (issue 27.1): a second `sluice dev` on the same
// data dir (and the same ports, as a second `make dev` has) fails at once,
// naming the owner's PID and ports, and leaves the first one — and the local
// PostgreSQL it started — running. Before the lock, the second adopted the
// first's PostgreSQL, failed on the taken Elasticsearch port, and stopped
// that PostgreSQL on its way out.
func TestDevSecondStackOnOneDataDirFailsFast(t *testing.T) {
	bin := buildSluice(t)
	d := newDevStack(t, bin, "") // its own local PostgreSQL in the data dir
	p1 := d.start(t)
	create := func(id string) int {
		code, _ := httpDo("POST", "http://"+d.apiAddr+"/v1/dbs/shop/classes/orders/instances",
			`{"instance_id":"`+id+`","data":{"total":1}}`)
		return code
	}
	testenv.WaitForEvery(t, 120*time.Second, 200*time.Millisecond, "the first sluice dev to accept a create", func() bool {
		if p1.exited() {
			t.Fatalf("first sluice dev exited\n%s", p1.out.String())
		}
		return create("first") == http.StatusAccepted
	})

	p2 := d.start(t)
	select {
	case <-p2.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the second sluice dev on the same data dir is still running after 30s\n%s", p2.out.String())
	}
	out := p2.out.String()
	if p2.cmd.ProcessState.ExitCode() == 0 {
		t.Fatalf("the second sluice dev exited 0\n%s", out)
	}
	for _, want := range []string{
		"in use by another sluice dev",
		fmt.Sprintf("pid %d", p1.cmd.Process.Pid),
		fmt.Sprintf("postgres port %d", d.pgPort),
		"elasticsearch " + d.esAddr,
		"api " + d.apiAddr,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the second sluice dev's error lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "starting a local PostgreSQL") {
		t.Errorf("the second sluice dev touched PostgreSQL before it gave up:\n%s", out)
	}
	// The first still serves, with its PostgreSQL.
	if p1.exited() {
		t.Fatalf("the first sluice dev exited\n%s", p1.out.String())
	}
	if code := create("second"); code != http.StatusAccepted {
		t.Fatalf("the first sluice dev after the second gave up: create answered %d\n%s", code, p1.out.String())
	}
	p1.stop(t)
}
