package acceptance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/eventstoretest"
	"github.com/sluicehq/sluice/registry/registrytest"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Names of the pipeline as the product defines them.
const (
	commandsTopic = "sluice.commands"
	eventsTopic   = "sluice.events"
	commandsDLQ   = "sluice.commands.dlq"
	eventsDLQ     = "sluice.events.dlq"
	indexPrefix   = "sluice_"
)

// Registry handlers and consumer groups of the two workers (the history
// projection at version 1); TestProductNames keeps them equal to the
// product's.
const (
	instanceHandler = instanceworker.HandlerName
	instanceGroup   = "sluice." + instanceworker.GroupName // KAFKA_GROUP_PREFIX defaults to KAFKA_TOPIC_PREFIX
	historyHandler  = "projection:history:v1"
	historyGroup    = "sluice.projection-history-v1"
	// shadowHandler and shadowGroup are the instances projection run by a
	// projection worker under shadowPrefix (scenario 4), next to the
	// instance worker's own documents.
	shadowHandler = "projection:instances:v1"
	shadowGroup   = "sluice.projection-instances-v1"
	shadowPrefix  = indexPrefix + "shadow_"
)

// TestProductNames checks the names the suite queries by against the
// product's own.
func TestProductNames(t *testing.T) {
	if h := projectionworker.HandlerName("history", 1); h != historyHandler {
		t.Errorf("history handler %q, the suite uses %q", h, historyHandler)
	}
	if g := "sluice." + projectionworker.GroupName("history", 1); g != historyGroup {
		t.Errorf("history group %q, the suite uses %q", g, historyGroup)
	}
}

// Service kinds: the subcommand of the binary a service runs.
const (
	kindAPI        = "api"
	kindRelay      = "relay"
	kindInstance   = "instance-worker"
	kindProjection = "projection-worker"
)

// setup describes one pipeline.
type setup struct {
	// partitions of every topic (default 2).
	partitions int
	// pgProxied names the services whose DATABASE_URL goes through the
	// cuttable Postgres proxy (pipeline.pg).
	pgProxied []string
	// s3Proxied sends every service's S3 traffic through a cuttable TCP
	// proxy in front of MinIO (pipeline.s3).
	s3Proxied bool
	// env is added to every service's environment.
	env map[string]string
	// allow5xx: the scenario makes the API fail on purpose (the chaos
	// soak kills it and cuts its dependencies), so API answers ≥ 500 are
	// counted but do not fail the test.
	allow5xx bool
	// twoStoreServers spreads the event store's shards (EVENT_STORE_SHARDS
	// in env, at least 2) over two Postgres servers with
	// EVENT_STORE_SHARD_MAP: the lower half on the pipeline's database,
	// the upper half on a database of a second server (storeB).
	twoStoreServers bool
}

// pipeline is one isolated sluice deployment: its own database, bucket,
// Kafka cluster and Elasticsearch server, and the service processes.
type pipeline struct {
	t     *testing.T
	bin   string
	dbURL string
	pool  *pgxpool.Pool
	// storeB is the second store server of setup.twoStoreServers, and
	// storePools the pools of every server holding shards (pool first).
	storeB     *testenv.PGServer
	storePools []*pgxpool.Pool
	pg         *testenv.Proxy
	s3         *testenv.Proxy
	minio      *testenv.MinIO
	bucket     string
	kafka      *testenv.Kafka
	kcl        *kgo.Client
	es         *esserver.Server
	esURL      string
	writes     *esWrites
	logDir     string
	base       map[string]string
	setup      setup
	httpc      *http.Client
	// api5xx counts API answers ≥ 500 (note5xx).
	api5xx atomic.Int64

	mu   sync.Mutex
	svcs map[string]*service
}

func newPipeline(t *testing.T, s setup) *pipeline {
	t.Helper()
	if s.partitions == 0 {
		s.partitions = 2
	}
	url, pool := testenv.NewMigratedDatabase(t)
	p := &pipeline{t: t, bin: binary(t), dbURL: url, pool: pool, setup: s, svcs: map[string]*service{},
		httpc: &http.Client{Timeout: 15 * time.Second}}
	p.pg = testenv.NewPGProxy(t, url)
	p.minio = sharedMinIO(t)
	p.bucket = p.minio.NewBucket(t)
	s3 := p.minio.Endpoint
	if s.s3Proxied {
		p.s3 = testenv.NewTCPProxy(t, strings.TrimPrefix(p.minio.Endpoint, "http://"))
		s3 = "http://" + p.s3.Addr()
	}
	p.kafka = testenv.NewKafka(t, kfake.SeedTopics(int32(s.partitions), commandsTopic, eventsTopic, commandsDLQ, eventsDLQ))
	if p.kafka.Cluster == nil {
		t.Fatal("acceptance: the scenarios inject Kafka faults and need the embedded kfake cluster (unset SLUICE_TEST_KAFKA_BROKERS)")
	}
	var err error
	if p.kcl, err = kgo.NewClient(kgo.SeedBrokers(p.kafka.Brokers...)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kcl.Close)
	p.es = esserver.New()
	p.writes = newESWrites()
	ts := httptest.NewServer(p.writes.wrap(p.es))
	t.Cleanup(ts.Close)
	p.esURL = ts.URL
	p.logDir = t.TempDir()
	p.base = map[string]string{
		"DATABASE_MAX_CONNS":  "6",
		"EVENT_STORE_BACKEND": "s3", "EVENT_STORE_BUCKET": p.bucket, "EVENT_STORE_S3_ENDPOINT": s3,
		"EVENT_STORE_S3_ACCESS_KEY_ID": p.minio.AccessKey, "EVENT_STORE_S3_SECRET_ACCESS_KEY": p.minio.SecretKey,
		"EVENT_STORE_S3_PATH_STYLE": "true", "EVENT_STORE_APPEND_TIMEOUT": "5s",
		"EVENT_PUBLISHER_POLL_INTERVAL": "200ms", "EVENT_PUBLISHER_LEADER_LEASE_SECONDS": "3",
		"EVENT_PUBLISHER_METRICS_LOG_INTERVAL_SECONDS": "0", "EVENT_PUBLISHER_STALL_SECONDS": "30",
		"KAFKA_BROKERS": strings.Join(p.kafka.Brokers, ","), "KAFKA_TOPIC_PARTITIONS": strconv.Itoa(s.partitions),
		"KAFKA_TOPIC_REPLICATION_FACTOR": "1",
		"ELASTICSEARCH_URLS":             p.esURL,
		"SLUICE_LOG_FORMAT":              "text", "SLUICE_LOG_LEVEL": "info",
		"PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS": "8", "PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS": "2",
		"WORKER_CONCURRENCY": "8", "WORKER_RETRY_BACKOFF_BASE": "50ms", "WORKER_RETRY_BACKOFF_CAP": "1s",
		"SHUTDOWN_TIMEOUT": "10s", "SLUICE_PROJECTIONS": "history",
		// A killed worker's partitions go to its restarted successor after
		// 10 s instead of the default 45 s.
		"KAFKA_SESSION_TIMEOUT": "10s",
	}
	maps.Copy(p.base, s.env)
	p.storePools = []*pgxpool.Pool{pool}
	if s.twoStoreServers {
		p.addStoreServer()
	}
	t.Cleanup(p.stopAll) // registered last: runs first
	return p
}

