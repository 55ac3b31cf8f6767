package pipelinebench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/readmodel"
)

// The commands of the load: creates of instances of one class.
const (
	benchDB    = "bench"
	benchClass = "orders"
)

// loadSpec is one phase of load: clients > 0 is a closed loop of that many
// clients, each sending its next command when the last is answered; else
// rate commands/s are sent on a schedule (open loop, as independent
// producers send), at most 1024 in flight.
type loadSpec struct {
	name    string
	clients int
	rate    float64
	d       time.Duration
}

// phaseResult is what one phase measured.
type phaseResult struct {
	spec     loadSpec
	accepted int
	failed   int64
	offered  float64 // sent/s (open loop: the schedule's rate)
	visible  float64 // accepted commands / (last readable − start), per second
	api      []time.Duration
	readable []time.Duration
	cpu      map[string]float64 // CPU seconds by process name over the phase and its drain
	counts   map[string]float64 // work units over the phase and its drain (countSpecs)
	wall     time.Duration      // start to the end of the drain
	busy     float64            // machine busy fraction over the phase
}

// sentCmd is one accepted command.
type sentCmd struct {
	at       time.Time // scheduled (open loop) or sent (closed loop)
	accepted time.Time
	key      docKey
}

// create sends a create of instance id and returns its document key.
func (d *deployment) create(ctx context.Context, id string, n int) (docKey, error) {
	body := fmt.Sprintf(`{"instance_id":%q,"data":{"total":%d,"items":["a","b"],"customer":{"name":"n-%d"}}}`, id, n, n)
	seq, err := d.command(ctx, http.MethodPost, "/v1/dbs/"+benchDB+"/classes/"+benchClass+"/instances", "application/json", body)
	return docKey{readmodel.DocumentID(benchClass, id), seq}, err
}

// patch sends a merge patch of instance id and returns its document key.
func (d *deployment) patch(ctx context.Context, id string, n int) (docKey, error) {
	seq, err := d.command(ctx, http.MethodPatch, "/v1/dbs/"+benchDB+"/classes/"+benchClass+"/instances/"+id,
		"application/merge-patch+json", fmt.Sprintf(`{"total":%d}`, n))
	return docKey{readmodel.DocumentID(benchClass, id), seq}, err
}

// command sends one command and returns the sequence number of its 202.
func (d *deployment) command(ctx context.Context, method, path, ctype, body string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, method, d.apiURL+path, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var ack struct {
		SequenceNumber int64 `json:"sequence_number"`
	}
	err = json.NewDecoder(resp.Body).Decode(&ack)
	if resp.StatusCode != http.StatusAccepted {
		return 0, fmt.Errorf("%s %s: %d", method, path, resp.StatusCode)
	}
	if err != nil {
		return 0, err
	}
	return ack.SequenceNumber, nil
}

