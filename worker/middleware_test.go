package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/claim"
)

// TestHandlerPanicRecovered: a panicking handler call (Handle or
// HandleBatch) becomes a retryable error: a panic that stops is retried and
// applied; one that goes on is dead-lettered after the retry budget with
// the panic in its error; the records of other aggregates are applied and
// the process does not crash (before the recover middleware the panic
// killed the test binary).
func TestHandlerPanicRecovered(t *testing.T) {
	for _, tc := range []struct {
		name   string
		batch  bool
		panics int // attempts of the "bad" record that panic (-1: all)
		dead   bool
	}{
		{"Handle panics once", false, 1, false},
		{"Handle always panics", false, -1, true},
		{"HandleBatch panics once", true, 1, false},
		{"HandleBatch always panics", true, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			brokers, topic, produce := oneTopic(t, "panic-")
			reg := realRegistry(t, "w1", 10*time.Second)
			bad, good := uuid.NewString(), uuid.NewString()
			var (
				mu      sync.Mutex
				applied = map[string]int{}
			)
			one := func(rec *Record) claim.Outcome {
				if rec.Envelope.EventID == bad && (tc.panics < 0 || rec.Attempt <= tc.panics) {
					var none []int
					_ = none[rec.Attempt] // an index out of range: a runtime panic
				}
				mu.Lock()
				defer mu.Unlock()
				applied[rec.Envelope.EventID]++
				return claim.Applied()
			}
			var h Handler = HandlerFunc(func(_ context.Context, rec *Record) (claim.Outcome, error) { return one(rec), nil })
			if tc.batch {
				h = batchFunc(func(_ context.Context, recs []*Record) []BatchResult {
					out := make([]BatchResult, len(recs))
					for i, r := range recs {
						out[i].Outcome = one(r)
					}
					return out
				})
			}
			produce(thingRecord(t, bad, "bad", 1, 1))
			c, _ := startConsumer(t, brokers, topic, Config{MaxAttempts: 2}, Deps{Registry: reg, Handler: h})
			produce(thingRecord(t, good, "good", 1, 2))
			testenv.WaitFor(t, 30*time.Second, "both records finished", func() bool { return committedOffset(c, topic) == 2 })

			mu.Lock()
			defer mu.Unlock()
			if applied[good] != 1 {
				t.Errorf("the other aggregate's record applied %d times, want 1", applied[good])
			}
			call := "handle"
			if tc.batch {
				call = "handle_batch"
			}
			if n := testutil.ToFloat64(c.m.panics.WithLabelValues("h", call)); n < 1 {
				t.Errorf("sluice_worker_handler_panics_total{call=%q} = %v, want ≥ 1", call, n)
			}
			dl := readTopic(t, brokers, topic+".dlq")
			row, err := reg.GetRow(context.Background(), "h", bad)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.dead {
				if applied[bad] != 1 || len(dl) != 0 || row.Status != claim.StatusDone || row.Attempts != 2 {
					t.Errorf("panic once: applied %d, dead letters %d, row %s at attempt %d; want 1, 0, done at 2", applied[bad], len(dl), row.Status, row.Attempts)
				}
				return
			}
			if applied[bad] != 0 || row.Status != claim.StatusDead || len(dl) != 1 {
				t.Fatalf("always panics: applied %d, row %s, dead letters %d; want 0, dead, 1", applied[bad], row.Status, len(dl))
			}
			var d DLQRecord
			if err := json.Unmarshal(dl[0].Value, &d); err != nil {
				t.Fatal(err)
			}
			if d.ErrorClass != ClassRetryable || d.AttemptCount != 2 || !strings.Contains(d.Error, "handler panicked") ||
				!strings.Contains(d.Error, "index out of range") {
				t.Errorf("dead letter %+v, want class retryable, 2 attempts, the panic in its error", d)
			}
		})
	}
}

// TestPanicStackLogged: the recovered panic is logged with its stack.
func TestPanicStackLogged(t *testing.T) {
	var buf strings.Builder
	c := &Consumer{cfg: Config{HandlerName: "h"}, deps: Deps{Logger: slog.New(slog.NewTextHandler(&buf, nil))}, m: newMetrics(prometheus.NewRegistry())}
	g := newGuarded(c, HandlerFunc(func(context.Context, *Record) (claim.Outcome, error) { panic("kaboom") }))
	_, err := g.Handle(context.Background(), &Record{})
	var pe *PanicError
	if !errors.As(err, &pe) || pe.Value != "kaboom" || len(pe.Stack) == 0 {
		t.Fatalf("Handle after a panic: %v, want a *PanicError with its stack", err)
	}
	if out := buf.String(); !strings.Contains(out, "handler panicked") || !strings.Contains(out, "middleware_test.go") {
		t.Errorf("log %q: want the panic and its stack", out)
	}
}