// addStoreServer starts a second Postgres server, migrates a database on
// it and maps the upper half of the shards to it (EVENT_STORE_SHARD_MAP in
// every service's environment), the lower half to the pipeline's
// database.
func (p *pipeline) addStoreServer() {
	p.t.Helper()
	n, err := strconv.Atoi(p.base["EVENT_STORE_SHARDS"])
	if err != nil || n < 2 {
		p.t.Fatalf("acceptance: two store servers need EVENT_STORE_SHARDS >= 2, got %q", p.base["EVENT_STORE_SHARDS"])
	}
	p.storeB = testenv.NewPGServer(p.t)
	urlB := p.storeB.NewDatabase(p.t)
	ctx, cancel := p.ctx(time.Minute)
	defer cancel()
	db, err := migrations.Open(urlB)
	if err != nil {
		p.t.Fatal(err)
	}
	defer db.Close()
	if _, err := migrations.Up(ctx, db, nil); err != nil {
		p.t.Fatalf("acceptance: migrate the second store server: %v", err)
	}
	poolB, err := pgxpool.New(context.Background(), urlB)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(poolB.Close)
	p.storePools = append(p.storePools, poolB)
	half := n / 2
	p.base["EVENT_STORE_SHARD_MAP"] = fmt.Sprintf("0-%d=%s,%d-%d=%s", half-1, p.dbURL, half, n-1, urlB)
}

