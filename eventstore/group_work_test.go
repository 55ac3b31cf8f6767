package eventstore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/shared/envelope"
)

// statementLog is a pgx tracer that records what each Postgres round trip
// of its connections sent: one entry per batch (its statements, named) or
// per statement sent on its own. It counts like testenv.RoundTrips and
// also says which statements a round trip held.
type statementLog struct {
	mu    sync.Mutex
	trips [][]string
}

// statementNames names the store's statements in statementLog.
var statementNames = map[string]string{
	"BEGIN": "BEGIN", "COMMIT": "COMMIT", "ROLLBACK": "ROLLBACK",
	sqlWriteOne: "write", sqlWriteSharded: "write", sqlFlush: "flush", sqlDropMoved: "drop moved",
	sqlPlanProbes: "probe plans", sqlPlanLargeGroup: "plans per call", sqlVerify: "verify",
	sqlLockSequences: "lock sequences", sqlLookupEvents: "lookup events", sqlLookupSlots: "lookup slots",
	sqlCommitRows: "commit rows", sqlNotify: "notify",
}

func statementName(sql string) string {
	if n, ok := statementNames[sql]; ok {
		return n
	}
	sql = strings.Join(strings.Fields(sql), " ")
	return sql[:min(len(sql), 60)]
}

func (l *statementLog) add(trip []string) {
	l.mu.Lock()
	l.trips = append(l.trips, trip)
	l.mu.Unlock()
}

// since returns the round trips recorded after the first n.
func (l *statementLog) since(n int) [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.trips[n:])
}

func (l *statementLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.trips)
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.add([]string{statementName(d.SQL)})
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *statementLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var trip []string
	for _, q := range d.Batch.QueuedQueries {
		trip = append(trip, statementName(q.SQL))
	}
	l.add(trip)
	return ctx
}

func (l *statementLog) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (l *statementLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestGroupWork pins the Postgres work of one store group, per kind of
// group: its round trips, the statements each one sends, and the
// notifications the group sends (docs/eventstore.md#append-protocol-group-commit).
// A statement, a transaction or a NOTIFY more per group fails it. Before
// issue 34 item 3 the common group sent 13 statements in 5 transactions
// with 2 notifications (a `reserved` one no reader used), a group with
// checks 16; now 9 and 11, with the commit's notification only.
func TestGroupWork(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	log := &statementLog{}
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := New(testConfig(), Deps{Pool: pool, Bucket: e.bucket,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	listener, err := pgx.Connect(ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		t.Fatal(err)
	}
	// notifications returns what the channel carried up to now: a sentinel
	// sent after the group's commit arrives after everything the group sent
	// (notifications are delivered in commit order), so nothing is missed
	// and nothing is waited for by time.
	notifications := func(t *testing.T, step string) []string {
		t.Helper()
		sentinel := "sentinel " + step
		if _, err := e.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, sentinel); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			n, err := listener.WaitForNotification(ctx)
			if err != nil {
				t.Fatalf("notifications %q, then %v", got, err)
			}
			if n.Payload == sentinel {
				return got
			}
			got = append(got, n.Payload)
		}
	}

	reservation := []string{"BEGIN", "write", "COMMIT", "flush"}
	commit := []string{"BEGIN", "probe plans", "commit rows", "COMMIT", "notify"}
	withChecks := []string{"BEGIN", "probe plans", "verify", "write", "COMMIT", "flush"}
	var cmds []Result
	steps := []struct {
		name  string
		envs  func() []envelope.Envelope
		trips [][]string
	}{
		{"commands", func() []envelope.Envelope {
			return []envelope.Envelope{command("Order", "w-1", 1), command("Order", "w-2", 2), command("Order", "w-1", 3)}
		}, [][]string{reservation, commit}},
		{"commands again (statements prepared)", func() []envelope.Envelope {
			return []envelope.Envelope{command("Order", "w-1", 4), command("Order", "w-3", 5)}
		}, [][]string{reservation, commit}},
		{"expected_seq that holds", func() []envelope.Envelope {
			c := command("Order", "w-2", 6)
			c.ExpectedSeq = expect(1)
			return []envelope.Envelope{c}
		}, [][]string{withChecks, commit}},
		{"domain events into their commands' slots", func() []envelope.Envelope {
			var out []envelope.Envelope
			for _, r := range cmds[:2] {
				c := r.Event.Envelope
				d := domainEvent(c.AggregateType, c.AggregateID, "done")
				d.SequenceNumber = c.SequenceNumber
				d.Metadata.SetString(envelope.MetaCausationID, c.EventID)
				out = append(out, d)
			}
			return out
		}, [][]string{withChecks, commit}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			n0 := log.len()
			rs := mustAppend(t, s, st.envs()...)
			if len(cmds) == 0 {
				cmds = rs
			}
			got := log.since(n0)
			if !slices.EqualFunc(got, st.trips, slices.Equal) {
				t.Errorf("round trips of the group:\n%s\nwant:\n%s", formatTrips(got), formatTrips(st.trips))
			}
			first, last := rs[0].Event.Envelope.Position, rs[len(rs)-1].Event.Envelope.Position
			want := []string{fmt.Sprintf("committed %d %d", first, last)}
			if got := notifications(t, st.name); !slices.Equal(got, want) {
				t.Errorf("notifications %q, want %q (one per group: its commit)", got, want)
			}
			statements := 0
			for _, trip := range got {
				statements += len(trip)
			}
			t.Logf("%s: %d round trips, %d statements", st.name, len(got), statements)
		})
	}
}

