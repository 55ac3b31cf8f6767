package pipelinebench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testenv"
)

// Names of the processes whose CPU is counted, as the report shows them.
const (
	groupAPI        = "api"
	groupRelay      = "relay"
	groupInstance   = "instance-worker"
	groupProjection = "projection-worker"
	groupKafka      = "kafka"
	groupES         = "elasticsearch"
	groupMinIO      = "minio"
	groupPGDB       = "postgres-db"
	groupPGAll      = "postgres-all"
	groupDriver     = "driver"
	groupOther      = "other"
	groupMachine    = "machine"
)

// services are the four services of a deployment, in start order: the
// subcommand of the binary each runs (deploy/docker-compose.yml).
var services = []string{groupAPI, groupRelay, groupInstance, groupProjection}

// Backends of the event store.
const (
	backendFile  = "file"
	backendMinIO = "minio"
)

// proc is one child process: a service of the binary or a role of the test
// binary. Its output goes to a log file; lines, when set, also receives
// every line of it with the time it was read.
type proc struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{}
	logPath string
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and waits for the exit (SIGKILL after a minute).
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// startProc starts path with args and env; its stdout goes to stdout when
// set (else to the log, with stderr), and each line of its stderr (and of
// its stdout when stdout is nil) to lines when set.
func startProc(b testing.TB, name, logDir, path string, args, env []string, stdout io.Writer, lines func(string, time.Time)) *proc {
	b.Helper()
	p := &proc{name: name, done: make(chan struct{}), logPath: filepath.Join(logDir, name+".log")}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(logf, "==== %s start %s ====\n", time.Now().Format(time.RFC3339Nano), name)
	c := exec.Command(path, args...)
	c.Env = env
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var pipe io.ReadCloser
	if lines != nil {
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		pipe = r
		c.Stderr = w
		if stdout == nil {
			c.Stdout = w
		}
		defer w.Close()
	} else {
		c.Stderr = logf
		if stdout == nil {
			c.Stdout = logf
		}
	}
	if stdout != nil {
		c.Stdout = stdout
	}
	if err := c.Start(); err != nil {
		logf.Close()
		b.Fatalf("start %s: %v", name, err)
	}
	p.cmd = c
	var copied sync.WaitGroup
	if pipe != nil {
		copied.Go(func() {
			sc := bufio.NewScanner(pipe)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				at := time.Now()
				fmt.Fprintln(logf, sc.Text())
				lines(sc.Text(), at)
			}
			pipe.Close()
		})
	}
	go func() {
		_ = c.Wait()
		copied.Wait()
		fmt.Fprintf(logf, "==== %s exit %s: %s ====\n", time.Now().Format(time.RFC3339Nano), name, c.ProcessState)
		logf.Close()
		close(p.done)
	}()
	return p
}

// docKey names an instance document at a version (the slot of the command
// that wrote it).
type docKey struct {
	id      string
	version int64
}

// deployment is one pipeline as deployed: its database, event store,
// Kafka and Elasticsearch processes and the four services.
type deployment struct {
	b       testing.TB
	bin     string
	backend string
	dbURL   string
	pool    *pgxpool.Pool
	logDir  string
	base    map[string]string
	minio   *testenv.MinIO
	kafka   *proc
	es      *proc
	svcs    map[string]*service
	apiURL  string
	client  *http.Client

	mu       sync.Mutex
	readable map[docKey]time.Time // the first successful write of each document version
	esWrites int
}

// service is one service process with its settings.
type service struct {
	kind     string
	httpAddr string
	env      map[string]string
	p        *proc
}

// deployOptions changes a deployment.
type deployOptions struct {
	// logLevel of the services (default warn).
	logLevel string
	// beforeServices, when set, runs once the database, the store's
	// settings, Kafka and Elasticsearch are there, before any service
	// starts (the start-up benchmark seeds the store).
	beforeServices func(d *deployment)
}

