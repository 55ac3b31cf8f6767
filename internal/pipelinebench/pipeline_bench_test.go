package pipelinebench

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkPipelineProcesses measures the pipeline as deployed (issue #34
// item 2): the four services as processes of the real binary, Kafka and
// the Elasticsearch server as processes of their own, the local Postgres
// (a fresh database) and the event store on the file backend and on MinIO.
// Creates are offered over HTTP, first in a closed loop of
// SLUICE_BENCH_PIPELINE_CLIENTS clients (default 32), whose rate of
// readable commands is the capacity C of this run, then paced (open loop,
// latency counted from each request's scheduled time) at 50 % and 80 % of
// C. Each phase lasts SLUICE_BENCH_PIPELINE_SECONDS (default 10) and ends
// when every accepted command is readable (its instance document at its
// sequence written to Elasticsearch) and the consumer groups have
// committed everything. A short unreported warm-up comes first.
//
// Per phase it reports visible/s (accepted commands over the time until
// the last became readable), readable-p50/p99/max-ms (request to readable)
// and api-p50/p99-ms (request to 202), and the CPU per visible command of
// each process in µs (from /proc/<pid>/stat over the phase and its drain):
// the services, kafka, elasticsearch, minio, the load driver (this
// process), postgres-db (the backends of the run's database) and
// postgres-all (every postgres process, exited backends through the
// postmaster), machine (/proc/stat) and other (machine less the
// processes named, postgres-all counted once), and the work units per
// visible command from the services' own counters (store groups, relay
// cycles, worker rounds, offset commits: how well the load was batched).
// Each backend's figures are also printed as a table.
func BenchmarkPipelineProcesses(b *testing.B) {
	secs := envInt("SLUICE_BENCH_PIPELINE_SECONDS", 10)
	clients := envInt("SLUICE_BENCH_PIPELINE_CLIENTS", 32)
	phaseLen := time.Duration(secs) * time.Second
	for _, backend := range []string{backendFile, backendMinIO} {
		b.Run("backend="+backend, func(b *testing.B) {
			d := deploy(b, backend, deployOptions{})
			runs := 0
			next := func() string { runs++; return "r" + strconv.Itoa(runs) }
			d.phase(b, next(), loadSpec{name: "warmup", clients: 8, d: 2 * time.Second})
			idle := d.idle(b, phaseLen/2)
			var capacity float64
			var results []phaseResult
			closed := loadSpec{name: "closed-" + strconv.Itoa(clients), clients: clients, d: phaseLen}
			b.Run(closed.name, func(b *testing.B) {
				for range b.N {
					r := d.phase(b, next(), closed)
					capacity = r.visible
					reportPhase(b, r)
					results = append(results, r)
				}
			})
			for _, p := range pacedPhases() {
				b.Run(p.name, func(b *testing.B) {
					rate := p.rate
					if rate == 0 {
						if capacity == 0 { // the closed loop was filtered out: measure C unreported
							capacity = d.phase(b, next(), closed).visible
						}
						rate = capacity * float64(p.pct) / 100
					}
					for range b.N {
						r := d.phase(b, next(), loadSpec{name: p.name, rate: rate, d: phaseLen})
						reportPhase(b, r)
						results = append(results, r)
					}
				})
			}
			printTable(os.Stdout, fmt.Sprintf("pipeline as processes, backend %s, phases of %s, %d closed-loop clients, %d CPUs",
				backend, phaseLen, clients, numCPU()), results)
			printIdle(os.Stdout, phaseLen/2, idle)
		})
	}
}

// pacedPhase is one paced phase: pct of the run's closed-loop capacity, or
// a fixed rate.
type pacedPhase struct {
	name string
	pct  int
	rate float64
}

// pacedPhases are the paced phases: 50 % and 80 % of the capacity, or the
// fixed rates of SLUICE_BENCH_PIPELINE_RATES ("150,250", commands/s), so
// that runs on a machine whose speed varies (other work on it) compare
// their work per command at the same offered load.
func pacedPhases() []pacedPhase {
	var out []pacedPhase
	for _, f := range strings.Split(os.Getenv("SLUICE_BENCH_PIPELINE_RATES"), ",") {
		if v, err := strconv.ParseFloat(strings.TrimSpace(f), 64); err == nil && v > 0 {
			out = append(out, pacedPhase{name: "paced-" + strconv.FormatFloat(v, 'f', -1, 64) + "ps", rate: v})
		}
	}
	if len(out) > 0 {
		return out
	}
	return []pacedPhase{{name: "paced-50pct", pct: 50}, {name: "paced-80pct", pct: 80}}
}

// reportGroups are the processes of the report, in its order.
func reportGroups() []string {
	return []string{groupAPI, groupRelay, groupInstance, groupProjection, groupKafka, groupES, groupMinIO,
		groupPGDB, groupPGAll, groupDriver, groupOther, groupMachine}
}

// perCommand returns the CPU of each group in µs per visible command, with
// "other" the machine's less the processes named.
func perCommand(r phaseResult) map[string]float64 {
	out := map[string]float64{}
	named := 0.0
	for g, s := range r.cpu {
		out[g] = s * 1e6 / float64(r.accepted)
		if g != groupMachine && g != groupPGDB {
			named += s
		}
	}
	out[groupOther] = (r.cpu[groupMachine] - named) * 1e6 / float64(r.accepted)
	return out
}

func reportPhase(b *testing.B, r phaseResult) {
	b.ReportMetric(r.visible, "visible/s")
	b.ReportMetric(r.offered, "offered/s")
	b.ReportMetric(float64(r.failed), "failed")
	b.ReportMetric(ms(quantile(r.readable, 0.5)), "readable-p50-ms")
	b.ReportMetric(ms(quantile(r.readable, 0.99)), "readable-p99-ms")
	b.ReportMetric(ms(r.readable[len(r.readable)-1]), "readable-max-ms")
	b.ReportMetric(ms(quantile(r.api, 0.5)), "api-p50-ms")
	b.ReportMetric(ms(quantile(r.api, 0.99)), "api-p99-ms")
	b.ReportMetric(r.busy*100, "machine-busy-%")
	pc := perCommand(r)
	for _, g := range reportGroups() {
		if v, ok := pc[g]; ok {
			b.ReportMetric(v, g+"-cpu-us/cmd")
		}
	}
	for _, c := range countColumns() {
		if v, ok := r.counts[c.name]; ok {
			unit := "/cmd"
			if c.total {
				unit = ""
			} else {
				v /= float64(r.accepted)
			}
			b.ReportMetric(v, metricName(c.name)+unit)
		}
	}
	b.ReportMetric(0, "ns/op")
}

// printIdle writes the CPU each process spent per second of wall time
// while no load was offered: what a paced load pays whatever its rate.
func printIdle(w io.Writer, d time.Duration, cpu map[string]float64) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "idle, no load offered for %s: CPU ms per second\n", d)
	for _, g := range reportGroups() {
		if v, ok := cpu[g]; ok {
			fmt.Fprintf(&sb, "  %-32s %14.1f\n", g, v*1000/d.Seconds())
		}
	}
	fmt.Fprint(w, sb.String())
}