func formatTrips(trips [][]string) string {
	var b strings.Builder
	for i, trip := range trips {
		fmt.Fprintf(&b, "  %d: %s\n", i+1, strings.Join(trip, ", "))
	}
	return b.String()
}

// The settings the folded statements take over from the SET statements
// they replace: the write turns synchronous_commit off for its
// transaction (the reservation's locks go before the WAL flush), and the
// checks put the plan cache mode back for the write after them.
func TestGroupSettingsInStatements(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	setting := func(name string) string {
		t.Helper()
		var v string
		if err := c.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	sync0, mode0 := setting("synchronous_commit"), setting("plan_cache_mode")
	if sync0 == "off" || mode0 == "force_generic_plan" || setting("enable_seqscan") == "off" {
		t.Fatalf("session starts with synchronous_commit %s, plan_cache_mode %s, enable_seqscan %s", sync0, mode0, setting("enable_seqscan"))
	}
	// checksUnder runs w's plan settings and empty checks, and fails
	// unless scans and merge joins are off and hash joins hashJoin.
	checksUnder := func(w *writeArgs, hashJoin string) error {
		if _, err := c.Exec(ctx, w.plans()); err != nil {
			return err
		}
		for name, want := range map[string]string{"enable_seqscan": "off", "enable_hashjoin": hashJoin, "enable_mergejoin": "off"} {
			if v := setting(name); v != want {
				return fmt.Errorf("%s %s for the checks' plan, want %s", name, v, want)
			}
		}
		_, err := c.Exec(ctx, sqlVerify, []string{}, []string{}, []string{}, []string{}, []int64{}, []string{}, []string{},
			[]int64{}, []string{}, []string{}, []string{})
		return err
	}
	for _, step := range []struct {
		name        string
		run         func() error
		sync, mode  string
		afterCommit string // synchronous_commit after the transaction
	}{
		{"the write", func() error {
			var h [32]byte
			_, err := c.Exec(ctx, sqlWriteOne, []string{"T"}, []string{"i"}, []int64{1}, []bool{false}, int64(1),
				[]string{"8b0a3f0e-6a57-4c4e-9d43-6f1f7c8b2a10"}, []string{"command"}, []string{"T"}, []string{"i"},
				[]int64{0}, []bool{true}, [][]byte{h[:]}, []time.Time{time.Now()}, "w")
			return err
		}, "off", mode0, sync0},
		{"the checks", func() error {
			return checksUnder(&writeArgs{n: 100, aggT: make([]string, 100), checks: &checks{}}, "off")
		}, sync0, "force_generic_plan", sync0},
		{"the checks of a large group", func() error {
			return checksUnder(&writeArgs{n: 101, aggT: make([]string, 100), checks: &checks{}}, "on")
		}, sync0, "force_custom_plan", sync0},
	} {
		t.Run(step.name, func(t *testing.T) {
			if _, err := c.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			if err := step.run(); err != nil {
				t.Fatal(err)
			}
			if got := setting("synchronous_commit"); got != step.sync {
				t.Errorf("synchronous_commit %s in the transaction, want %s", got, step.sync)
			}
			if got := setting("plan_cache_mode"); got != step.mode {
				t.Errorf("plan_cache_mode %s after it, want %s", got, step.mode)
			}
			if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
			if got := setting("synchronous_commit"); got != step.afterCommit {
				t.Errorf("synchronous_commit %s after the transaction, want %s (local to it)", got, step.afterCommit)
			}
			if got := setting("plan_cache_mode"); got != mode0 {
				t.Errorf("plan_cache_mode %s after the transaction, want %s (local to it)", got, mode0)
			}
			for _, name := range []string{"enable_seqscan", "enable_hashjoin", "enable_mergejoin"} {
				if got := setting(name); got != "on" {
					t.Errorf("%s %s after the transaction, want on (local to it)", name, got)
				}
			}
		})
	}
}

// TestWritePlans: which settings a write's round trip starts with. A
// group whose joins pass probeJoinPairsMax pairs (envelopes × aggregates
// advanced, or assumed last sequences × locked rows) is planned per call
// with hash joins, since a generic plan joins them by a nested loop; the
// checks of a smaller one run probe plans; a write without checks keeps
// the settings of its transaction.
func TestWritePlans(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    writeArgs
		want string
	}{
		{"no checks", writeArgs{n: 50, aggT: make([]string, 50)}, ""},
		{"checks", writeArgs{n: 50, aggT: make([]string, 50), checks: &checks{lastT: make([]string, 50), lockT: make([]string, 50)}}, sqlPlanProbes},
		{"envelopes × aggregates at the limit", writeArgs{n: 100, aggT: make([]string, 100)}, ""},
		{"envelopes × aggregates past it, no checks", writeArgs{n: 101, aggT: make([]string, 100)}, sqlPlanLargeGroup},
		{"envelopes × aggregates past it, checks", writeArgs{n: 2000, aggT: make([]string, 6), checks: &checks{}}, sqlPlanLargeGroup},
		{"assumed last sequences × locked rows past it", writeArgs{n: 10, aggT: make([]string, 10), checks: &checks{lastT: make([]string, 101), lockT: make([]string, 100)}}, sqlPlanLargeGroup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.w.plans(); got != tc.want {
				t.Errorf("plans() = %q, want %q", statementName(got), statementName(tc.want))
			}
		})
	}
}