// deploy starts a deployment on backend (file or minio) and waits until
// every service is ready. Everything is stopped when b ends.
func deploy(b testing.TB, backend string, o deployOptions) *deployment {
	b.Helper()
	d := &deployment{b: b, bin: binary(b), backend: backend, logDir: b.TempDir(), svcs: map[string]*service{},
		readable: map[docKey]time.Time{},
		client: &http.Client{Timeout: time.Minute, Transport: &http.Transport{
			MaxIdleConnsPerHost: 1100, MaxConnsPerHost: 1100, IdleConnTimeout: time.Minute}}}
	d.dbURL, d.pool = migratedBy(b, d.bin)
	if o.logLevel == "" {
		o.logLevel = "warn"
	}
	d.base = map[string]string{
		"DATABASE_URL":                   d.dbURL,
		"KAFKA_TOPIC_PARTITIONS":         "3",
		"KAFKA_TOPIC_REPLICATION_FACTOR": "1",
		"SLUICE_LOG_FORMAT":              "json",
		"SLUICE_LOG_LEVEL":               o.logLevel,
	}
	switch backend {
	case backendFile:
		d.base["EVENT_STORE_BACKEND"] = "file"
		d.base["EVENT_STORE_FILE_DIR"] = filepath.Join(fileStoreParent(b), "events")
	case backendMinIO:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		mi, err := testenv.StartMinIO(ctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(mi.Close)
		d.minio = mi
		d.base["EVENT_STORE_BACKEND"] = "s3"
		d.base["EVENT_STORE_BUCKET"] = mi.NewBucket(b)
		d.base["EVENT_STORE_S3_ENDPOINT"] = mi.Endpoint
		d.base["EVENT_STORE_S3_ACCESS_KEY_ID"] = mi.AccessKey
		d.base["EVENT_STORE_S3_SECRET_ACCESS_KEY"] = mi.SecretKey
		d.base["EVENT_STORE_S3_PATH_STYLE"] = "true"
	default:
		b.Fatalf("unknown backend %q", backend)
	}
	// One thread running Go code per service, as the Kubernetes manifests
	// run them (GOMAXPROCS from a CPU limit of one, deploy/k8s/base); the
	// same for a base binary measured with SLUICE_BENCH_BINARY.
	d.base["GOMAXPROCS"] = "1"
	// Settings of the services for experiments, "K=V,K=V".
	for _, kv := range strings.Split(os.Getenv("SLUICE_BENCH_SERVICE_ENV"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			d.base[strings.TrimSpace(k)] = v
		}
	}

	// Registered after the database and MinIO: cleanups run last first, so
	// the processes stop before their database is dropped.
	b.Cleanup(d.stopAll)
	kafkaAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(b))
	d.kafka = d.startRole(roleKafka, kafkaAddr, nil)
	esAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(b))
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	d.es = d.startRole(roleES, esAddr, w)
	w.Close()
	go d.readWrites(r)
	for _, addr := range []string{kafkaAddr, esAddr} {
		testenv.WaitFor(b, time.Minute, addr+" listening", func() bool {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return false
			}
			c.Close()
			return true
		})
	}
	d.base["KAFKA_BROKERS"] = kafkaAddr
	d.base["ELASTICSEARCH_URLS"] = "http://" + esAddr
	for _, kind := range services {
		s := &service{kind: kind, httpAddr: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(b)), env: maps.Clone(d.base)}
		s.env["PROCESSED_EVENT_OWNER"] = kind
		s.env["SLUICE_HTTP_ADDR"] = s.httpAddr
		if kind == groupAPI {
			s.env["SLUICE_API_ADDR"] = s.httpAddr // the API serves the probes on its own port
			d.apiURL = "http://" + s.httpAddr
		}
		d.svcs[kind] = s
	}
	if o.beforeServices != nil {
		o.beforeServices(d)
	}
	for _, kind := range services {
		d.start(kind, nil)
	}
	for _, kind := range services {
		d.waitReady(kind, 2*time.Minute)
	}
	return d
}

