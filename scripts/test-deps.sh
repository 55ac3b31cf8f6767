#!/usr/bin/env bash
# Installs and starts what sluice's tests need on this machine; idempotent and
# quick when everything is already in place. Called by `make test` (and so by
# .ci/run) before the tests run.
#   - PostgreSQL 15: installed with apt-get when absent, the local cluster
#     started, a superuser role for the current OS user created.
#   - MinIO: the pinned server module built once into the cache directory.
#   - Chromium: Debian's chromium (apt-get) for the console's browser
#     tests (cmd/sluice, TestConsoleInBrowser), which fail without it.
#   - gotestsum and staticcheck: pinned tools built into ./bin.
set -euo pipefail
cd "$(dirname "$0")/.."

MINIO_MODULE="github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"
CACHE="${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

log() { printf 'test-deps: %s\n' "$*" >&2; }

# --- PostgreSQL ---------------------------------------------------------------
if [ -z "${SLUICE_TEST_DATABASE_URL:-}" ]; then
  if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    log "installing PostgreSQL (apt-get install postgresql)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
  fi
  # The tests connect to the default socket (port 5432): use the cluster that
  # listens there, whatever its name, and create one only when none does.
  # Other clusters on the machine (a benchmark's, say) are left alone.
  cluster=$(pg_lsclusters -h 2>/dev/null | awk '$3==5432{print $1" "$2; exit}')
  if [ -z "$cluster" ]; then
    major=$(ls /usr/lib/postgresql | sort -n | tail -1)
    name=main
    pg_lsclusters -h 2>/dev/null | awk -v m="$major" '$1==m && $2=="main"{f=1} END{exit !f}' && name=sluice_test
    log "creating PostgreSQL cluster $major/$name on port 5432"
    $SUDO pg_createcluster -p 5432 "$major" "$name" >/dev/null
    cluster="$major $name"
  fi
  if ! pg_isready -q -h /var/run/postgresql -p 5432; then
    log "starting PostgreSQL cluster $cluster"
    $SUDO pg_ctlcluster $cluster start
    for _ in $(seq 1 60); do pg_isready -q -h /var/run/postgresql -p 5432 && break; sleep 0.5; done
  fi
  me=$(id -un)
  if ! psql -h /var/run/postgresql -p 5432 -d postgres -Atc 'select 1' >/dev/null 2>&1; then
    log "creating superuser role $me"
    if [ "$(id -u)" -eq 0 ]; then
      su postgres -c "createuser -h /var/run/postgresql -p 5432 -s $me"
    else
      sudo -u postgres createuser -h /var/run/postgresql -p 5432 -s "$me"
    fi
  fi
  # Plenty of connections for parallel test packages.
  max=$(psql -h /var/run/postgresql -p 5432 -d postgres -Atc 'show max_connections')
  if [ "$max" -lt 300 ]; then
    log "raising max_connections to 300 (restart)"
    psql -h /var/run/postgresql -p 5432 -d postgres -qc "alter system set max_connections = 300"
    $SUDO pg_ctlcluster $cluster restart
    for _ in $(seq 1 60); do pg_isready -q -h /var/run/postgresql -p 5432 && break; sleep 0.5; done
  fi
fi

# --- MinIO --------------------------------------------------------------------
if [ -z "${SLUICE_TEST_S3_ENDPOINT:-}" ] && [ -z "${SLUICE_MINIO_BIN:-}" ]; then
  dir="$CACHE/minio/${MINIO_MODULE#*@}"
  if [ ! -x "$dir/minio" ]; then
    log "building MinIO ($MINIO_MODULE) into $dir — a few minutes, once"
    mkdir -p "$dir"
    GOBIN="$dir" go install "$MINIO_MODULE"
  fi
fi

# --- Chromium -----------------------------------------------------------------
if [ -z "${SLUICE_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
  log "installing Chromium (apt-get install chromium) for the console's browser tests"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

# --- Go tools -----------------------------------------------------------------
mkdir -p bin
[ -x bin/gotestsum ] || GOBIN="$PWD/bin" go install gotest.tools/gotestsum@v1.13.0
[ -x bin/staticcheck ] || GOBIN="$PWD/bin" go install honnef.co/go/tools/cmd/staticcheck@v0.7.0
log "ready"