// phase offers spec's load of creates, waits until every accepted
// command's document is readable and the consumer groups have committed
// everything (so that the phase's work is inside its CPU window), and
// returns what it measured. run names the phase's instances apart.
func (d *deployment) phase(b testing.TB, run string, spec loadSpec) phaseResult {
	b.Helper()
	ctx := context.Background()
	pids := d.pids()
	workBefore := d.readWork()
	d.addDB(ctx, workBefore) // settled: the previous phase's reading waited statsSettle
	before, err := snapshot(ctx, pids, d.pool)
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var sents []sentCmd
	var failed, n atomic.Int64
	var firstErr atomic.Value
	send := func(at time.Time) {
		i := n.Add(1)
		k, err := d.create(ctx, fmt.Sprintf("%s-%d", run, i), int(i))
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err.Error())
			return
		}
		s := sentCmd{at: at, accepted: time.Now(), key: k}
		mu.Lock()
		sents = append(sents, s)
		mu.Unlock()
	}
	start := time.Now()
	// The phase's span on the wall clock, for profiles taken meanwhile.
	fmt.Fprintf(os.Stderr, "pipelinebench: %s phase %s (%s) starts\n", start.Format("15:04:05.000"), spec.name, run)
	var wg sync.WaitGroup
	if spec.clients > 0 {
		for range spec.clients {
			wg.Go(func() {
				for time.Since(start) < spec.d {
					send(time.Now())
				}
			})
		}
	} else {
		slots := make(chan struct{}, 1024)
		interval := time.Duration(float64(time.Second) / spec.rate)
		for at := start; at.Sub(start) < spec.d; at = at.Add(interval) {
			time.Sleep(time.Until(at))
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				send(at)
			})
		}
	}
	wg.Wait()
	sentFor := time.Since(start)
	if len(sents) == 0 {
		b.Fatalf("%s: no command accepted (%d failed: %v)", spec.name, failed.Load(), firstErr.Load())
	}
	var last time.Time
	testenv.WaitForEvery(b, 3*time.Minute, 5*time.Millisecond, "every accepted command readable", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, s := range sents {
			at, ok := d.readable[s.key]
			if !ok {
				return false
			}
			if at.After(last) {
				last = at
			}
		}
		return true
	})
	d.waitCommitted(b)
	after, err := snapshot(ctx, pids, d.pool)
	if err != nil {
		b.Fatal(err)
	}
	workAfter := d.readWork()
	fmt.Fprintf(os.Stderr, "pipelinebench: %s phase %s (%s) drained\n", after.at.Format("15:04:05.000"), spec.name, run)
	time.Sleep(statsSettle) // no load: the services idle while Postgres's counters settle
	d.addDB(ctx, workAfter)
	r := phaseResult{spec: spec, accepted: len(sents), failed: failed.Load(), cpu: cpuDelta(before, after), wall: after.at.Sub(before.at),
		counts: countDelta(workBefore, workAfter)}
	r.offered = float64(n.Load()) / sentFor.Seconds()
	if spec.clients == 0 {
		r.offered = spec.rate
	}
	r.visible = float64(len(sents)) / last.Sub(start).Seconds()
	for _, s := range sents {
		t, _ := d.readableAt(s.key)
		r.api = append(r.api, s.accepted.Sub(s.at))
		r.readable = append(r.readable, t.Sub(s.at))
	}
	slices.Sort(r.api)
	slices.Sort(r.readable)
	if el := after.uptime - before.uptime; el > 0 {
		r.busy = r.cpu[groupMachine] / (el * float64(numCPU()))
	}
	return r
}

// idle measures the CPU of every process over d with no load offered
// (after a phase has drained): CPU seconds by process, "other" the
// machine's less the processes named.
func (d *deployment) idle(b testing.TB, dur time.Duration) map[string]float64 {
	b.Helper()
	ctx := context.Background()
	pids := d.pids()
	before, err := snapshot(ctx, pids, d.pool)
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(dur)
	after, err := snapshot(ctx, pids, d.pool)
	if err != nil {
		b.Fatal(err)
	}
	cpu := cpuDelta(before, after)
	named := 0.0
	for g, s := range cpu {
		if g != groupMachine && g != groupPGDB {
			named += s
		}
	}
	cpu[groupOther] = cpu[groupMachine] - named
	return cpu
}

// waitCommitted waits (at most 30 s) until every consumer group has
// committed the end of every partition it consumes: the projection
// worker's history work, which no instance document shows, then belongs to
// the phase that caused it.
func (d *deployment) waitCommitted(b testing.TB) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.base["KAFKA_BROKERS"]))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		lags, err := adm.Lag(ctx)
		cancel()
		if err == nil && len(lags) > 0 {
			behind := int64(0)
			for _, g := range lags {
				if g.DescribeErr != nil || g.FetchErr != nil {
					behind++
				}
				behind += g.Lag.Total()
			}
			if behind == 0 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Logf("consumer groups still behind after 30 s; the CPU of this phase misses their last work")
}

// quantile returns the q-quantile of sorted d.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q * float64(len(d)))
	return d[min(i, len(d)-1)]
}

func ms(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
