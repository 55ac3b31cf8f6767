package pipelinebench

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The work units of a phase, per visible command, from the services' own
// counters (/metrics): how well the pipeline batched. A burst shares one
// store group, relay cycle, worker round and offset commit among many
// commands; a paced load that does not batch pays one each.
type countSpec struct {
	name    string // column of the report
	service string // whose /metrics
	metric  string // series name (summed over its label sets)
	match   string // a label set must contain this ("" = any)
	// le, when set, makes metric a histogram and the count the
	// observations above that bucket bound (metric_count less
	// metric_bucket{le}): the slow ones.
	le string
	// total: the report shows the phase's total, not per command (rare
	// events: slow stages).
	total bool
}

// countSpecs are the counts reported, in order.
var countSpecs = []countSpec{
	{"api store groups", groupAPI, "sluice_eventstore_group_events_count", "", "", false},
	{"relay cycles", groupRelay, "sluice_relay_cycles_total", "", "", false},
	{"relay idle cycles", groupRelay, "sluice_relay_cycles_total", `plan="idle"`, "", false},
	{"relay flushes", groupRelay, "sluice_relay_flush_seconds_count", "", "", false},
	{"instance-worker rounds", groupInstance, "sluice_worker_stage_duration_seconds_count", `stage="claim"`, "", false},
	{"instance-worker store groups", groupInstance, "sluice_eventstore_group_events_count", "", "", false},
	{"instance-worker offset commits", groupInstance, "sluice_worker_offset_commits_total", "", "", false},
	{"instance-worker kafka fetches", groupInstance, "sluice_worker_kafka_requests_total", `request="Fetch"`, "", false},
	{"projection-worker rounds", groupProjection, "sluice_worker_stage_duration_seconds_count", `stage="claim"`, "", false},
	{"projection-worker offset commits", groupProjection, "sluice_worker_offset_commits_total", "", "", false},
	{"projection-worker kafka fetches", groupProjection, "sluice_worker_kafka_requests_total", `request="Fetch"`, "", false},
	// How the relay planned its publishing cycles: a LIST of the bucket
	// (on the file backend it walks the whole folder), the index (no
	// LIST), the commit hints (no head or index query).
	{"relay list cycles", groupRelay, "sluice_relay_cycles_total", `plan="list"`, "", false},
	{"relay index cycles", groupRelay, "sluice_relay_cycles_total", `plan="index"`, "", false},
	{"relay hint cycles", groupRelay, "sluice_relay_cycles_total", `plan="hint"`, "", false},
	// The store's NOTIFYs, as the relay received them (one per group).
	{"relay commit notifications", groupRelay, "sluice_relay_notifications_total", `kind="committed"`, "", false},
	// Where a tail comes from: stages of store groups and relay flushes
	// that took longer than 128 ms in the phase (totals).
	{"api groups: put > 128 ms", groupAPI, "sluice_eventstore_stage_duration_seconds", `stage="put"`, "0.128", true},
	{"api groups: reserve > 128 ms", groupAPI, "sluice_eventstore_stage_duration_seconds", `stage="reserve"`, "0.128", true},
	{"api groups: commit > 128 ms", groupAPI, "sluice_eventstore_stage_duration_seconds", `stage="commit"`, "0.128", true},
	{"instance-worker groups: put > 128 ms", groupInstance, "sluice_eventstore_stage_duration_seconds", `stage="put"`, "0.128", true},
	{"relay flushes > 128 ms", groupRelay, "sluice_relay_flush_seconds", "", "0.128", true},
}

// scrapeCounts reads the counters of countSpecs from every service (a
// service that does not answer, or an older binary without a series,
// leaves its counts out).
func (d *deployment) scrapeCounts() map[string]float64 {
	out := map[string]float64{}
	c := &http.Client{Timeout: 5 * time.Second}
	bodies := map[string]string{}
	for _, cs := range countSpecs {
		body, ok := bodies[cs.service]
		if !ok {
			resp, err := c.Get("http://" + d.svcs[cs.service].httpAddr + "/metrics")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
			}
			bodies[cs.service] = body
		}
		if cs.le == "" {
			if v, ok := sumSeries(body, cs.metric, cs.match); ok {
				out[cs.name] = v
			}
			continue
		}
		all, ok1 := sumSeries(body, cs.metric+"_count", cs.match)
		le := `le="` + cs.le + `"`
		if cs.match != "" {
			le = cs.match + "," + le // the bucket bound is the last label
		}
		under, ok2 := sumSeries(body, cs.metric+"_bucket", le)
		if ok1 && ok2 {
			out[cs.name] = all - under
		}
	}
	return out
}

// sumSeries sums the samples of metric in a Prometheus text exposition
// whose labels contain match; ok is false when there is none.
func sumSeries(text, metric, match string) (sum float64, ok bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels, rest := line[:sp], "", line[sp+1:]
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name, labels = name[:i], name[i:]
		}
		if name != metric || !strings.Contains(labels, match) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			continue
		}
		sum += v
		ok = true
	}
	return sum, ok
}

// countDelta is the counts of z less those of a, for the counts both have.
func countDelta(a, z map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range z {
		if w, ok := a[k]; ok {
			out[k] = v - w
		}
	}
	return out
}
