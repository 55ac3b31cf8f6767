package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/observability"
)

// BenchmarkPipeline measures the whole pipeline (issue #10): the wiring of
// `sluice dev` — api, event store on real MinIO (s3 backend) and Postgres,
// relay, Kafka (kfake), instance worker and the Elasticsearch test server —
// driven through the HTTP API with creates and merge patches (half each,
// once 200 instances exist; a patch goes to a random one) at fixed
// offered loads (open loop: requests are sent on a schedule, and latency is
// counted from the scheduled time, so a saturated pipeline shows as
// queueing), then closed loop with 64 clients for the maximum rate. A
// 3-second warm-up at 500/s comes first, reported as "warmup".
//
// Per command it reports, from the scheduled send:
//   - api: the 202 (the command is durable in the event store),
//   - kafka: the relay's produce of the command (record timestamp on the
//     commands topic),
//   - es: the Elasticsearch _bulk answer that wrote the instance document
//     at the command's sequence number (from then a GET by id returns it),
//
// as p50/p99/max, and the rate at which documents became visible.
// SLUICE_BENCH_PIPELINE_SECONDS sets the length of each load (default 5).
func BenchmarkPipeline(b *testing.B) {
	secs := 5
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_PIPELINE_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	p := startPipeline(b)
	// The first seconds after start include one-time work (consumer groups
	// joining, topics and indices created, connection pools and statement
	// caches filling); "warmup" absorbs them at 500/s and is reported under
	// its own name, apart from the steady loads.
	b.Run("warmup", func(b *testing.B) {
		for range b.N {
			p.load(b, "warmup", 500, 3*time.Second)
		}
	})
	for _, rate := range []int{500, 1000, 2000, 5000, 0} {
		name := "rate=" + strconv.Itoa(rate)
		if rate == 0 {
			name = "closed-loop-64"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				p.load(b, name, rate, time.Duration(secs)*time.Second)
			}
		})
	}
}

// docKey names an instance document at a version.
type docKey struct {
	id      string
	version int64
}

// benchPipeline is a running `sluice dev` with its observers.
type benchPipeline struct {
	api     string
	metrics string
	client  *http.Client
	mu      sync.Mutex
	es      map[docKey]time.Time // first successful _bulk answer per document version
	kafka   map[docKey]time.Time // produce time of the command (key: aggregate, seq)
	run     atomic.Int64         // distinguishes the instances of each load
}

func startPipeline(b *testing.B) *benchPipeline {
	b.Helper()
	mi, err := testenv.StartMinIO(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(mi.Close)
	b.Setenv("DATABASE_URL", testenv.NewDatabase(b))
	b.Setenv("EVENT_STORE_BACKEND", "s3")
	b.Setenv("EVENT_STORE_S3_ENDPOINT", mi.Endpoint)
	b.Setenv("EVENT_STORE_S3_ACCESS_KEY_ID", mi.AccessKey)
	b.Setenv("EVENT_STORE_S3_SECRET_ACCESS_KEY", mi.SecretKey)
	b.Setenv("EVENT_STORE_BUCKET", mi.NewBucket(b))
	metricsAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(b))
	b.Setenv("SLUICE_HTTP_ADDR", metricsAddr)
	b.Setenv("SLUICE_LOG_LEVEL", "warn")
	api := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(b))
	b.Setenv("SLUICE_API_ADDR", api)
	kafkaAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(b))

	p := &benchPipeline{
		api:     "http://" + api,
		metrics: "http://" + metricsAddr + "/metrics",
		client:  &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}},
		es:      map[docKey]time.Time{},
		kafka:   map[docKey]time.Time{},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb bytes.Buffer
	f := devFlags{dataDir: b.TempDir(), esAddr: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(b)), kafkaAddr: kafkaAddr, wrapES: p.observeES}
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
		// as `sluice dev` does (loadConfig); restored for the tests after,
		// before done lets a later pipeline start
		prev := applyRuntime(cfg.Runtime)
		err = runDev(ctx, &out, cfg, logger, f)
		debug.SetGCPercent(prev)
		done <- err
	}()
	b.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			b.Error("pipeline did not stop within a minute")
		}
	})
	testenv.WaitFor(b, time.Minute, "the api", func() bool {
		select {
		case err := <-done:
			b.Fatalf("dev stopped: %v\n%s\n%s", err, out.String(), errb.String())
		default:
		}
		r, err := p.client.Get(p.api + "/livez")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
	p.watchCommands(ctx, b, kafkaAddr)
	return p
}

// observeES records, per instance document version, when the ES test
// server answered the request that wrote it (the first 2xx answer carrying
// that _id and _version), through an esserver.WriteLog.
func (p *benchPipeline) observeES(h http.Handler) http.Handler {
	return esserver.NewWriteLog(func(w esserver.Write) {
		if !w.OK() {
			return
		}
		k := docKey{w.ID, w.Version}
		p.mu.Lock()
		defer p.mu.Unlock()
		if _, seen := p.es[k]; !seen {
			p.es[k] = w.At
		}
	}).Wrap(h)
}

// watchCommands records the produce time of every command on the commands
// topic, by (instance document id, sequence number).
func (p *benchPipeline) watchCommands(ctx context.Context, b *testing.B, kafkaAddr string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.ConsumeTopics("sluice.commands"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	go func() {
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				env, err := envelope.Parse(r.Value, envelope.Limits{})
				if err != nil {
					return
				}
				_, class, id, err := envelope.ParseInstanceAggregateID(env.AggregateID)
				if err != nil {
					return
				}
				p.mu.Lock()
				p.kafka[docKey{readmodel.DocumentID(class, id), env.SequenceNumber}] = r.Timestamp
				p.mu.Unlock()
			})
		}
	}()
}

