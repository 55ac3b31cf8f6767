package eventstore

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/internal/testenv"
)

// lineRecorder records the messages and attributes of log records.
type lineRecorder struct {
	mu    sync.Mutex
	lines []map[string]string // "msg" and every attribute
}

func (r *lineRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *lineRecorder) Handle(_ context.Context, rec slog.Record) error {
	l := map[string]string{"msg": rec.Message, "level": rec.Level.String()}
	rec.Attrs(func(a slog.Attr) bool { l[a.Key] = a.Value.String(); return true })
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, l)
	return nil
}
func (r *lineRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *lineRecorder) WithGroup(string) slog.Handler      { return r }

// with returns the recorded lines that have attribute key.
func (r *lineRecorder) with(key string) []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, l := range r.lines {
		if _, ok := l[key]; ok {
			out = append(out, l)
		}
	}
	return out
}

// A store opened on a database whose migrations are incomplete (here the
// table sluice.eventstore_layout is missing) waits for it: the log says
// what it waits for — once, not at every check —, readiness (Heads) and
// appends answer a *LayoutPendingError naming the table and the command
// that creates it, and once the table is there the store goes on by
// itself.
func TestLayoutWaitSaysWhatItWaitsFor(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if _, err := e.pool.Exec(ctx, `ALTER TABLE sluice.eventstore_layout RENAME TO eventstore_layout_away`); err != nil {
		t.Fatal(err)
	}
	rec := &lineRecorder{}
	s, err := New(testConfig(), Deps{Pool: e.pool, Bucket: e.bucket, Logger: slog.New(rec)})
	if err != nil {
		t.Fatalf("New without the layout table: %v, want a store that waits", err)
	}
	t.Cleanup(func() { _ = s.Close() })

	// Positive evidence first: three checks failed.
	checks := func() int {
		s.layout.mu.Lock()
		defer s.layout.mu.Unlock()
		return s.layout.attempts
	}
	testenv.WaitFor(t, time.Minute, "three failed layout checks", func() bool { return checks() >= 3 })
	waits := rec.with("waiting_for")
	if n := checks(); len(waits) != 1+(n-1)/layoutLogEvery {
		t.Errorf("%d log lines for %d failed checks, want %d (the first, then one every %d): %v", len(waits), n, 1+(n-1)/layoutLogEvery, layoutLogEvery, waits)
	}
	for _, l := range waits {
		if w := l["waiting_for"]; !strings.Contains(w, "sluice.eventstore_layout") || !strings.Contains(w, "sluice migrate up") {
			t.Errorf("the log says it waits for %q, want the table sluice.eventstore_layout and sluice migrate up", w)
		}
	}
	for name, call := range map[string]func() error{
		"Heads (readiness)": func() error { _, err := s.Heads(ctx); return err },
		"Append":            func() error { _, err := s.Append(ctx, command("Order", "o-1", 1)); return err },
	} {
		err := call()
		var pending *LayoutPendingError
		var pgErr *pgconn.PgError
		switch {
		case !errors.As(err, &pending):
			t.Errorf("%s while the table is missing: %v, want a *LayoutPendingError", name, err)
		case !strings.Contains(err.Error(), "sluice.eventstore_layout") || !strings.Contains(err.Error(), "sluice migrate up"):
			t.Errorf("%s: %q does not name the table and sluice migrate up", name, err)
		case !errors.As(err, &pgErr) || pgErr.Code != "42P01":
			t.Errorf("%s: %v does not wrap Postgres's error", name, err)
		}
	}

	if _, err := e.pool.Exec(ctx, `ALTER TABLE sluice.eventstore_layout_away RENAME TO eventstore_layout`); err != nil {
		t.Fatal(err)
	}
	<-s.layoutWait(ctx)
	if _, err := s.Heads(ctx); err != nil {
		t.Fatalf("Heads once the table is back: %v", err)
	}
	mustAppend(t, s, command("Order", "o-1", 1))
	checked := false
	for _, l := range rec.with("failed_checks") {
		checked = checked || strings.Contains(l["msg"], "layout is checked")
	}
	if !checked {
		t.Errorf("no log line says the layout is checked once the table is back: %v", rec.lines)
	}
}

// setPending logs the first failure, a change of what the store waits
// for at once, and the same wait every layoutLogEvery-th check.
func TestLayoutPendingLogRate(t *testing.T) {
	down := errors.New("dial tcp: connection refused")
	missing := &pgconn.PgError{Code: "42P01", Message: `relation "sluice.eventstore_layout" does not exist`}
	var l layoutState
	var logged []int
	for n := 1; n <= 2*layoutLogEvery+2; n++ {
		err := error(down)
		if n == 5 || n == 6 {
			err = missing
		}
		if _, attempt, log := l.setPending(err); log {
			logged = append(logged, attempt)
		}
	}
	// 1: first; 5: the table (a change); 7: the database again (a change);
	// 12, 24: the period.
	want := []int{1, 5, 7, layoutLogEvery, 2 * layoutLogEvery}
	if !slices.Equal(logged, want) {
		t.Errorf("logged at checks %v, want %v", logged, want)
	}
}

// TestLayoutNoWait: with Config.LayoutNoWait, New fails at once with a
// *LayoutPendingError that says the layout cannot be read (not that the
// store is waiting) and names what it needs, and logs nothing about
// checking in the background: an operator command runs once and cannot
// wait. The layout readable, it opens as always.
func TestLayoutNoWait(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	for _, tc := range []struct {
		name    string
		missing bool // sluice.eventstore_layout renamed away
		wantErr string
	}{
		{"migrations not applied", true, "cannot read the store's layout: it needs the table sluice.eventstore_layout"},
		{"layout readable", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.missing {
				testenv.MustExec(t, e.pool, `ALTER TABLE sluice.eventstore_layout RENAME TO eventstore_layout_away`)
				t.Cleanup(func() {
					testenv.MustExec(t, e.pool, `ALTER TABLE sluice.eventstore_layout_away RENAME TO eventstore_layout`)
				})
			}
			cfg := testConfig()
			cfg.LayoutNoWait = true
			rec := &lineRecorder{}
			s, err := New(cfg, Deps{Pool: e.pool, Bucket: e.bucket, Logger: slog.New(rec)})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				defer s.Close()
				if _, err := s.Heads(ctx); err != nil {
					t.Fatalf("Heads: %v", err)
				}
				return
			}
			var pending *LayoutPendingError
			if s != nil {
				_ = s.Close()
			}
			if !errors.As(err, &pending) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "sluice migrate up") || strings.Contains(err.Error(), "waiting") {
				t.Fatalf("New: %v; want a *LayoutPendingError saying %q and sluice migrate up", err, tc.wantErr)
			}
			if lines := rec.with("waiting_for"); len(lines) > 0 {
				t.Errorf("logged %v; want no line about checking in the background", lines)
			}
		})
	}
}