// storeSelect is eventstoretest.Select over every server holding shards.
func (p *pipeline) storeSelect(ctx context.Context, f eventstoretest.Filter) ([]eventstore.IndexEntry, error) {
	var out []eventstore.IndexEntry
	for _, pool := range p.storePools {
		rows, err := eventstoretest.Select(ctx, pool, f)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

// ctx returns a context for one step of a test.
func (p *pipeline) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// service returns the named service, nil if none.
func (p *pipeline) service(name string) *service {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.svcs[name]
}

// add declares a service (not started). Services of kind api listen for the
// API on their own port; every service gets its own SLUICE_HTTP_ADDR.
func (p *pipeline) add(name, kind string, env map[string]string) *service {
	p.t.Helper()
	s := &service{p: p, name: name, kind: kind, exits: map[int]int{}, logPath: filepath.Join(p.logDir, name+".log")}
	s.env = maps.Clone(p.base)
	s.env["PROCESSED_EVENT_OWNER"] = name
	s.env["DATABASE_URL"] = p.dbURL
	if slices.Contains(p.setup.pgProxied, name) {
		s.env["DATABASE_URL"] = p.pg.URL()
	}
	s.httpAddr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(p.t))
	// The API serves /readyz and /metrics on its own port when
	// SLUICE_HTTP_ADDR is the same address (no second server); an empty
	// SLUICE_HTTP_ADDR would mean the default :9090, shared by everyone.
	s.env["SLUICE_HTTP_ADDR"] = s.httpAddr
	if kind == kindAPI {
		s.env["SLUICE_API_ADDR"] = s.httpAddr
	}
	maps.Copy(s.env, env)
	switch {
	case kind == kindInstance:
		s.evictGroup = instanceGroup
	case kind == kindProjection && s.env["SLUICE_PROJECTIONS"] == "history":
		s.evictGroup = historyGroup
	}
	p.mu.Lock()
	p.svcs[name] = s
	p.mu.Unlock()
	return s
}

// startDefault declares and starts the four services of a deployment (api,
// relay, instance-worker, projection-worker) except those in skip, and
// waits until each is ready.
func (p *pipeline) startDefault(skip ...string) {
	p.t.Helper()
	for _, d := range []struct{ name, kind string }{
		{"api", kindAPI}, {"relay", kindRelay}, {"instance-worker", kindInstance}, {"projection-worker", kindProjection},
	} {
		s := p.add(d.name, d.kind, nil)
		if slices.Contains(skip, d.name) {
			continue
		}
		s.start()
	}
	for _, n := range []string{"api", "relay", "instance-worker", "projection-worker"} {
		if !slices.Contains(skip, n) {
			p.service(n).waitReady(90 * time.Second)
		}
	}
}

// stopAll stops every service; on failure it prints the tail of each log.
func (p *pipeline) stopAll() {
	p.mu.Lock()
	svcs := slices.Collect(maps.Values(p.svcs))
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range svcs {
		wg.Add(1)
		go func() { defer wg.Done(); s.stop() }()
	}
	wg.Wait()
	if p.t.Failed() {
		for _, s := range svcs {
			p.t.Logf("---- last lines of %s (%s) ----\n%s", s.name, s.logPath, tail(s.logPath, 60))
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

// childEnv is a process environment made of the essentials of this one
// (PATH, HOME, TMPDIR) and m, so nothing of the test's own environment
// (DATABASE_URL, KAFKA_BROKERS…) leaks into a service.
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

// service is one supervised process: when it exits without being asked to
// (a crash point, a kill), the supervisor restarts it, like a container
// runtime would.
type service struct {
	p        *pipeline
	name     string
	kind     string
	httpAddr string
	logPath  string
	// evictGroup, when set, is the consumer group whose members are
	// removed before a restart after a crash: the service is the group's
	// only member, so every member left is the dead process.
	evictGroup string

	mu       sync.Mutex
	env      map[string]string
	proc     *os.Process
	stopping bool
	loopDone chan struct{}
	starts   int
	exits    map[int]int
	kills    int
}

// setEnv changes the environment of the next start.
func (s *service) setEnv(kv map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range kv {
		if v == "" {
			delete(s.env, k)
			continue
		}
		s.env[k] = v
	}
}

// start starts the supervisor (no-op when it runs).
func (s *service) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loopDone != nil {
		return
	}
	s.stopping = false
	s.loopDone = make(chan struct{})
	go s.supervise(s.loopDone)
}

func (s *service) supervise(done chan struct{}) {
	defer close(done)
	for {
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		env := maps.Clone(s.env)
		s.mu.Unlock()
		logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			s.p.t.Errorf("%s: log: %v", s.name, err)
			return
		}
		fmt.Fprintf(logf, "==== %s start %s ====\n", time.Now().Format(time.RFC3339Nano), s.name)
		cmd := exec.Command(s.p.bin, s.kind)
		cmd.Env = childEnv(env)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			logf.Close()
			return
		}
		err = cmd.Start()
		if err == nil {
			s.proc = cmd.Process
			s.starts++
		}
		s.mu.Unlock()
		if err != nil {
			logf.Close()
			s.p.t.Errorf("%s: start: %v", s.name, err)
			return
		}
		_ = cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		fmt.Fprintf(logf, "==== %s exit %s: %s ====\n", time.Now().Format(time.RFC3339Nano), s.name, cmd.ProcessState)
		logf.Close()
		s.mu.Lock()
		s.proc = nil
		s.exits[code]++
		stopping := s.stopping
		s.mu.Unlock()
		if stopping {
			return
		}
		if s.evictGroup != "" {
			s.p.evict(s.evictGroup)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for the process and its supervisor (SIGKILL
// after 30 s).
func (s *service) stop() {
	s.mu.Lock()
	done := s.loopDone
	if done == nil {
		s.mu.Unlock()
		return
	}
	s.stopping = true
	if s.proc != nil {
		_ = s.proc.Signal(syscall.SIGTERM)
	}
	s.mu.Unlock()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		s.mu.Lock()
		if s.proc != nil {
			_ = s.proc.Kill()
		}
		s.mu.Unlock()
		<-done
	}
	s.mu.Lock()
	s.loopDone = nil
	s.mu.Unlock()
}

// restart stops the service gracefully and starts it again with env
// changed (see setEnv), waiting until it is ready.
func (s *service) restart(env map[string]string) {
	s.p.t.Helper()
	s.stop()
	s.setEnv(env)
	s.start()
	s.waitReady(90 * time.Second)
}

// kill sends SIGKILL to the running process (the supervisor restarts it).
func (s *service) kill() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return false
	}
	if err := s.proc.Kill(); err != nil {
		return false
	}
	s.kills++
	return true
}

// exitCount returns how many times the process exited with code.
func (s *service) exitCount(code int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exits[code]
}

// startCount returns how many times the process was started.
func (s *service) startCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// readyStatus returns the HTTP status of /readyz (0 when unreachable).
func (s *service) readyStatus() int {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + s.httpAddr + "/readyz")
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitReady waits until /readyz answers 200.
func (s *service) waitReady(within time.Duration) {
	s.p.t.Helper()
	waitFor(s.p.t, within, s.name+" ready", func() bool { return s.readyStatus() == http.StatusOK })
}

// waitFor polls cond every 100 ms until it holds, failing the test after
// within.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.WaitForEvery(t, within, 100*time.Millisecond, what, cond)
}

// --- Kafka ---------------------------------------------------------------

// evict removes every member of group (see service.evictGroup).
func (p *pipeline) evict(group string) {
	ctx, cancel := p.ctx(10 * time.Second)
	defer cancel()
	dg, err := kadm.NewClient(p.kcl).DescribeGroups(ctx, group)
	if err != nil {
		return
	}
	g, ok := dg[group]
	if !ok || len(g.Members) == 0 {
		return
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	for _, m := range g.Members {
		lm := kmsg.NewLeaveGroupRequestMember()
		lm.MemberID = m.MemberID
		req.Members = append(req.Members, lm)
	}
	_, _ = req.RequestWith(ctx, p.kcl)
}

// endOffsets returns the end offset of each partition of topic.
func (p *pipeline) endOffsets(topic string) (map[int32]int64, error) {
	ctx, cancel := p.ctx(10 * time.Second)
	defer cancel()
	lo, err := kadm.NewClient(p.kcl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	var ferr error
	lo.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = o.Err
		}
		out[o.Partition] = o.Offset
	})
	return out, ferr
}

