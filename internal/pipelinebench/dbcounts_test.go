package pipelinebench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Work counted outside the services, per visible command: what Postgres
// did for the run's database (its own cumulative statistics) and how many
// cache flushes the disks completed (fsyncs that reached a device). Like
// the services' counters they count work, not time, so they mean the same
// on a loaded machine, except the disk flushes and the WAL syncs, which
// are the machine's and the server's (every database).
const (
	countXacts     = "postgres transactions (run's db)"
	countRollbacks = "postgres rollbacks (run's db)"
	countRowsIns   = "postgres rows inserted (run's db)"
	countRowsUpd   = "postgres rows updated (run's db)"
	countWALSyncs  = "postgres WAL syncs (server)"
	countFlushes   = "disk flushes (machine)"
)

// switchGroups are the processes whose threads' context switches are
// counted ("<process> context switches"): how often each was put to sleep
// and woken per command, the cost a paced load adds to every process that
// a burst keeps busy.
var switchGroups = []string{groupAPI, groupRelay, groupInstance, groupProjection, groupKafka, groupES, groupDriver}

func switchesName(g string) string { return g + " context switches" }

// extraCounts are the counts of this file, in the report's order.
var extraCounts = append([]string{countXacts, countRollbacks, countRowsIns, countRowsUpd, countWALSyncs, countFlushes},
	func() []string {
		var out []string
		for _, g := range switchGroups {
			out = append(out, switchesName(g))
		}
		return out
	}()...)

// statsSettle is how long the database's statistics are let settle
// before they are read at the end of a phase: a Postgres backend reports
// its counters at most once a second while busy and, once idle, within
// PGSTAT_IDLE_INTERVAL (10 s), so a reading right after the drain would
// miss up to a second of the phase (and count it in the next).
const statsSettle = 11 * time.Second

// dbCounts reads the run's database's transactions and rows
// (pg_stat_database) and the server's WAL syncs (pg_stat_wal).
func dbCounts(ctx context.Context, pool *pgxpool.Pool) (map[string]float64, error) {
	var commits, rollbacks, ins, upd int64
	if err := pool.QueryRow(ctx, `SELECT xact_commit, xact_rollback, tup_inserted, tup_updated
		FROM pg_stat_database WHERE datname = current_database()`).Scan(&commits, &rollbacks, &ins, &upd); err != nil {
		return nil, fmt.Errorf("pg_stat_database: %w", err)
	}
	out := map[string]float64{countXacts: float64(commits + rollbacks), countRollbacks: float64(rollbacks),
		countRowsIns: float64(ins), countRowsUpd: float64(upd)}
	var syncs int64
	if err := pool.QueryRow(ctx, `SELECT wal_sync FROM pg_stat_wal`).Scan(&syncs); err == nil {
		out[countWALSyncs] = float64(syncs)
	}
	return out, nil
}

// diskFlushes returns the flush requests completed by the machine's whole
// disks (/proc/diskstats, the 16th counter after the name; partitions and
// devices without a /sys/block entry are left out).
func diskFlushes() (float64, bool) {
	raw, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		return 0, false
	}
	return parseDiskFlushes(string(raw), func(name string) bool {
		_, err := os.Stat("/sys/block/" + name)
		return err == nil
	})
}

// parseDiskFlushes sums the flushes completed of the devices whole says
// are disks; ok is false when no line has the counter (kernels before 5.5).
func parseDiskFlushes(text string, whole func(string) bool) (sum float64, ok bool) {
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 19 || !whole(f[2]) {
			continue
		}
		v, err := strconv.ParseFloat(f[18], 64)
		if err != nil {
			continue
		}
		sum += v
		ok = true
	}
	return sum, ok
}

// contextSwitches sums the voluntary and involuntary context switches of
// every thread of pid (/proc/<pid>/task/*/status); threads that ended are
// not counted (a Go process keeps its threads).
func contextSwitches(pid int) (float64, bool) {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return 0, false
	}
	var sum float64
	for _, t := range tasks {
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/status")
		if err != nil {
			continue
		}
		sum += parseSwitches(string(raw))
	}
	return sum, true
}

// parseSwitches returns voluntary_ctxt_switches + nonvoluntary_ctxt_switches
// of a /proc status text.
func parseSwitches(status string) float64 {
	var sum float64
	for line := range strings.SplitSeq(status, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "voluntary_ctxt_switches" && k != "nonvoluntary_ctxt_switches") {
			continue
		}
		if n, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			sum += n
		}
	}
	return sum
}

// workSnap is one reading of the counts of a phase: the services'
// (scrapeCounts) and the disks', read when the CPU is; the database's
// after statsSettle.
type workSnap map[string]float64

// readWork reads the services' counters and the disks' flushes.
func (d *deployment) readWork() workSnap {
	w := workSnap(d.scrapeCounts())
	if v, ok := diskFlushes(); ok {
		w[countFlushes] = v
	}
	pids := d.pids()
	for _, g := range switchGroups {
		if pid, ok := pids[g]; ok {
			if v, ok := contextSwitches(pid); ok {
				w[switchesName(g)] = v
			}
		}
	}
	return w
}

// addDB adds the database's counts to w (left out when they cannot be
// read).
func (d *deployment) addDB(ctx context.Context, w workSnap) {
	db, err := dbCounts(ctx, d.pool)
	if err != nil {
		d.b.Logf("pipelinebench: %v (database counts left out)", err)
		return
	}
	for k, v := range db {
		w[k] = v
	}
}
