package pipelinebench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc (100 on every
// Linux architecture Go runs on; sysconf(_SC_CLK_TCK) is fixed at it).
const clockTicks = 100

// procStat is what one /proc/<pid>/stat says about CPU.
type procStat struct {
	comm      string
	ppid      int
	cpu       float64 // utime + stime, seconds
	children  float64 // cutime + cstime: the waited-for children's, seconds
	startedAt float64 // seconds after boot
}

// readProcStat reads /proc/<pid>/stat (ok false when the process is gone).
func readProcStat(pid int) (procStat, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	return parseProcStat(string(raw))
}

// parseProcStat parses the text of /proc/<pid>/stat; the command name, in
// parentheses, may itself hold spaces and parentheses.
func parseProcStat(s string) (procStat, bool) {
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procStat{}, false
	}
	f := strings.Fields(s[closing+1:]) // f[0] is field 3 (state)
	if len(f) < 20 {
		return procStat{}, false
	}
	num := func(i int) float64 { v, _ := strconv.ParseFloat(f[i], 64); return v }
	ppid, _ := strconv.Atoi(f[1])
	return procStat{
		comm:      s[open+1 : closing],
		ppid:      ppid,
		cpu:       (num(11) + num(12)) / clockTicks,
		children:  (num(13) + num(14)) / clockTicks,
		startedAt: num(19) / clockTicks,
	}, true
}

// machineCPU returns the busy and the total CPU seconds of the machine
// since boot, all CPUs (/proc/stat; busy is everything but idle and
// iowait), and the seconds since boot.
func machineCPU() (busy, total, uptime float64) {
	raw, err := os.ReadFile("/proc/stat")
	if err == nil {
		line, _, _ := strings.Cut(string(raw), "\n")
		f := strings.Fields(line)
		for i, v := range f[1:] {
			if i >= 8 { // guest and guest_nice are inside user and nice
				break
			}
			x, _ := strconv.ParseFloat(v, 64)
			total += x / clockTicks
			if i != 3 && i != 4 { // idle, iowait
				busy += x / clockTicks
			}
		}
	}
	if raw, err := os.ReadFile("/proc/uptime"); err == nil {
		f := strings.Fields(string(raw))
		if len(f) > 0 {
			uptime, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	return busy, total, uptime
}

// allPostgres returns the CPU seconds of every postgres process of the
// machine: each one's own, plus, for the postmaster (a postgres process
// whose parent is not one), its waited-for children's, so that backends
// and autovacuum workers that exited are still counted.
func allPostgres() float64 {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	stats := map[int]procStat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok && st.comm == "postgres" {
			stats[pid] = st
		}
	}
	var sum float64
	for _, st := range stats {
		sum += st.cpu
		if _, parentIsPG := stats[st.ppid]; !parentIsPG {
			sum += st.children
		}
	}
	return sum
}

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
	pgDB   map[int]procStat   // backends of the run's database by pid
	pgAll  float64
	busy   float64
	uptime float64
}

// snapshot reads the counters of procs (name → pid), of the backends of
// the pool's database (pg_stat_activity: the services' connections, the
// benchmark's own and the autovacuum workers of that database), of all
// postgres processes and of the machine.
func snapshot(ctx context.Context, procs map[string]int, pool *pgxpool.Pool) (cpuSnap, error) {
	s := cpuSnap{at: time.Now(), byPID: map[string]float64{}, pgDB: map[int]procStat{}}
	for name, pid := range procs {
		if st, ok := readProcStat(pid); ok {
			s.byPID[name] = st.cpu
		}
	}
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return s, fmt.Errorf("backends: %w", err)
	}
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			rows.Close()
			return s, err
		}
		if st, ok := readProcStat(pid); ok {
			s.pgDB[pid] = st
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s, err
	}
	s.pgAll = allPostgres()
	s.busy, _, s.uptime = machineCPU()
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
	var db float64
	for pid, st := range z.pgDB {
		if was, ok := a.pgDB[pid]; ok && was.startedAt == st.startedAt {
			db += st.cpu - was.cpu
		} else if st.startedAt >= a.uptime-0.01 {
			db += st.cpu
		}
	}
	out[groupPGDB] = db
	out[groupPGAll] = z.pgAll - a.pgAll
	out[groupMachine] = z.busy - a.busy
	return out
}
