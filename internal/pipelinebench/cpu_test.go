package pipelinebench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/procstat"
)

// findPID returns the pid of a process whose command line contains s (0
// when none): the MinIO server, found by its data folder.
func findPID(s string) int {
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(raw), s) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err == nil && pid != os.Getpid() {
			return pid
		}
	}
	return 0
}

// cpuSnap is one reading of every counter of a phase.
type cpuSnap struct {
	at     time.Time
	byPID  map[string]float64 // fixed processes by name: CPU seconds
	pgDB   procstat.Backends  // backends of the run's database
	pgAll  float64
	busy   float64
	uptime float64
}

// snapshot reads the counters of procs (name → pid), of the backends of
// the pool's database (pg_stat_activity: the services' connections, the
// benchmark's own and the autovacuum workers of that database), of all
// postgres processes and of the machine.
func snapshot(ctx context.Context, procs map[string]int, pool *pgxpool.Pool) (cpuSnap, error) {
	s := cpuSnap{at: time.Now(), byPID: map[string]float64{}}
	for name, pid := range procs {
		if st, ok := procstat.Read(pid); ok {
			s.byPID[name] = st.CPU
		}
	}
	db, err := procstat.ReadBackends(ctx, pool)
	if err != nil {
		return s, err
	}
	s.pgDB = db
	s.pgAll = procstat.AllPostgres()
	s.busy, _, s.uptime = procstat.Machine()
	return s, nil
}

// cpuDelta is the CPU seconds spent between two snapshots, by name, with
// "postgres-db" (the database's backends: those of the end reading, from
// their reading at the start, or whole when they started after it; a
// backend that ended between the readings is missed), "postgres-all" and
// "machine".
func cpuDelta(a, z cpuSnap) map[string]float64 {
	out := map[string]float64{}
	for name, v := range z.byPID {
		out[name] = v - a.byPID[name]
	}
	out[groupPGDB] = z.pgDB.CPUSince(a.pgDB)
	out[groupPGAll] = z.pgAll - a.pgAll
	out[groupMachine] = z.busy - a.busy
	return out
}
