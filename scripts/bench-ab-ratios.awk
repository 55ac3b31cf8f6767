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
	k = side SUBSEP backend SUBSEP phase
	round = ++n[k]
	if (!(backend in seen)) { seen[backend] = 1; order[++nb] = backend }
	if (round > rounds[backend]) rounds[backend] = round
	for (i = 3; i < NF; i += 2) v[side, backend, phase, round, $(i + 1)] = $i
}
function r(a, b) { return (b > 0) ? sprintf("%.2f", a / b) : "-" }
END {
	for (j = 1; j <= nb; j++) {
		b = order[j]
		printf "backend %s: head / base per round (CPU: machine µs per visible command)\n", b
		printf "%-6s %9s %9s %9s %9s %17s %17s %15s\n", "round", "capacity", "CPU closed", "CPU 50%", "CPU 80%", "p99 50% h/b ms", "p99 80% h/b ms", "50%/closed h/b"
		for (k = 1; k <= rounds[b]; k++) {
			cap = r(v["head", b, "closed-32", k, "visible/s"], v["base", b, "closed-32", k, "visible/s"])
			c0 = r(v["head", b, "closed-32", k, "machine-cpu-us/cmd"], v["base", b, "closed-32", k, "machine-cpu-us/cmd"])
			c5 = r(v["head", b, "paced-50pct", k, "machine-cpu-us/cmd"], v["base", b, "paced-50pct", k, "machine-cpu-us/cmd"])
			c8 = r(v["head", b, "paced-80pct", k, "machine-cpu-us/cmd"], v["base", b, "paced-80pct", k, "machine-cpu-us/cmd"])
			p5 = sprintf("%.0f / %.0f", v["head", b, "paced-50pct", k, "readable-p99-ms"], v["base", b, "paced-50pct", k, "readable-p99-ms"])
			p8 = sprintf("%.0f / %.0f", v["head", b, "paced-80pct", k, "readable-p99-ms"], v["base", b, "paced-80pct", k, "readable-p99-ms"])
			w = r(v["head", b, "paced-50pct", k, "machine-cpu-us/cmd"], v["head", b, "closed-32", k, "machine-cpu-us/cmd"]) " / " \
				r(v["base", b, "paced-50pct", k, "machine-cpu-us/cmd"], v["base", b, "closed-32", k, "machine-cpu-us/cmd"])
			printf "%-6d %9s %9s %9s %9s %17s %17s %15s\n", k, cap, c0, c5, c8, p5, p8, w
		}
	}
}
