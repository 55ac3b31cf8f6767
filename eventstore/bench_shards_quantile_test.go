package eventstore

import (
	"math"
	"testing"
)

// TestHeadWaitSnapshot checks the arithmetic BenchmarkAppendShards reports
// its head lock wait with: sums over shards, differences over a run, and
// the p99 interpolated in the buckets as histogram_quantile does.
func TestHeadWaitSnapshot(t *testing.T) {
	bounds := []float64{10, 40, 160}
	snap := func(buckets ...uint64) headWaitSnapshot {
		return headWaitSnapshot{count: buckets[len(buckets)-1], sum: float64(buckets[len(buckets)-1]), bounds: bounds, buckets: buckets}
	}
	for _, tc := range []struct {
		name string
		h    headWaitSnapshot
		q    float64
		want float64
	}{
		{"all in the first bucket", snap(100, 100, 100), 0.99, 9.9},
		{"p99 in the second bucket", snap(90, 100, 100), 0.99, 10 + 30*0.9},
		{"p50 on a bucket's bound", snap(50, 100, 100), 0.5, 10},
		{"above the last bound answers it", snap(0, 0, 0).add(headWaitSnapshot{count: 1}), 0.99, 160},
		{"sum over shards", snap(10, 10, 10).add(snap(0, 90, 90)), 0.99, 10 + 30*(99.0-10)/90},
		{"difference over a run", snap(10, 110, 110).sub(snap(10, 10, 10)), 0.99, 10 + 30*0.99},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.h.quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("quantile(%v) = %v, want %v (%+v)", tc.q, got, tc.want, tc.h)
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		if got := (headWaitSnapshot{}).quantile(0.99); !math.IsNaN(got) {
			t.Fatalf("quantile of nothing = %v, want NaN", got)
		}
	})
}
