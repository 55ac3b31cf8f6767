package instanceworker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
)

// BenchmarkInstanceWorker measures commands/s end to end through one worker
// (claim → load → append → ES write → mark_done → commit) with real Postgres
// and MinIO, kfake and the ES test server. Commands are appended and
// published before the timer starts: one create and three updates per
// instance over 4 partitions.
func BenchmarkInstanceWorker(b *testing.B) {
	e := newEnv(b, 4)
	n := max(b.N, 200)
	var all []cmd
	for i := 0; len(all) < n; i++ {
		id := fmt.Sprintf("b%d", i)
		all = append(all, e.appendCmd(instanceworker.CreateInstance, "bench", "items", id, create("bench", "items", strp(id), map[string]any{"v": 0})))
		for v := 1; v <= 3 && len(all) < n; v++ {
			all = append(all, e.appendCmd(instanceworker.UpdateInstance, "bench", "items", id, map[string]any{"data": map[string]any{"v": v}}))
		}
	}
	e.publish(all...)
	b.ResetTimer()
	start := time.Now()
	e.startInProcess(map[string]string{"SLUICE_LOG_LEVEL": "warn"})
	testenv.WaitFor(b, 10*time.Minute, "all committed", func() bool { c, end := e.committed(); return c == end })
	el := time.Since(start)
	b.StopTimer()
	if !e.allDone(all...) {
		b.Fatal("not all commands done")
	}
	b.ReportMetric(float64(len(all))/el.Seconds(), "commands/s")
}
