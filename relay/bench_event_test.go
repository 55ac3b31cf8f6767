package relay

import (
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/recordformat"
)

// BenchmarkRelayEvent counts the relay's own work per event, without Kafka:
// reading the segments of a backlog (eventstore.ShardLog.ReadSegment: the
// GET from a file bucket and the decoding of every line) and building the
// Kafka record of every event (Router.Record), in both record formats. It
// reports allocs/event and B/event (runtime.MemStats over the loop): counts,
// which a loaded machine does not change, where a time would be noise.
// The events carry a data object of about 600 bytes (an instance's state),
// mixedEnvelopes' metadata (traceparent, principal) otherwise.
//
// Run: go test -run '^$' -bench BenchmarkRelayEvent -benchtime 20x ./relay/
func BenchmarkRelayEvent(b *testing.B) {
	const n = 2000
	e := newEnv(b, 30*time.Second)
	e.useFileBucket(b)
	envs := mixedEnvelopes(n, 100, "")
	for i := range envs {
		envs[i].Data = benchData(i)
	}
	appendAll(b, e.store, 16, envs)
	ctx := context.Background()
	sl := e.store.ShardLog(0)
	segs, err := sl.Segments(ctx, 0, 100000)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range []recordformat.Format{recordformat.Envelope, recordformat.CloudEvents} {
		b.Run("format="+string(f), func(b *testing.B) {
			router := NewRouter(e.commandsTopic(), e.eventsTopic(), nil).WithFormat(f)
			var sink *kgo.Record
			events := 0
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				for _, s := range segs {
					evs, err := sl.ReadSegment(ctx, s)
					if err != nil {
						b.Fatal(err)
					}
					for _, ev := range evs {
						sink = router.Record(ev, "")
					}
					events += len(evs)
				}
			}
			runtime.ReadMemStats(&after)
			if events != b.N*n || sink == nil {
				b.Fatalf("read %d events in %d rounds, want %d each", events, b.N, n)
			}
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(events), "allocs/event")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(events), "B/event")
			b.ReportMetric(float64(len(segs)), "segments")
		})
	}
}

// benchData is a data object of about 600 bytes: an instance's state with
// strings, numbers, a nested object and an array.
func benchData(i int) json.RawMessage {
	var sb strings.Builder
	sb.WriteString(`{"n":` + strconv.Itoa(i) + `,"status":"OPEN","customer":{"id":"cust-` + strconv.Itoa(i%97) + `","name":"Jane Doe","email":"jane.doe@example.com","tier":"gold"},"items":[`)
	for j := range 6 {
		if j > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"sku":"SKU-` + strconv.Itoa(1000+j) + `","qty":` + strconv.Itoa(j+1) + `,"price":19.99,"note":"gift wrap, \"fragile\""}`)
	}
	sb.WriteString(`],"total":239.88,"currency":"EUR","created":"2026-11-21T10:00:00Z","tags":["a","b","c"]}`)
	return json.RawMessage(sb.String())
}
