package pipelinebench

import (
	"math"
	"testing"

	"github.com/sluicehq/sluice/internal/procstat"
)

// The report's CPU figures are only as right as the sums of a phase
// (procstat's tests check the parsing of /proc); these check the sums on
// fixed inputs.
func TestCPUDelta(t *testing.T) {
	a := cpuSnap{
		byPID: map[string]float64{"api": 10, "relay": 5},
		pgDB: procstat.Backends{Uptime: 500, ByPID: map[int]procstat.Stat{
			100: {CPU: 2, StartedAt: 50}, 101: {CPU: 7, StartedAt: 60}, 102: {CPU: 1, StartedAt: 70}}},
		pgAll: 100, busy: 1000, uptime: 500,
	}
	z := cpuSnap{
		byPID: map[string]float64{"api": 12.5, "relay": 5.25},
		pgDB: procstat.Backends{Uptime: 520, ByPID: map[int]procstat.Stat{
			100: {CPU: 3, StartedAt: 50},    // the same backend: +1
			101: {CPU: 4, StartedAt: 510},   // pid reused by a backend started in the phase: all of its 4
			103: {CPU: 0.5, StartedAt: 505}, // new in the phase: all of it
			104: {CPU: 9, StartedAt: 100},   // unseen at the start though older than it: not counted
			// 102 ended in the phase: missed (documented)
		}},
		pgAll: 130, busy: 1040, uptime: 520,
	}
	got := cpuDelta(a, z)
	want := map[string]float64{"api": 2.5, "relay": 0.25, groupPGDB: 1 + 4 + 0.5, groupPGAll: 30, groupMachine: 40}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("%s: got %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %v, want the keys of %v", got, want)
	}
}

func TestPerCommand(t *testing.T) {
	r := phaseResult{accepted: 1000, cpu: map[string]float64{
		"api": 0.5, "relay": 0.25, groupPGDB: 0.5, groupPGAll: 1, groupMachine: 3,
	}}
	got := perCommand(r)
	// other = machine − (api + relay + postgres-all); postgres-db is part of postgres-all
	want := map[string]float64{"api": 500, "relay": 250, groupPGDB: 500, groupPGAll: 1000, groupMachine: 3000, groupOther: 1250}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("%s: got %v µs, want %v", k, got[k], v)
		}
	}
}

// The batching counts of the report are sums of the services' series; a
// label set holding spaces (a quoted value) keeps its value apart.
func TestSumSeries(t *testing.T) {
	text := `# HELP sluice_relay_cycles_total cycles
# TYPE sluice_relay_cycles_total counter
sluice_relay_cycles_total{plan="hint",relay="default"} 12
sluice_relay_cycles_total{plan="idle",relay="default"} 3
sluice_relay_cycles_total{plan="odd value",relay="idle"} 1.5
sluice_worker_offset_commits_total 7
sluice_relay_cycles_totalx{plan="idle"} 100
`
	for _, tc := range []struct {
		metric, match string
		want          float64
		ok            bool
	}{
		{"sluice_relay_cycles_total", "", 16.5, true},
		{"sluice_relay_cycles_total", `plan="idle"`, 3, true},
		{"sluice_worker_offset_commits_total", "", 7, true},
		{"sluice_eventstore_group_events_count", "", 0, false},
	} {
		got, ok := sumSeries(text, tc.metric, tc.match)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s %s: %v %v, want %v %v", tc.metric, tc.match, got, ok, tc.want, tc.ok)
		}
	}
	d := countDelta(map[string]float64{"a": 1, "b": 2}, map[string]float64{"a": 4, "c": 9})
	if len(d) != 1 || d["a"] != 3 {
		t.Errorf("countDelta: %v, want map[a:3]", d)
	}
}

// The disks' flushes come from the 16th counter after a whole disk's name
// in /proc/diskstats; partitions and lines without the counter are left
// out.
func TestParseDiskFlushes(t *testing.T) {
	text := " 254       0 vda 7457133 341102 173482226 102062741 29522170 3591432 903981368 11481769 0 5724584 115591700 6370029 233 548131176 1047049 10484847 1000140\n" +
		" 254       1 vda1 10 0 0 0 10 0 0 0 0 0 0 0 0 0 0 99 1\n" +
		"   8       0 sdb 1 0 0 0 1 0 0 0 0 0 0 0 0 0 0 3 1\n" +
		"   7       0 loop0 1 0 0 0 1 0 0 0 0 0 0\n"
	whole := func(name string) bool { return name == "vda" || name == "sdb" || name == "loop0" }
	got, ok := parseDiskFlushes(text, whole)
	if !ok || got != 10484850 {
		t.Fatalf("got %v %v, want 10484850 (vda and sdb; vda1 a partition, loop0 without the counter)", got, ok)
	}
	if _, ok := parseDiskFlushes("   7       0 loop0 1 0 0 0 1 0 0 0 0 0 0\n", whole); ok {
		t.Fatal("a kernel without flush counters gave a figure")
	}
}

func TestParseSwitches(t *testing.T) {
	status := "Name:\tsluice\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n"
	if got := parseSwitches(status); got != 127 {
		t.Fatalf("got %v, want 127", got)
	}
	if got := parseSwitches("Name:\tx\n"); got != 0 {
		t.Fatalf("got %v for a status without the counters", got)
	}
}
