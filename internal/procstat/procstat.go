// Package procstat reads the CPU time of processes from Linux's /proc, for
// the benchmarks that report CPU per unit of work by process: the
// pipeline's services, the machine, and Postgres's backends
// (docs/benchmarks.md). It keeps no guarantee of the pipeline's; what it
// keeps is that a figure is the processes' own counters (utime + stime),
// never a wall-clock estimate. Off Linux every reading is empty (ok false,
// zero); a benchmark that finds no backend of its database fails instead
// of reporting a figure.
package procstat

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// ClockTicks is USER_HZ, the unit of the CPU times in /proc (100 on every
// Linux architecture Go runs on; sysconf(_SC_CLK_TCK) is fixed at it).
const ClockTicks = 100

// Stat is what one /proc/<pid>/stat says about CPU.
type Stat struct {
	Comm      string
	PPID      int
	CPU       float64 // utime + stime, seconds
	Children  float64 // cutime + cstime: the waited-for children's, seconds
	StartedAt float64 // seconds after boot
}

// Read reads /proc/<pid>/stat (ok false when the process is gone).
func Read(pid int) (Stat, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	return Parse(string(raw))
}

// Parse parses the text of /proc/<pid>/stat; the command name, in
// parentheses, may itself hold spaces and parentheses.
func Parse(s string) (Stat, bool) {
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return Stat{}, false
	}
	f := strings.Fields(s[closing+1:]) // f[0] is field 3 (state)
	if len(f) < 20 {
		return Stat{}, false
	}
	num := func(i int) float64 { v, _ := strconv.ParseFloat(f[i], 64); return v }
	ppid, _ := strconv.Atoi(f[1])
	return Stat{
		Comm:      s[open+1 : closing],
		PPID:      ppid,
		CPU:       (num(11) + num(12)) / ClockTicks,
		Children:  (num(13) + num(14)) / ClockTicks,
		StartedAt: num(19) / ClockTicks,
	}, true
}

// Machine returns the busy and the total CPU seconds of the machine since
// boot, all CPUs (/proc/stat; busy is everything but idle and iowait), and
// the seconds since boot.
func Machine() (busy, total, uptime float64) {
	raw, err := os.ReadFile("/proc/stat")
	if err == nil {
		line, _, _ := strings.Cut(string(raw), "\n")
		f := append(strings.Fields(line), "")[1:] // without the "cpu" label
		for i, v := range f {
			if i >= 8 { // guest and guest_nice are inside user and nice
				break
			}
			x, _ := strconv.ParseFloat(v, 64)
			total += x / ClockTicks
			if i != 3 && i != 4 { // idle, iowait
				busy += x / ClockTicks
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

// AllPostgres returns the CPU seconds of every postgres process of the
// machine: each one's own, plus, for the postmaster (a postgres process
// whose parent is not one), its waited-for children's, so that backends
// and autovacuum workers that exited are still counted.
func AllPostgres() float64 {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	stats := map[int]Stat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := Read(pid); ok && st.Comm == "postgres" {
			stats[pid] = st
		}
	}
	var sum float64
	for _, st := range stats {
		sum += st.CPU
		if _, parentIsPG := stats[st.PPID]; !parentIsPG {
			sum += st.Children
		}
	}
	return sum
}

// Querier is what Backends needs of a connection or pool.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Backends is one reading of the backends of a database: each one's Stat by
// pid, and the machine's uptime when read.
type Backends struct {
	ByPID  map[int]Stat
	Uptime float64
}

// ReadBackends reads the backends of q's database (pg_stat_activity: every
// session of the database, autovacuum workers included): the pids that
// are postgres processes in this machine's /proc. A Postgres elsewhere (a
// remote server, a container with its own pids) reads as none.
func ReadBackends(ctx context.Context, q Querier) (Backends, error) {
	b := Backends{ByPID: map[int]Stat{}}
	// Before the query: a backend that starts after it is read whole by
	// the next reading (CPUSince).
	_, _, b.Uptime = Machine()
	rows, err := q.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return b, fmt.Errorf("procstat: backends: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return b, fmt.Errorf("procstat: backends: %w", err)
		}
		if st, ok := Read(pid); ok && st.Comm == "postgres" {
			b.ByPID[pid] = st
		}
	}
	if err := rows.Err(); err != nil {
		return b, fmt.Errorf("procstat: backends: %w", err)
	}
	return b, nil
}

// CPUSince is the CPU seconds the database's backends spent from the
// reading a to b: a backend of both readings counts its growth, one that
// started after a counts whole (a pid reused meanwhile is a new backend),
// and one that ended between the readings is missed.
func (b Backends) CPUSince(a Backends) float64 {
	var sum float64
	for pid, st := range b.ByPID {
		if was, ok := a.ByPID[pid]; ok && was.StartedAt == st.StartedAt {
			sum += st.CPU - was.CPU
		} else if st.StartedAt >= a.Uptime-0.01 {
			sum += st.CPU
		}
	}
	return sum
}

// MeasureBackends runs work and returns the CPU seconds q's database's
// backends spent meanwhile (CPUSince of a reading before and one after).
// It fails tb when a reading fails, or when no backend of the database is
// local (a figure of 0 would look like a measurement).
func MeasureBackends(tb testing.TB, ctx context.Context, q Querier, work func()) float64 {
	tb.Helper()
	before, err := ReadBackends(ctx, q)
	if err != nil {
		tb.Fatal(err)
	}
	if len(before.ByPID) == 0 {
		tb.Fatal("no backend of the database is a postgres process in this machine's /proc: the benchmark needs a local Postgres")
	}
	work()
	after, err := ReadBackends(ctx, q)
	if err != nil {
		tb.Fatal(err)
	}
	return after.CPUSince(before)
}
