package eventstore

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/shared/envelope"
)

// The store's metrics count every append's outcome and observe each group's
// steps once per group.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collectors()...)

	first := command("Order", "m", 1)
	stale := command("Order", "m", 2)
	stale.ExpectedSeq = expect(5)
	bad := command("Order", "m", 3)
	bad.EventType = "not valid"
	rs, err := s.Append(ctxT(t), first, stale, bad)
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Err != nil || rs[1].Err == nil || rs[2].Err == nil {
		t.Fatalf("results: %s / %s / %s", describe(rs[0]), describe(rs[1]), describe(rs[2]))
	}
	mustAppend(t, s, first) // the retry
	for outcome, want := range map[string]float64{"stored": 1, "conflict": 1, "invalid": 1, "duplicate": 1, "error": 0} {
		if got := testutil.ToFloat64(s.m.appends.WithLabelValues(outcome)); got != want {
			t.Errorf("appends_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
	// One group reserved one envelope (the retry reserves nothing).
	if c := histCount(t, s.m.events); c != 1 {
		t.Fatalf("group_events observed %d groups, want 1", c)
	}
	for _, stage := range []string{"gather", "reserve", "put", "commit"} {
		h := s.m.stage.WithLabelValues(stage).(prometheus.Histogram)
		if c := histCount(t, h); c != 1 {
			t.Errorf("stage %s observed %d groups, want 1", stage, c)
		}
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

func histCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		r    Result
		want string
	}{
		{Result{}, "stored"},
		{Result{Duplicate: true}, "duplicate"},
		{Result{Duplicate: true, Mismatch: &IdempotencyMismatchError{}}, "mismatch"},
		{Result{Err: &IdempotencyMismatchError{}}, "mismatch"},
		{Result{Err: &ConflictError{}}, "conflict"},
		{Result{Err: &SlotError{}}, "slot"},
		{Result{Err: &envelope.ValidationError{}}, "invalid"},
		{Result{Err: fmt.Errorf("eventstore: write segment: %w", ErrClosed)}, "error"},
	} {
		if got := outcome(c.r); got != c.want {
			t.Errorf("outcome(%+v) = %q, want %q", c.r, got, c.want)
		}
	}
}
