# bench-ab-ratios.awk BASE-PIPELINE HEAD-PIPELINE: head against base, round by
# round, from the lines of BenchmarkPipelineProcesses that scripts/bench-ab.sh
# collected (the k-th line of a backend and phase in each file is round k):
# closed-loop capacity (visible/s), machine CPU per visible command closed
# and at 50 % and 80 % of each side's own capacity, the readable p99 at 50 %
# and 80 %, and each side's CPU at 50 % against its closed loop. The goals
# of issue 34 read these ratios (docs/benchmarks.md).
FNR == 1 { side = (side == "") ? "base" : "head" }
/^BenchmarkPipelineProcesses\// {
	split($1, part, "/")
	backend = part[2]; sub(/^backend=/, "", backend)
	phase = part[3]; sub(/-[0-9]+$/, "", phase)
	if (phase ~ /^closed-/) phase = "closed" # closed-N, N the closed loop's clients
	k = side SUBSEP backend SUBSEP phase
	round = ++n[k]
	if (!(backend in seen)) { seen[backend] = 1; order[++nb] = backend }
	if (round > rounds[backend]) rounds[backend] = round
	for (i = 3; i < NF; i += 2) v[side, backend, phase, round, $(i + 1)] = $i
}
function r(a, b) { return (b > 0) ? sprintf("%.2f", a / b) : "-" }
# hb is head / base of metric m in phase ph of round k of backend b.
function hb(b, k, ph, m) { return r(v["head", b, ph, k, m], v["base", b, ph, k, m]) }
# own is one side's CPU at 50 % against its closed loop.
function own(s, b, k) { return r(v[s, b, "paced-50pct", k, "machine-cpu-us/cmd"], v[s, b, "closed", k, "machine-cpu-us/cmd"]) }
# p99 is the readable p99 of head / base in phase ph.
function p99(b, k, ph) { return sprintf("%.0f / %.0f", v["head", b, ph, k, "readable-p99-ms"], v["base", b, ph, k, "readable-p99-ms"]) }
END {
	for (j = 1; j <= nb; j++) {
		b = order[j]
		printf "backend %s: head / base per round (CPU: machine µs per visible command)\n", b
		printf "%-6s %9s %9s %9s %9s %17s %17s %15s\n", "round", "capacity", "CPU closed", "CPU 50%", "CPU 80%", "p99 50% h/b ms", "p99 80% h/b ms", "50%/closed h/b"
		for (k = 1; k <= rounds[b]; k++) {
			printf "%-6d %9s %9s %9s %9s %17s %17s %15s\n", k, hb(b, k, "closed", "visible/s"),
				hb(b, k, "closed", "machine-cpu-us/cmd"), hb(b, k, "paced-50pct", "machine-cpu-us/cmd"),
				hb(b, k, "paced-80pct", "machine-cpu-us/cmd"), p99(b, k, "paced-50pct"), p99(b, k, "paced-80pct"),
				own("head", b, k) " / " own("base", b, k)
		}
	}
}