// printTable writes the phases side by side: rates, latencies and the CPU
// per visible command by process.
func printTable(w io.Writer, title string, rs []phaseResult) {
	if len(rs) == 0 {
		return
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%s\n", title)
	row := func(label string, f func(r phaseResult) string) {
		fmt.Fprintf(&sb, "%-34s", label)
		for _, r := range rs {
			fmt.Fprintf(&sb, " %14s", f(r))
		}
		sb.WriteString("\n")
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
	row("", func(r phaseResult) string { return r.spec.name })
	row("offered commands/s", func(r phaseResult) string {
		if r.spec.clients > 0 {
			return "closed (" + num(r.offered) + ")"
		}
		return num(r.offered)
	})
	row("visible commands/s", func(r phaseResult) string { return num(r.visible) })
	row("accepted / failed", func(r phaseResult) string { return fmt.Sprintf("%d/%d", r.accepted, r.failed) })
	row("request→readable p50 / p99 ms", func(r phaseResult) string {
		return fmt.Sprintf("%.0f/%.0f", ms(quantile(r.readable, 0.5)), ms(quantile(r.readable, 0.99)))
	})
	row("request→readable max ms", func(r phaseResult) string { return fmt.Sprintf("%.0f", ms(r.readable[len(r.readable)-1])) })
	row("request→202 p50 / p99 ms", func(r phaseResult) string {
		return fmt.Sprintf("%.1f/%.1f", ms(quantile(r.api, 0.5)), ms(quantile(r.api, 0.99)))
	})
	row("machine busy %", func(r phaseResult) string { return fmt.Sprintf("%.0f", r.busy*100) })
	sb.WriteString("CPU µs per visible command:\n")
	pcs := make([]map[string]float64, len(rs))
	for i, r := range rs {
		pcs[i] = perCommand(r)
	}
	labels := map[string]string{
		groupPGDB: "postgres (run's db backends)", groupPGAll: "postgres (all processes)",
		groupDriver: "load driver (this process)", groupOther: "other (machine − listed)", groupMachine: "machine total",
	}
	for _, g := range reportGroups() {
		if _, ok := pcs[0][g]; !ok {
			continue
		}
		label := labels[g]
		if label == "" {
			label = g
		}
		i := 0
		row("  "+label, func(phaseResult) string { v := pcs[i][g]; i++; return num(v) })
	}
	sb.WriteString("work units per visible command (the services' counters, Postgres's statistics, the disks'; totals where marked):\n")
	for _, c := range countColumns() {
		if _, ok := rs[0].counts[c.name]; !ok {
			continue
		}
		if c.total {
			row("  "+c.name+" (total)", func(r phaseResult) string { return num(r.counts[c.name]) })
			continue
		}
		row("  "+c.name, func(r phaseResult) string {
			return strconv.FormatFloat(r.counts[c.name]/float64(r.accepted), 'f', 3, 64)
		})
	}
	fmt.Fprint(w, sb.String())
}

// countColumn is one count of the report: per command, or the phase's
// total.
type countColumn struct {
	name  string
	total bool
}

// countColumns are the counts of the report in order: the services'
// (countSpecs), then Postgres's and the disks' (extraCounts).
func countColumns() []countColumn {
	var out []countColumn
	for _, cs := range countSpecs {
		out = append(out, countColumn{cs.name, cs.total})
	}
	for _, n := range extraCounts {
		out = append(out, countColumn{n, false})
	}
	return out
}

// metricName turns a count's name into a benchmark metric's unit (no
// spaces, parentheses or colons).
func metricName(s string) string {
	s = strings.NewReplacer(" ", "-", "(", "", ")", "", ":", "", ">", "over", "'", "").Replace(s)
	return s
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func numCPU() int { return runtime.NumCPU() }