// sent is one accepted command.
type sent struct {
	at, accepted time.Time
	key          docKey
}

// load offers rate commands/s (0: closed loop, 64 clients) for d, waits
// until every accepted command's document is visible, and reports.
func (p *benchPipeline) load(b *testing.B, name string, rate int, d time.Duration) {
	run := p.run.Add(1)
	before := p.stageTimes(b)
	const clients = 64
	var mu sync.Mutex
	var sents []sent
	var failed atomic.Int64
	var created []string // instance ids with an accepted create, patched later
	var n atomic.Int64
	send := func(at time.Time) {
		i := n.Add(1)
		mu.Lock()
		var method, url, body, id string
		if len(created) >= 200 && i%2 == 0 {
			// A patch of a random existing instance: no hot aggregate (the
			// commands of one aggregate run one after another).
			id = created[rand.IntN(len(created))]
			method, url, body = http.MethodPatch, p.api+"/v1/dbs/bench/classes/orders/instances/"+id, fmt.Sprintf(`{"total":%d}`, i)
		} else {
			id = fmt.Sprintf("r%d-%d", run, i)
			method, url = http.MethodPost, p.api+"/v1/dbs/bench/classes/orders/instances"
			body = fmt.Sprintf(`{"instance_id":%q,"data":{"total":%d,"items":["a","b"],"customer":{"name":"n-%d"}}}`, id, i, i)
		}
		mu.Unlock()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if method == http.MethodPatch {
			req.Header.Set("Content-Type", "application/merge-patch+json")
		}
		resp, err := p.client.Do(req)
		if err != nil {
			failed.Add(1)
			return
		}
		var ack struct {
			SequenceNumber int64 `json:"sequence_number"`
		}
		err = json.NewDecoder(resp.Body).Decode(&ack)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusAccepted {
			failed.Add(1)
			return
		}
		s := sent{at: at, accepted: time.Now(), key: docKey{readmodel.DocumentID("orders", id), ack.SequenceNumber}}
		mu.Lock()
		sents = append(sents, s)
		if method == http.MethodPost {
			created = append(created, id)
		}
		mu.Unlock()
	}

	start := time.Now()
	var wg sync.WaitGroup
	if rate > 0 {
		// Open loop: one request every 1/rate, at most 1024 in flight.
		slots := make(chan struct{}, 1024)
		interval := time.Second / time.Duration(rate)
		for at := start; time.Since(start) < d; at = at.Add(interval) {
			time.Sleep(time.Until(at))
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				send(at)
			})
		}
	} else {
		for range clients {
			wg.Go(func() {
				for time.Since(start) < d {
					send(time.Now())
				}
			})
		}
	}
	wg.Wait()
	if len(sents) == 0 {
		b.Fatalf("%s: no command accepted (%d failed)", name, failed.Load())
	}
	var last time.Time
	testenv.WaitFor(b, 2*time.Minute, "every accepted command visible in Elasticsearch", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, s := range sents {
			at, ok := p.es[s.key]
			if !ok {
				return false
			}
			last = later(last, at)
		}
		return true
	})
	// Per command: api, kafka and es from the scheduled send; relay (the
	// 202 → the command on Kafka) and worker (on Kafka → the ES write) are
	// the two later legs alone, so the tail of es can be placed.
	var api, kafka, es, relayLeg, workerLeg []time.Duration
	p.mu.Lock()
	for _, s := range sents {
		api = append(api, s.accepted.Sub(s.at))
		if at, ok := p.kafka[s.key]; ok {
			kafka = append(kafka, at.Sub(s.at))
			relayLeg = append(relayLeg, at.Sub(s.accepted))
			workerLeg = append(workerLeg, p.es[s.key].Sub(at))
		}
		es = append(es, p.es[s.key].Sub(s.at))
	}
	p.mu.Unlock()
	b.ReportMetric(float64(len(sents))/last.Sub(start).Seconds(), "visible/s")
	report(b, "api", api)
	report(b, "kafka", kafka)
	report(b, "es", es)
	report(b, "relay", relayLeg)
	report(b, "worker", workerLeg)
	b.ReportMetric(float64(failed.Load()), "failed")
	// Where the time goes: mean time per call of each stage during this
	// load, from the services' own histograms, and the bucket bound its
	// p99 lies under.
	after := p.stageTimes(b)
	for k, a := range after {
		if d := a.sub(before[k]); d.count > 0 {
			b.ReportMetric(d.sum/float64(d.count)*1000, k+"-mean-ms")
			b.ReportMetric(d.quantile(0.99)*1000, k+"-p99le-ms") // a bucket bound
		}
	}
	b.ReportMetric(0, "ns/op")
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// report adds p50, p99 and max of d (ms) under the stage's name.
func report(b *testing.B, stage string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
	b.ReportMetric(ms(d[len(d)/2]), stage+"-p50-ms")
	b.ReportMetric(ms(d[len(d)*99/100]), stage+"-p99-ms")
	b.ReportMetric(ms(d[len(d)-1]), stage+"-max-ms")
}

