#!/usr/bin/env bash
# bench-ab.sh BASE: the benchmarks of BASE (any git revision) and of the
# working tree, alternated round by round in one run, so that both see the
# same machine and the same hour (docs/benchmarks.md). Test binaries are
# built once per side; each runs in its own package directory.
#
#   ROUNDS      rounds of base-then-head (default 2)
#   BENCHES     space-separated pkg:regexp:benchtime (default: the list below;
#               "" runs none of them, only the pipeline)
#   PIPELINE    backends of the pipeline as deployed (BenchmarkPipelineProcesses)
#               run each round for both sides, "file", "minio", "file minio"
#               (default "file"; "" leaves it out). Head's harness drives both
#               binaries (SLUICE_BENCH_BINARY), so a base that predates the
#               benchmark is measured the same way; OUT/pipeline-ratios.txt
#               gives head/base per round (scripts/bench-ab-ratios.awk).
#   OUT         output directory (default bin/bench-ab)
#
# Compare with benchstat (go run golang.org/x/perf/cmd/benchstat OUT/base.txt OUT/head.txt)
# or read the custom metrics (events/s, p50/p99) side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: scripts/bench-ab.sh BASE-REVISION}
rounds=${ROUNDS:-2}
out=${OUT:-bin/bench-ab}
# Each name is anchored (^…$): -test.bench matches unanchored, so
# "BenchmarkClaimMarkDone" also ran BenchmarkClaimMarkDoneGrowth, which
# only head has and which seeds a million registry rows per run: the two
# sides did not do the same work before their later benchmarks (issue 32).
benches=${BENCHES-"registry:^BenchmarkClaimMarkDone\$:3s eventstore:^BenchmarkAppend\$/groupcommit:3s relay:^BenchmarkRelay\$:1x projectionworker:^BenchmarkProjection\$:3s instanceworker:^BenchmarkInstanceWorker\$:3s api:^BenchmarkCreate\$:3s cmd/sluice:^BenchmarkPipeline\$:1x"}
./scripts/test-deps.sh >/dev/null
mkdir -p "$out"
out=$(cd "$out" && pwd)
basetree=$(mktemp -d)
trap 'git worktree remove --force "$basetree" >/dev/null 2>&1 || true' EXIT
git worktree add --detach "$basetree" "$base" >/dev/null
declare -A tree=([base]=$basetree [head]=$PWD)
pipeline=${PIPELINE-file}
for side in base head; do
  mkdir -p "$out/$side"
  for b in $benches; do
    pkg=${b%%:*}
    (cd "${tree[$side]}" && go test -c -o "$out/$side/${pkg//\//_}.test" "./$pkg")
  done
  : >"$out/$side.txt"
  if [ -n "$pipeline" ]; then
    # The binary as shipped: each side's own `make build`, into OUT/side.
    make -s -C "${tree[$side]}" build BIN="$out/$side"
    : >"$out/$side-pipeline.txt"
  fi
done
if [ -n "$pipeline" ]; then
  go test -c -o "$out/pipelinebench.test" ./internal/pipelinebench
fi
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; base $(git rev-parse --short "$base"), head $(git rev-parse --short HEAD)" | tee "$out/machine.txt"
for r in $(seq 1 "$rounds"); do
  for side in base head; do
    echo "round $r $side $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$out/machine.txt"
    for b in $benches; do
      IFS=: read -r pkg re bt <<<"$b"
      (cd "${tree[$side]}/$pkg" && GOGC=${GOGC:-400} "$out/$side/${pkg//\//_}.test" \
        -test.run '^$' -test.bench "$re" -test.benchtime "$bt" -test.timeout 30m) |
        grep -E '^(Benchmark|FAIL|--- FAIL)' >>"$out/$side.txt" || true
    done
    for backend in $pipeline; do
      (cd internal/pipelinebench && SLUICE_BENCH_BINARY="$out/$side/sluice" "$out/pipelinebench.test" \
        -test.run '^$' -test.bench "^BenchmarkPipelineProcesses/backend=$backend\$" -test.benchtime 1x -test.timeout 30m) |
        grep -E '^(Benchmark|FAIL|--- FAIL)' >>"$out/$side-pipeline.txt" || true
    done
  done
done
echo "results: $out/base.txt $out/head.txt"
if [ -n "$pipeline" ]; then
  awk -f scripts/bench-ab-ratios.awk "$out/base-pipeline.txt" "$out/head-pipeline.txt" | tee "$out/pipeline-ratios.txt"
fi
