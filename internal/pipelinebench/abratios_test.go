package pipelinebench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scripts/bench-ab-ratios.awk turns the pipeline lines that make bench-ab
// collects into the head/base ratios issue 34's goals read; this runs it on
// two rounds of fixed lines (mawk on this machine, as on CI) and checks
// every column of both rounds.
func TestBenchABRatios(t *testing.T) {
	line := func(phase string, visible, cpu, p99 string) string {
		return "BenchmarkPipelineProcesses/backend=file/" + phase + "-2 \t 1\t 163.1 api-cpu-us/cmd\t " +
			cpu + " machine-cpu-us/cmd\t " + p99 + " readable-p99-ms\t " + visible + " visible/s\n"
	}
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := write("base.txt",
		line("closed-32", "1000", "1200", "300"), line("paced-50pct", "500", "2400", "900"), line("paced-80pct", "800", "1500", "1400"),
		line("closed-32", "2000", "1000", "200"), line("paced-50pct", "1000", "2000", "800"), line("paced-80pct", "1600", "1300", "1000"))
	head := write("head.txt",
		line("closed-32", "2500", "600", "90"), line("paced-50pct", "1250", "1080", "95"), line("paced-80pct", "2000", "900", "240"),
		line("closed-32", "3000", "700", "80"), line("paced-50pct", "1500", "1400", "120"), line("paced-80pct", "2400", "910", "300"))
	out, err := exec.Command("awk", "-f", "../../scripts/bench-ab-ratios.awk", base, head).CombinedOutput()
	if err != nil {
		t.Fatalf("awk: %v\n%s", err, out)
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && (f[0] == "1" || f[0] == "2") {
			rows[f[0]] = f[1:]
		}
	}
	for _, tc := range []struct {
		round string
		want  []string // capacity, CPU closed, 50 %, 80 %, p99 50 % h / b, p99 80 % h / b, 50 %/closed h / b
	}{
		{"1", []string{"2.50", "0.50", "0.45", "0.60", "95", "/", "900", "240", "/", "1400", "1.80", "/", "2.00"}},
		{"2", []string{"1.50", "0.70", "0.70", "0.70", "120", "/", "800", "300", "/", "1000", "2.00", "/", "2.00"}},
	} {
		t.Run("round "+tc.round, func(t *testing.T) {
			if got := rows[tc.round]; strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("got %q, want %q\n%s", got, tc.want, out)
			}
		})
	}
}
