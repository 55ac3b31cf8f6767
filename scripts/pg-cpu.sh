#!/bin/bash
# pg-cpu.sh CMD... runs CMD and prints the CPU seconds the local Postgres
# server (cluster 15/main) used meanwhile: its live processes' utime + stime
# and, through the postmaster's children times, those of backends that
# exited. Used for the store's Postgres CPU per append (docs/benchmarks.md,
# "planning per call"). Run it on a machine doing nothing else.
set -euo pipefail
pm=$(head -1 "${PGDATA:-/var/lib/postgresql/15/main}/postmaster.pid")
tick=$(getconf CLK_TCK)
snap() { python3 - "$pm" "$tick" <<'PY'
import os,sys
pm,tick=sys.argv[1],int(sys.argv[2])
tot=0
for p in os.listdir('/proc'):
    if not p.isdigit(): continue
    try:
        s=open(f'/proc/{p}/stat').read(); comm=s[s.index('(')+1:s.rindex(')')]
        f=s[s.rindex(')')+2:].split()
        if p==pm: tot+=int(f[13])+int(f[14])+int(f[11])+int(f[12])
        elif comm.startswith('postgres') and f[1]==pm: tot+=int(f[11])+int(f[12])
    except Exception: pass
print(tot/tick)
PY
}
a=$(snap); "$@"; b=$(snap)
python3 -c "print('postgres cpu s:', round($b-$a,2))"
