#!/usr/bin/env bash
# Runs every `func FuzzXxx` target in the repository for a short budget
# (FUZZTIME, default 30000x: executions, not seconds, each). New fuzz targets
# are found automatically; a target may name a smaller budget of its own
# (see "fuzz-budget" below). The budget is a count because a duration races
# Go 1.26's fuzz coordinator at its deadline: a worker slowed by a busy
# machine makes the target fail with a bare "context deadline exceeded" and
# no failing input (golang/go#75804, fixed in Go 1.27; seen in a CI run
# here on FuzzAggregateID).
# A crash fails the run; go test writes the input to testdata/fuzz/ so it
# becomes a regression test once committed.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME="${FUZZTIME:-30000x}"
n=0
while IFS= read -r file; do
  pkg="$(dirname "$file")"
  for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
    # A target whose every execution runs a whole worker round names a
    # smaller budget of its own in its file: "// fuzz-budget: FuzzXxx 3000x"
    # (never more than FUZZTIME).
    budget="$(grep -oE "^// fuzz-budget: ${target} [0-9]+x\$" "$file" | awk '{print $4}' || true)"
    if [ -z "$budget" ] || [ "${budget%x}" -gt "${FUZZTIME%x}" ] 2>/dev/null; then budget="$FUZZTIME"; fi
    printf 'fuzz: %s %s (%s)\n' "$pkg" "$target" "$budget"
    moddir="$pkg"; while [ ! -f "$moddir/go.mod" ]; do moddir="$(dirname "$moddir")"; done
    go -C "$moddir" test -run='^$' -fuzz="^${target}\$" -fuzztime="$budget" "./$(realpath --relative-to="$moddir" "$pkg")" >/tmp/sluice-fuzz.log 2>&1 || { cat /tmp/sluice-fuzz.log; exit 1; }
    n=$((n+1))
  done
done < <(grep -rlE '^func Fuzz' --include='*_test.go' . | sort)
printf 'fuzz: %d targets ran for %s each, no failures\n' "$n" "$FUZZTIME"