// records returns the number of records in topic.
func (p *pipeline) records(topic string) int64 {
	p.t.Helper()
	end, err := p.endOffsets(topic)
	if err != nil {
		p.t.Fatalf("end offsets of %s: %v", topic, err)
	}
	var n int64
	for _, o := range end {
		n += o
	}
	return n
}

// committed returns group's committed offsets on topic.
func (p *pipeline) committed(group, topic string) (map[int32]int64, error) {
	ctx, cancel := p.ctx(10 * time.Second)
	defer cancel()
	fo, err := kadm.NewClient(p.kcl).FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for part, o := range fo[topic] {
		if o.Err == nil {
			out[part] = o.At
		}
	}
	return out, nil
}

// caughtUp reports whether group committed every record of topic.
func (p *pipeline) caughtUp(group, topic string) bool {
	end, err := p.endOffsets(topic)
	if err != nil {
		return false
	}
	c, err := p.committed(group, topic)
	if err != nil {
		return false
	}
	for part, e := range end {
		if e > 0 && c[part] != e {
			return false
		}
	}
	return true
}

// readTopic returns every record of topic, in partition and offset order.
func (p *pipeline) readTopic(topic string) []*kgo.Record {
	p.t.Helper()
	end, err := p.endOffsets(topic)
	if err != nil {
		p.t.Fatal(err)
	}
	var want int64
	for _, o := range end {
		want += o
	}
	if want == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.kafka.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		p.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := p.ctx(30 * time.Second)
	defer cancel()
	var recs []*kgo.Record
	for int64(len(recs)) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			p.t.Fatalf("read %s: %d of %d records", topic, len(recs), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < end[r.Partition] {
				recs = append(recs, r)
			}
		})
	}
	slices.SortFunc(recs, func(a, b *kgo.Record) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	return recs
}

// produce writes records and waits for the acknowledgement.
func (p *pipeline) produce(cl *kgo.Client, recs ...*kgo.Record) {
	p.t.Helper()
	ctx, cancel := p.ctx(30 * time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		p.t.Fatalf("produce: %v", err)
	}
}

// --- API ------------------------------------------------------------------

// accepted is the API's 202 body.
type accepted struct {
	CommandID      string `json:"command_id"`
	EventID        string `json:"event_id"`
	AggregateID    string `json:"aggregate_id"`
	InstanceID     string `json:"instance_id"`
	SequenceNumber int64  `json:"sequence_number"`
}

func instancesPath(db, class string) string {
	return "/v1/dbs/" + db + "/classes/" + class + "/instances"
}

func instancePath(db, class, id string) string {
	return instancesPath(db, class) + "/" + url.PathEscape(id)
}

// call sends one request to the API.
func (p *pipeline) call(method, path string, body any, key string) (int, []byte, error) {
	return p.callVia("api", method, path, body, key)
}