// fileStoreParent is a new folder for the file backend's data, removed
// when b ends, on the medium MinIO's data is on (testenv.MinIODataParent:
// /dev/shm when it is a tmpfs), so that the two backends are measured
// alike; SLUICE_BENCH_FILE_DIR names another parent (a disk path, to
// measure the file backend on a drive). On this machine's root file
// system, an ext4 without a journal, every new file's inode allocation
// scans the inodes freed in the last minute (find_inode_bit,
// recently_deleted), reading inode tables from the disk: the segment's
// create was 11–35 % of the api process's CPU at a paced load and the
// file backend's tail followed how much the machine had deleted
// (docs/benchmarks.md) — the reason MinIO's data is on tmpfs.
func fileStoreParent(b testing.TB) string {
	parent := os.Getenv("SLUICE_BENCH_FILE_DIR")
	if parent == "" {
		parent = testenv.MinIODataParent()
	}
	dir, err := os.MkdirTemp(parent, "sluice-pipelinebench-events-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// migratedBy creates a database migrated by bin's own `migrate up`, so that
// a binary of another revision (SLUICE_BENCH_BINARY) runs on its own
// schema, not on this tree's (whose migrations may have dropped functions
// an older binary calls), and returns it with a pool closed when b ends.
func migratedBy(b testing.TB, bin string) (string, *pgxpool.Pool) {
	b.Helper()
	url := testenv.NewDatabase(b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "migrate", "up")
	cmd.Env = childEnv(map[string]string{"DATABASE_URL": url})
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("pipelinebench: %s migrate up: %v\n%s", bin, err, out)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return url, pool
}

// startRole starts the test binary as role on addr, its data in a new
// folder, its stdout to stdout when set.
func (d *deployment) startRole(role, addr string, stdout io.Writer) *proc {
	env := childEnv(map[string]string{envRole: role, envAddr: addr, envDir: d.b.TempDir()})
	return startProc(d.b, role, d.logDir, os.Args[0], []string{"-test.run=^$", "-test.bench=^$"}, env, stdout, nil)
}

// readWrites records the instance document writes the Elasticsearch
// process prints (serveES).
func (d *deployment) readWrites(r io.ReadCloser) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "W" {
			continue
		}
		v, err1 := strconv.ParseInt(f[2], 10, 64)
		ns, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		k := docKey{f[1], v}
		d.mu.Lock()
		if _, seen := d.readable[k]; !seen {
			d.readable[k] = time.Unix(0, ns)
		}
		d.esWrites++
		d.mu.Unlock()
	}
}

// readableAt returns when the document version became readable.
func (d *deployment) readableAt(k docKey) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.readable[k]
	return t, ok
}

// childEnv is a process environment made of PATH, HOME and TMPDIR of this
// one and m, so nothing else of the benchmark's environment reaches a
// service.
func childEnv(m map[string]string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	return env
}

// start starts the service kind; lines, when set, receives each line it
// logs.
func (d *deployment) start(kind string, lines func(string, time.Time)) {
	s := d.svcs[kind]
	s.p = startProc(d.b, kind, d.logDir, d.bin, []string{kind}, childEnv(s.env), nil, lines)
}

// stop stops the service kind (SIGTERM, its drain).
func (d *deployment) stop(kind string) {
	if s := d.svcs[kind]; s.p != nil {
		s.p.stop()
	}
}

// ready reports whether kind's /readyz answers 200.
func (d *deployment) ready(kind string) bool {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + d.svcs[kind].httpAddr + "/readyz")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitReady waits until kind is ready, failing with its log's tail when it
// exits or is not ready within.
func (d *deployment) waitReady(kind string, within time.Duration) {
	d.b.Helper()
	testenv.WaitForEvery(d.b, within, 10*time.Millisecond, kind+" ready", func() bool {
		if d.svcs[kind].p.exited() {
			d.b.Fatalf("%s exited:\n%s", kind, tail(d.svcs[kind].p.logPath, 40))
		}
		return d.ready(kind)
	})
}

// stopAll stops the services, then Kafka and Elasticsearch; on failure it
// prints the tail of every log.
func (d *deployment) stopAll() {
	var wg sync.WaitGroup
	for _, s := range d.svcs {
		if s.p != nil {
			wg.Go(s.p.stop)
		}
	}
	wg.Wait()
	for _, p := range []*proc{d.kafka, d.es} {
		if p != nil {
			p.stop()
		}
	}
	if d.b.Failed() {
		for _, kind := range slices.Sorted(maps.Keys(d.svcs)) {
			if p := d.svcs[kind].p; p != nil {
				d.b.Logf("---- last lines of %s (%s) ----\n%s", kind, p.logPath, tail(p.logPath, 30))
			}
		}
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// pids returns the processes whose CPU is counted by name: the services,
// Kafka, Elasticsearch, MinIO (when the backend is) and this process (the
// load driver, which also reads the write log).
func (d *deployment) pids() map[string]int {
	out := map[string]int{groupKafka: d.kafka.pid(), groupES: d.es.pid(), groupDriver: os.Getpid()}
	for kind, s := range d.svcs {
		out[kind] = s.p.pid()
	}
	if d.minio != nil {
		if pid := findPID(d.minio.DataDir()); pid > 0 {
			out[groupMinIO] = pid
		}
	}
	return out
}