// histSum is a histogram's sum (seconds), count and cumulative bucket
// counts by upper bound.
type histSum struct {
	sum     float64
	count   uint64
	buckets map[float64]uint64
}

func (a histSum) sub(b histSum) histSum {
	d := histSum{a.sum - b.sum, a.count - b.count, map[float64]uint64{}}
	for ub, n := range a.buckets {
		d.buckets[ub] = n - b.buckets[ub]
	}
	return d
}

// quantile is the upper bound of the first bucket holding the q-quantile
// (+Inf beyond the last bound).
func (a histSum) quantile(q float64) float64 {
	ubs := slices.Sorted(maps.Keys(a.buckets))
	for _, ub := range ubs {
		if float64(a.buckets[ub]) >= q*float64(a.count) {
			return ub
		}
	}
	return math.Inf(1)
}

// stageTimes scrapes /metrics: the stage histograms of both workers
// (claim, handle, mark_done, commit, end_to_end), the event store's group
// commit (gather, reserve, put, commit), the relay's flush, the
// projection's ES bulk and the API's requests, by a short name.
func (p *benchPipeline) stageTimes(b *testing.B) map[string]histSum {
	b.Helper()
	resp, err := p.client.Get(p.metrics)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]histSum{}
	add := func(name string, m *dto.Metric) {
		h := m.GetHistogram()
		cur := out[name]
		bs := maps.Clone(cur.buckets)
		if bs == nil {
			bs = map[float64]uint64{}
		}
		for _, bk := range h.GetBucket() {
			bs[bk.GetUpperBound()] += bk.GetCumulativeCount()
		}
		out[name] = histSum{cur.sum + h.GetSampleSum(), cur.count + h.GetSampleCount(), bs}
	}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch name {
			case "sluice_worker_stage_duration_seconds":
				h := label(m, "handler")
				if h == "instanceworker" {
					h = "iw"
				} else {
					h = strings.NewReplacer("projection:", "", ":", "-").Replace(h)
				}
				add(h+"-"+label(m, "stage"), m)
			case "sluice_eventstore_stage_duration_seconds":
				add("store-"+label(m, "stage"), m)
			case "sluice_relay_flush_seconds":
				add("relay-flush", m)
			case "sluice_projection_bulk_duration_seconds":
				add("projection-bulk", m)
			case "sluice_api_request_duration_seconds":
				add("api-request", m)
			}
		}
	}
	return out
}