// callVia is call through the API service named apiName (a scenario with
// several API processes).
func (p *pipeline) callVia(apiName, method, path string, body any, key string) (int, []byte, error) {
	api := p.service(apiName)
	var rd io.Reader
	if raw, ok := body.([]byte); ok {
		rd = bytes.NewReader(raw)
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+api.httpAddr+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := p.httpc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// command sends a command and returns the 202 body. It always carries an
// Idempotency-Key (key, else a fresh one: the key is the command id, so a
// retry after an append that did happen replays it instead of appending
// twice). Connection errors and 5xx are retried with that key until within
// has passed; every 5xx is counted (note5xx) and fails the test unless the
// scenario injects API outages on purpose (setup.allow5xx). Any other
// status is returned as an error.
func (p *pipeline) command(method, path string, body any, key string, within time.Duration) (accepted, error) {
	return p.commandVia("api", method, path, body, key, within)
}

// commandVia is command through the API service named apiName.
func (p *pipeline) commandVia(apiName, method, path string, body any, key string, within time.Duration) (accepted, error) {
	if key == "" {
		key = "acc-" + uuid.NewString()
	}
	deadline := time.Now().Add(within)
	for {
		code, b, err := p.callVia(apiName, method, path, body, key)
		if err == nil && code == http.StatusAccepted {
			var a accepted
			if err := json.Unmarshal(b, &a); err != nil {
				return a, fmt.Errorf("%s %s: %w: %s", method, path, err, b)
			}
			return a, nil
		}
		if err == nil && code < 500 {
			return accepted{}, &apiError{code: code, body: string(b)}
		}
		if err == nil {
			p.note5xx(method, path, key, code, b)
		}
		if time.Now().After(deadline) {
			return accepted{}, fmt.Errorf("%s %s: still failing after %s: %d %s %v", method, path, within, code, b, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// note5xx counts an API answer ≥ 500 and, unless the scenario injects
// outages on purpose (setup.allow5xx, the chaos soak), fails the test: a
// retry must not hide an intermittent server error.
func (p *pipeline) note5xx(method, path, key string, code int, body []byte) {
	n := p.api5xx.Add(1)
	if !p.setup.allow5xx && n <= 10 { // the first 10 in full; the test failed already
		p.t.Errorf("API answered %d to %s %s (Idempotency-Key %s; 5xx answer %d): %.300s", code, method, path, key, n, body)
	}
}

type apiError struct {
	code int
	body string
}

func (e *apiError) Error() string { return fmt.Sprintf("API %d: %s", e.code, e.body) }

// mustCommand is command that fails the test on error.
func (p *pipeline) mustCommand(method, path string, body any) accepted {
	p.t.Helper()
	a, err := p.command(method, path, body, "", 60*time.Second) // a fresh Idempotency-Key
	if err != nil {
		p.t.Fatal(err)
	}
	return a
}

func (p *pipeline) create(db, class, id string, data map[string]any) accepted {
	p.t.Helper()
	return p.mustCommand(http.MethodPost, instancesPath(db, class), map[string]any{"instance_id": id, "data": data})
}

func (p *pipeline) patch(db, class, id string, patch map[string]any) accepted {
	p.t.Helper()
	return p.mustCommand(http.MethodPatch, instancePath(db, class, id), patch)
}

func (p *pipeline) del(db, class, id string) accepted {
	p.t.Helper()
	return p.mustCommand(http.MethodDelete, instancePath(db, class, id), nil)
}

// --- operator commands ------------------------------------------------------

// cli runs the binary with args (an operator command) with the direct
// connections; it returns stdout, stderr and the exit code.
func (p *pipeline) cli(args ...string) (string, string, int) {
	p.t.Helper()
	env := maps.Clone(p.base)
	env["DATABASE_URL"] = p.dbURL
	env["EVENT_STORE_S3_ENDPOINT"] = p.minio.Endpoint
	env["SLUICE_HTTP_ADDR"] = "off"
	env["SLUICE_LOG_LEVEL"] = "warn"
	ctx, cancel := p.ctx(2 * time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.bin, args...)
	cmd.Env = childEnv(env)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			p.t.Fatalf("sluice %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errb.String(), code
}

// verifyReport is `sluice verify --json`.
type verifyReport struct {
	Instances int               `json:"instances"`
	OK        int               `json:"ok"`
	Missing   int               `json:"missing"`
	Stale     int               `json:"stale"`
	Extra     int               `json:"extra"`
	Mismatch  int               `json:"mismatch"`
	Problems  []json.RawMessage `json:"problems"`
}

// verify runs `sluice verify` for db/class and fails the test unless it
// exits 0 with wantInstances instances, all ok.
func (p *pipeline) verify(db, class string, wantInstances int) verifyReport {
	p.t.Helper()
	out, errOut, code := p.cli("verify", "--db", db, "--class", class, "--json")
	var r verifyReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		p.t.Fatalf("sluice verify --db %s --class %s: exit %d, output %q %s: %v", db, class, code, out, errOut, err)
	}
	if code != 0 || r.OK != wantInstances || r.Instances != wantInstances {
		p.t.Errorf("sluice verify --db %s --class %s: exit %d, %d instances (%d ok, %d missing, %d stale, %d extra, %d mismatched), want %d ok; problems %s",
			db, class, code, r.Instances, r.OK, r.Missing, r.Stale, r.Extra, r.Mismatch, wantInstances, r.Problems)
	}
	return r
}

// --- Postgres ---------------------------------------------------------------

// storeCount counts the event store's index rows f selects (on every
// server holding shards).
func (p *pipeline) storeCount(f eventstoretest.Filter) (int64, error) {
	ctx, cancel := p.ctx(30 * time.Second)
	defer cancel()
	var n int64
	for _, pool := range p.storePools {
		k, err := eventstoretest.Count(ctx, pool, f)
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

// mustStoreCount is storeCount that fails the test on an error.
func (p *pipeline) mustStoreCount(f eventstoretest.Filter) int64 {
	p.t.Helper()
	n, err := p.storeCount(f)
	if err != nil {
		p.t.Fatal(err)
	}
	return n
}

// storeHead is the event store's highest committed position (0: none).
func (p *pipeline) storeHead() (int64, error) {
	ctx, cancel := p.ctx(30 * time.Second)
	defer cancel()
	return eventstoretest.Head(ctx, p.pool)
}

// registryCount is the number of registry rows of every handler.
func (p *pipeline) registryCount() int64 {
	p.t.Helper()
	ctx, cancel := p.ctx(30 * time.Second)
	defer cancel()
	n, err := registrytest.Count(ctx, p.pool)
	if err != nil {
		p.t.Fatal(err)
	}
	return n
}

// regRow is one registry row.
type regRow struct {
	EventID     string
	AggregateID string
	Seq         int64
	Status      string
	Attempts    int
	Result      string
}

// registry returns handler's rows of Instance aggregates whose id starts
// with aggPrefix (the registry keys rows by "Instance:" + aggregate_id).
func (p *pipeline) registry(handler, aggPrefix string) []regRow {
	p.t.Helper()
	ctx, cancel := p.ctx(30 * time.Second)
	defer cancel()
	rows, err := registrytest.Rows(ctx, p.pool, handler)
	if err != nil {
		p.t.Fatal(err)
	}
	var out []regRow
	for _, r := range rows {
		if !strings.HasPrefix(r.AggregateID, "Instance:"+aggPrefix) {
			continue
		}
		rr := regRow{EventID: r.EventID, AggregateID: r.AggregateID, Seq: r.Sequence, Status: string(r.Status), Attempts: r.Attempts}
		if r.Outcome != nil {
			rr.Result = string(r.Outcome.Result)
		}
		out = append(out, rr)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].AggregateID != out[j].AggregateID {
			return out[i].AggregateID < out[j].AggregateID
		}
		return out[i].Seq < out[j].Seq
	})
	return out
}

// storeEvent is one committed row of the event store's index.
type storeEvent struct {
	EventID     string
	Kind        string
	AggregateID string
	Seq         int64
	Position    int64
}

// storeEvents returns the committed events of kind whose aggregate starts
// with "Instance" ids under aggPrefix ({db}:{class}:), by position.
func (p *pipeline) storeEvents(kind, aggPrefix string) []storeEvent {
	p.t.Helper()
	ctx, cancel := p.ctx(30 * time.Second)
	defer cancel()
	rows, err := p.storeSelect(ctx, eventstoretest.Filter{State: eventstore.StateCommitted, Kind: envelope.Kind(kind), AggregateIDPrefix: aggPrefix})
	if err != nil {
		p.t.Fatal(err)
	}
	out := make([]storeEvent, 0, len(rows))
	for _, r := range rows {
		out = append(out, storeEvent{EventID: r.EventID, Kind: string(r.Kind), AggregateID: r.AggregateID, Seq: r.SequenceNumber, Position: r.Position})
	}
	return out
}

// unfinished counts committed events of kind that handler has not
// finished (no row in done, skipped_stale or dead).
func (p *pipeline) unfinished(kind, handler string) (int64, error) {
	return p.unfinishedExcept(kind, handler, nil)
}

// drained reports whether the pipeline has finished everything: every
// committed command finished by the instance worker, every committed
// domain event by the history projection, nothing reserved in the store,
// and both groups committed to the end of their topics.
func (p *pipeline) drained() (bool, string) {
	if n, err := p.unfinished("command", instanceHandler); err != nil || n > 0 {
		return false, fmt.Sprintf("%d commands unfinished (%v)", n, err)
	}
	if n, err := p.unfinished("domain", historyHandler); err != nil || n > 0 {
		return false, fmt.Sprintf("%d domain events unfinished (%v)", n, err)
	}
	if n, err := p.storeCount(eventstoretest.Filter{State: eventstore.StateReserved}); err != nil || n > 0 {
		return false, fmt.Sprintf("%d appends reserved (%v)", n, err)
	}
	if !p.caughtUp(instanceGroup, commandsTopic) {
		return false, "instance worker offsets behind"
	}
	if !p.caughtUp(historyGroup, eventsTopic) {
		return false, "projection worker offsets behind"
	}
	return true, ""
}

// waitDrained waits until drained holds.
func (p *pipeline) waitDrained(within time.Duration) {
	p.t.Helper()
	var why string
	deadline := time.Now().Add(within)
	for {
		var ok bool
		if ok, why = p.drained(); ok {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("pipeline not drained after %s: %s", within, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// --- Elasticsearch ------------------------------------------------------------

// esGet GETs path on the ES server and decodes the JSON answer.
func (p *pipeline) esGet(path string, out any) int {
	p.t.Helper()
	resp, err := p.httpc.Get(p.esURL + path)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			p.t.Fatalf("GET %s: %v: %s", path, err, b)
		}
	}
	return resp.StatusCode
}

// esDoc is an instance document as read back.
type esDoc struct {
	Found   bool           `json:"found"`
	Version int64          `json:"_version"`
	Source  map[string]any `json:"_source"`
}

// instanceDoc reads the instance document of db/class/id by real-time GET.
func (p *pipeline) instanceDoc(db, class, id string) esDoc {
	p.t.Helper()
	return p.docAt(indexPrefix, db, class, id)
}

// docAt returns an instance document under an index prefix.
func (p *pipeline) docAt(prefix, db, class, id string) esDoc {
	p.t.Helper()
	n := readmodel.InstanceNames(prefix, db, 0)
	var d esDoc
	p.esGet("/"+n.WriteAlias+"/_doc/"+url.PathEscape(readmodel.DocumentID(class, id)), &d)
	return d
}

// historyPage is the page size of historyDocs: well under the server's
// result window (index.max_result_window, 10,000), so a history of any
// length is read whole.
const historyPage = 1000

// historyDocs returns the event_id → sequence_number of every history
// document of db. It pages with search_after on event_id (a keyword, unique
// per document) so it never hits the result window, and checks the pages
// against _count: a read that came back short or with an event twice, or
// a document whose _id is not its event_id, fails the test.
func (p *pipeline) historyDocs(db string) map[string]int64 {
	p.t.Helper()
	out, err := readHistory(p.httpc, p.esURL, indexPrefix+db+"_history", historyPage)
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

// readHistory reads every document of the history index idx in pages of
// size (see historyDocs); a missing index is an empty history.
func readHistory(c *http.Client, esURL, idx string, size int) (map[string]int64, error) {
	if code, _, err := esDo(c, http.MethodPost, esURL+"/"+idx+"/_refresh", nil, nil); err != nil {
		return nil, err
	} else if code == http.StatusNotFound {
		return map[string]int64{}, nil
	}
	var count struct {
		Count int `json:"count"`
	}
	if code, b, err := esDo(c, http.MethodGet, esURL+"/"+idx+"/_count", nil, &count); err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("count %s: %d %s %v", idx, code, b, err)
	}
	out := map[string]int64{}
	var after []any
	for {
		q := map[string]any{"size": size, "sort": []any{map[string]any{"event_id": "asc"}},
			"_source": []string{"event_id", "sequence_number"}, "track_total_hits": false}
		if after != nil {
			q["search_after"] = after
		}
		var res struct {
			Hits struct {
				Hits []struct {
					ID     string `json:"_id"`
					Sort   []any  `json:"sort"`
					Source struct {
						EventID string `json:"event_id"`
						Seq     int64  `json:"sequence_number"`
					} `json:"_source"`
				} `json:"hits"`
			} `json:"hits"`
		}
		code, b, err := esDo(c, http.MethodPost, esURL+"/"+idx+"/_search", q, &res)
		if err != nil || code != http.StatusOK {
			return nil, fmt.Errorf("search %s after %v: %d %s %v", idx, after, code, b, err)
		}
		hits := res.Hits.Hits
		for _, h := range hits {
			if h.Source.EventID != h.ID {
				return nil, fmt.Errorf("history document %s/%s holds event_id %q", idx, h.ID, h.Source.EventID)
			}
			if _, dup := out[h.ID]; dup {
				return nil, fmt.Errorf("history %s: event %s read twice while paging", idx, h.ID)
			}
			out[h.ID] = h.Source.Seq
		}
		if len(hits) < size {
			break
		}
		after = hits[len(hits)-1].Sort
	}
	if len(out) != count.Count {
		return nil, fmt.Errorf("history %s: read %d documents, _count says %d", idx, len(out), count.Count)
	}
	return out, nil
}

// esDo sends one JSON request to the ES server and decodes a 200 answer
// into out.
func esDo(c *http.Client, method, u string, body, out any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, b, fmt.Errorf("%s %s: %w", method, u, err)
		}
	}
	return resp.StatusCode, b, nil
}

// historyDiff compares the history documents of a db with its domain
// events both ways: missing (a domain event without its document, or with
// another sequence_number) and extra (a document of no domain event).
type historyDiff struct {
	Missing, WrongSeq, Extra []string
}

func (d historyDiff) empty() bool { return len(d.Missing)+len(d.WrongSeq)+len(d.Extra) == 0 }

func diffHistory(doms []storeEvent, hist map[string]int64) historyDiff {
	var d historyDiff
	want := map[string]bool{}
	for _, e := range doms {
		want[e.EventID] = true
		seq, ok := hist[e.EventID]
		switch {
		case !ok:
			d.Missing = append(d.Missing, fmt.Sprintf("%s (%s #%d)", e.EventID, e.AggregateID, e.Seq))
		case seq != e.Seq:
			d.WrongSeq = append(d.WrongSeq, fmt.Sprintf("%s (%s #%d, document #%d)", e.EventID, e.AggregateID, e.Seq, seq))
		}
	}
	for id, seq := range hist {
		if !want[id] {
			d.Extra = append(d.Extra, fmt.Sprintf("%s (#%d)", id, seq))
		}
	}
	sort.Strings(d.Extra)
	return d
}

// checkHistory requires history == the domain events of db, both ways
// (see diffHistory), reporting at most 10 of each kind; it returns the
// diff for summaries.
func (p *pipeline) checkHistory(db string) historyDiff {
	p.t.Helper()
	d := diffHistory(p.storeEvents("domain", db+":"), p.historyDocs(db))
	for _, c := range []struct {
		what string
		ids  []string
	}{{"domain events without a history document", d.Missing}, {"history documents with another sequence_number", d.WrongSeq},
		{"history documents of no domain event", d.Extra}} {
		if len(c.ids) > 0 {
			p.t.Errorf("history of %s: %d %s: %v", db, len(c.ids), c.what, c.ids[:min(10, len(c.ids))])
		}
	}
	return d
}

// --- end-state checks -----------------------------------------------------------

// expectation is what the end state of one db/class must be.
type expectation struct {
	db, class string
	// instances is the number of instances verify must find ok.
	instances int
	// applied is the number of applied commands (= domain events).
	applied int
	// rejected is the number of rejected commands.
	rejected int
	// dlqCommands and dlqEvents are the records each DLQ topic must hold
	// (whole pipeline).
	dlqCommands, dlqEvents int64
	// faultFree: no worker fails or crashes in the scenario, so no worker
	// may send a finished write again (checkConflicts: 0 conflicts).
	faultFree bool
}

// checkEndState checks one db/class after the pipeline drained: sluice
// verify, one registry row per command (done), one domain event per
// applied command, one history document per domain event, instance
// documents at the version of their last slot, no Elasticsearch document
// version written twice, and the DLQ topics as expected.
func (p *pipeline) checkEndState(e expectation) {
	p.t.Helper()
	p.verify(e.db, e.class, e.instances)
	prefix := e.db + ":" + e.class + ":"
	cmds := p.storeEvents("command", prefix)
	doms := p.storeEvents("domain", prefix)
	if len(cmds) != e.applied+e.rejected {
		p.t.Errorf("%s: %d commands in the store, want %d", prefix, len(cmds), e.applied+e.rejected)
	}
	if len(doms) != e.applied {
		p.t.Errorf("%s: %d domain events in the store, want %d (one per applied command)", prefix, len(doms), e.applied)
	}
	rows := p.registry(instanceHandler, prefix)
	applied, rejected := 0, 0
	for _, r := range rows {
		if r.Status != "done" {
			p.t.Errorf("%s: instance worker row %s (%s #%d) is %s", prefix, r.EventID, r.AggregateID, r.Seq, r.Status)
		}
		switch r.Result {
		case "applied":
			applied++
		case "rejected":
			rejected++
		}
	}
	if len(rows) != len(cmds) || applied != e.applied || rejected != e.rejected {
		p.t.Errorf("%s: instance worker registry %d rows (%d applied, %d rejected), want %d (%d applied, %d rejected)",
			prefix, len(rows), applied, rejected, len(cmds), e.applied, e.rejected)
	}
	hrows := p.registry(historyHandler, prefix)
	if len(hrows) != len(doms) {
		p.t.Errorf("%s: history registry %d rows, want %d", prefix, len(hrows), len(doms))
	}
	for _, r := range hrows {
		if r.Status != "done" {
			p.t.Errorf("%s: history row %s is %s", prefix, r.EventID, r.Status)
		}
	}
	p.checkHistory(e.db)
	last := map[string]int64{}
	for _, d := range doms {
		last[d.AggregateID] = max(last[d.AggregateID], d.Seq)
	}
	for agg, seq := range last {
		id := strings.TrimPrefix(agg, prefix)
		doc := p.instanceDoc(e.db, e.class, id)
		if !doc.Found || doc.Version != seq || doc.Source["sequence_number"] != float64(seq) {
			p.t.Errorf("%s: instance document %q: found %t _version %d sequence_number %v, want %d", prefix, id, doc.Found, doc.Version, doc.Source["sequence_number"], seq)
		}
	}
	p.checkNoDuplicateWrites()
	p.checkConflicts(e.faultFree)
	if n := p.records(commandsDLQ); n != e.dlqCommands {
		p.t.Errorf("%s holds %d records, want %d", commandsDLQ, n, e.dlqCommands)
	}
	if n := p.records(eventsDLQ); n != e.dlqEvents {
		p.t.Errorf("%s holds %d records, want %d", eventsDLQ, n, e.dlqEvents)
	}
}

// checkNoDuplicateWrites fails the test if any document version was
// successfully written more than once (a repeated side effect).
func (p *pipeline) checkNoDuplicateWrites() {
	p.t.Helper()
	if d := p.writes.duplicates(); len(d) > 0 {
		p.t.Errorf("Elasticsearch document versions written more than once: %v", d)
	}
	if n := p.writes.log.Unparsed(); n > 0 {
		p.t.Errorf("%d Elasticsearch write answers could not be read: the duplicate check is incomplete", n)
	}
}

// conflictReport is what checkConflicts saw.
type conflictReport struct {
	es      int            // writes Elasticsearch answered 409, whole run (the recorder)
	byIndex map[string]int // … by index
	metrics map[string]float64
	retried int // registry attempts after the first, every handler
}

func (c conflictReport) String() string {
	return fmt.Sprintf("es_409=%d %v; /metrics (current processes) %v; registry retried attempts %d", c.es, c.byIndex, c.metrics, c.retried)
}

// checkConflicts logs and bounds the writes the workers sent again: a
// write Elasticsearch answered 409 is a finished write re-sent (the server,
// not sluice, keeps it from being a second side effect). faultFree: none
// at all; otherwise at most one per retried registry attempt (a claim
// after a crash or a failure may find its write done). The workers' own
// counters (sluice_projection_conflicts_total, sluice_worker_records_total
// outcome="conflict") are scraped and logged; they restart from 0 with a
// process, so the bound is checked on the recorder's count, which covers
// the whole run, and the scraped ones must not exceed it.
func (p *pipeline) checkConflicts(faultFree bool) conflictReport {
	p.t.Helper()
	var c conflictReport
	c.es, c.byIndex = p.writes.conflictCount()
	c.metrics = map[string]float64{}
	var projConflicts float64
	for _, s := range p.workers() {
		if v, err := s.scrape("sluice_worker_records_total", `outcome="conflict"`); err == nil {
			c.metrics[s.name+` records{outcome="conflict"}`] = v
		} else {
			p.t.Logf("%s: %v", s.name, err)
		}
		if s.kind == kindProjection {
			v, err := s.scrape("sluice_projection_conflicts_total")
			if err != nil {
				p.t.Logf("%s: %v", s.name, err)
				continue
			}
			c.metrics[s.name+" projection_conflicts"] = v
			projConflicts += v
		}
	}
	for _, h := range []string{instanceHandler, historyHandler, shadowHandler} {
		for _, r := range p.registry(h, "") {
			c.retried += max(r.Attempts-1, 0)
		}
	}
	p.t.Logf("conflicts (a finished write sent again): %s", c)
	switch {
	case faultFree && c.es > 0:
		p.t.Errorf("a fault-free run re-sent %d finished writes (Elasticsearch answered 409): %v", c.es, c.byIndex)
	case c.es > c.retried:
		p.t.Errorf("%d writes answered 409 for %d retried registry attempts: a worker re-sends finished writes (%v)", c.es, c.retried, c.byIndex)
	}
	if int(projConflicts) > c.es {
		p.t.Errorf("the projection workers count %v conflicts, Elasticsearch answered only %d writes 409", projConflicts, c.es)
	}
	return c
}

// workers returns the declared instance and projection worker services.
func (p *pipeline) workers() []*service {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*service
	for _, s := range p.svcs {
		if s.kind == kindInstance || s.kind == kindProjection {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// lines splits command output into non-empty lines.
func lines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// metric sums the samples of the Prometheus metric name on the service's
// /metrics whose labels contain every one of labels (`outcome="applied"`).
func (s *service) metric(name string, labels ...string) float64 {
	s.p.t.Helper()
	v, err := s.scrape(name, labels...)
	if err != nil {
		s.p.t.Fatal(err)
	}
	return v
}

// scrape is metric returning an error instead of failing the test.
func (s *service) scrape(name string, labels ...string) (float64, error) {
	resp, err := s.p.httpc.Get("http://" + s.httpAddr + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("%s /metrics: %w", s.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s /metrics: %d %v", s.name, resp.StatusCode, err)
	}
	var sum float64
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		ok := true
		for _, lb := range labels {
			ok = ok && strings.Contains(l, lb)
		}
		if !ok {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum, nil
}

// storeRecord is one event printed by `sluice store cat`, as the relay
// would publish it.
type storeRecord struct {
	Raw         []byte
	Key         []byte
	EventID     string
	Kind        string
	AggregateID string
	Seq         int64
	Data        map[string]any
}

// storeCat runs `sluice store cat` with args and parses its lines.
func (p *pipeline) storeCat(args ...string) []storeRecord {
	p.t.Helper()
	out, errOut, code := p.cli(append([]string{"store", "cat"}, args...)...)
	if code != 0 {
		p.t.Fatalf("sluice store cat %v: exit %d %s", args, code, errOut)
	}
	var recs []storeRecord
	for _, l := range lines(out) {
		var e struct {
			EventID       string         `json:"event_id"`
			Kind          string         `json:"kind"`
			AggregateType string         `json:"aggregate_type"`
			AggregateID   string         `json:"aggregate_id"`
			Seq           int64          `json:"sequence_number"`
			Data          map[string]any `json:"data"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			p.t.Fatalf("store cat line %q: %v", l, err)
		}
		recs = append(recs, storeRecord{Raw: []byte(l), Key: []byte(e.AggregateType + ":" + e.AggregateID), EventID: e.EventID,
			Kind: e.Kind, AggregateID: e.AggregateID, Seq: e.Seq, Data: e.Data})
	}
	return recs
}
