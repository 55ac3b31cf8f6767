package registry_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
)

// Every method reports an unreachable server as ErrUnavailable.
func TestUnavailableClosedPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	pool, err := pgxpool.New(context.Background(), "postgres://sluice@"+addr+"/sluice?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	r := newRegistry(t, pool, "w", registry.Config{})
	ctx := context.Background()
	lease := claim.Lease{Handler: "h", EventID: "e", Token: "00000000-0000-4000-8000-000000000000"}
	ops := map[string]func() error{
		"check": func() error { return r.Check(ctx) },
		"claim": func() error { _, err := r.Claim(ctx, req("h", "e", "a", 1, wait)); return err },
		"claim batch": func() error {
			_, err := r.ClaimBatch(ctx, []claim.Request{req("h", "e", "a", 1, wait)})
			return err
		},
		"mark done":   func() error { return r.MarkDone(ctx, lease, claim.Applied()) },
		"mark failed": func() error { _, err := r.MarkFailed(ctx, lease, claim.Failure{Err: errors.New("x")}); return err },
		"heartbeat":   func() error { return r.Heartbeat(ctx, lease) },
		"release":     func() error { return r.Release(ctx, lease) },
		"redrive":     func() error { return r.Redrive(ctx, "h", "e") },
		"get":         func() error { _, err := r.Get(ctx, "e"); return err },
		"get row":     func() error { _, err := r.GetRow(ctx, "h", "e"); return err },
		"prune":       func() error { _, err := r.Prune(ctx, time.Hour); return err },
		"advance":     func() error { _, err := r.AdvanceTo(ctx, "h", "a", 3); return err },
		"last seq":    func() error { _, err := r.LastSequence(ctx, "h", "a"); return err },
	}
	for name, op := range ops {
		err := op()
		var ue *registry.UnavailableError
		if !errors.Is(err, registry.ErrUnavailable) || !errors.As(err, &ue) || errors.Is(err, registry.ErrLeaseLost) {
			t.Errorf("%s: %v, want ErrUnavailable", name, err)
		}
	}
	// The caller's own cancellation is not an outage.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Claim(cctx, req("h", "e", "a", 1, wait)); !errors.Is(err, context.Canceled) || errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("cancelled: %v", err)
	}
}

// Postgres goes away between a claim and its mark-done: both report
// ErrUnavailable, nothing is marked, and everything resumes once the server
// is back.
func TestOutageCutAndRestore(t *testing.T) {
	p, pool, direct := proxiedPool(t, nil, 4)
	ctx := context.Background()
	r := newRegistry(t, pool, "w", registry.Config{OpTimeout: 3 * time.Second})
	if err := r.Check(ctx); err != nil {
		t.Fatal(err)
	}
	first := claimOne(t, r, req("h", "e1", "agg", 1, wait))
	mustKind(t, first, claim.Claimed)

	p.Stop()
	if err := r.Check(ctx); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("check during outage: %v", err)
	}
	if err := r.MarkDone(ctx, first.Lease, claim.Applied()); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("mark done during outage: %v", err)
	}
	if _, err := r.Claim(ctx, req("h", "e2", "agg", 2, wait)); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("claim during outage: %v", err)
	}
	var status string
	if err := direct.QueryRow(ctx, `SELECT status FROM sluice.processed_events WHERE event_id = 'e1'`).Scan(&status); err != nil || status != "processing" {
		t.Fatalf("e1 %s %v", status, err)
	}
	var n int
	if err := direct.QueryRow(ctx, `SELECT count(*) FROM sluice.processed_events`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows %d %v", n, err)
	}

	p.Start()
	deadline := time.Now().Add(10 * time.Second)
	for r.Check(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("not ready after restore")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := r.MarkDone(ctx, first.Lease, claim.Applied()); err != nil {
		t.Fatalf("mark done after restore: %v", err)
	}
	claimDone(t, r, req("h", "e2", "agg", 2, wait))
}

// The connection is cut while a worker loop claims and marks events: every
// error is ErrUnavailable (the loop pauses and retries), nothing changes
// while the server is away, and after the restore every event is done once
// — including events whose claim committed but whose reply was lost.
func TestOutageMidRun(t *testing.T) {
	p, pool, direct := proxiedPool(t, nil, 4)
	ctx := context.Background()
	r := newRegistry(t, pool, "w", registry.Config{OpTimeout: 2 * time.Second})
	const events, batch = 400, 10
	var done atomic.Int64
	var unavailable atomic.Int64
	var loopErr error
	var wg sync.WaitGroup
	retry := func(op func() error) error {
		for {
			err := op()
			if err == nil || !errors.Is(err, registry.ErrUnavailable) {
				return err
			}
			unavailable.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
	}
	wg.Go(func() {
		for start := 0; start < events; start += batch {
			var reqs []claim.Request
			for i := start; i < start+batch; i++ {
				reqs = append(reqs, req("h", fmt.Sprintf("e%d", i), fmt.Sprintf("agg-%d", i%50), int64(i/50+1), wait))
			}
			var res []claim.Result
			pending := reqs
			var items []claim.Done
			for len(pending) > 0 {
				if err := retry(func() (err error) { res, err = r.ClaimBatch(ctx, pending); return err }); err != nil {
					loopErr = err
					return
				}
				var again []claim.Request
				for i, c := range res {
					switch c.Kind {
					case claim.Claimed:
						items = append(items, claim.Done{Lease: c.Lease, Outcome: claim.Applied()})
					case claim.DuplicateDone:
					default: // our own claim whose reply was lost: retried below
						again = append(again, pending[i])
					}
				}
				pending = again
				if len(pending) > 0 {
					time.Sleep(20 * time.Millisecond)
				}
			}
			var errs []error
			if err := retry(func() (err error) { errs, err = r.MarkDoneBatch(ctx, items); return err }); err != nil {
				loopErr = err
				return
			}
			if err := errors.Join(errs...); err != nil {
				loopErr = err
				return
			}
			done.Add(int64(len(items)))
		}
	})
	testenv.WaitFor(t, 60*time.Second, "a quarter of the events done", func() bool { return done.Load() >= events/4 })
	p.Stop()
	// Evidence instead of pauses: the loop saw the outage before the first
	// count, and tried (and was refused) several times more before the
	// second — each try would have changed a row had it got through.
	// (The deadlines are hang guards.)
	testenv.WaitFor(t, 30*time.Second, "the loop sees the outage", func() bool { return unavailable.Load() >= 1 })
	// A statement the server was running when the connection was cut still
	// commits (a claim whose reply is lost, as below): count once no
	// statement of this database runs but ours.
	testenv.WaitFor(t, 30*time.Second, "no statement of the cut connections running", func() bool {
		var active int
		err := direct.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()`).Scan(&active)
		return err == nil && active == 0
	})
	count := func() (n int) {
		if err := direct.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'done') * 100000 + count(*) FROM sluice.processed_events`).Scan(&n); err != nil {
			t.Error(err)
		}
		return n
	}
	during := count()
	tries := unavailable.Load()
	testenv.WaitFor(t, 30*time.Second, "three more refused tries", func() bool { return unavailable.Load() >= tries+3 })
	if after := count(); after != during {
		t.Errorf("rows changed while Postgres was unreachable: %d -> %d", during, after)
	}
	p.Start()
	wg.Wait()
	if loopErr != nil {
		t.Fatalf("worker loop got a non-outage error: %v", loopErr)
	}
	if unavailable.Load() == 0 {
		t.Fatal("the loop never saw the outage")
	}
	var doneRows, maxAttempt int
	if err := direct.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'done'), max(attempt_count) FROM sluice.processed_events`).Scan(&doneRows, &maxAttempt); err != nil {
		t.Fatal(err)
	}
	if doneRows != events {
		t.Fatalf("%d of %d events done", doneRows, events)
	}
	t.Logf("outage seen %d times; max attempt %d", unavailable.Load(), maxAttempt)
}

// A lease that cannot be renewed for most of its timeout is given up: the
// processing context is cancelled with the outage as cause.
func TestHoldGivesUpWhenUnrenewable(t *testing.T) {
	p, pool, _ := proxiedPool(t, nil, 4)
	ctx := context.Background()
	r := newRegistry(t, pool, "w", registry.Config{LeaseTimeout: time.Second, HeartbeatInterval: 200 * time.Millisecond, OpTimeout: 500 * time.Millisecond})
	res := claimOne(t, r, req("h", "e", "agg", 1, skip))
	hctx, stop := r.Hold(ctx, res.Lease)
	defer stop()
	p.Stop()
	select {
	case <-hctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("hold not given up during an outage")
	}
	if cause := context.Cause(hctx); !errors.Is(cause, registry.ErrUnavailable) {
		t.Fatalf("cause %v", cause)
	}
	p.Start()
}

// A claim that committed but whose reply was lost leaves a processing row
// the worker never learned the token of. The registry starts a new
// incarnation after such an ambiguous failure, so the same worker reclaims
// the row at once (attempt 2) instead of waiting out the lease.
func TestLostClaimReplyIsReclaimed(t *testing.T) {
	p, pool, direct := proxiedPool(t, nil, 1)
	ctx := context.Background()
	r := newRegistry(t, pool, "w", registry.Config{OpTimeout: 3 * time.Second})
	claimDone(t, r, req("h", "warm-up", "other", 1, wait)) // prepares the claim statement
	p.DropReplies(true)
	if _, err := r.Claim(ctx, req("h", "e1", "agg", 1, wait)); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("claim with lost reply: %v", err)
	}
	p.DropReplies(false)
	var status string
	var attempts int
	if err := direct.QueryRow(ctx, `SELECT status, attempt_count FROM sluice.processed_events WHERE event_id = 'e1'`).Scan(&status, &attempts); err != nil || status != "processing" {
		t.Fatalf("the claim did not commit (%s, %v): the test needs it to", status, err)
	}
	var res claim.Result
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		res, err = r.Claim(ctx, req("h", "e1", "agg", 1, wait))
		if err == nil {
			break
		}
		if !errors.Is(err, registry.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	mustKind(t, res, claim.Claimed)
	if res.Lease.Attempt != 2 {
		t.Fatalf("attempt %d", res.Lease.Attempt)
	}
	markDone(t, r, res.Lease)
	// Another owner still respects a live lease.
	other := newRegistry(t, pool, "w2", registry.Config{})
	claimed := claimOne(t, r, req("h", "e2", "agg", 2, wait))
	mustKind(t, claimed, claim.Claimed)
	mustKind(t, claimOne(t, other, req("h", "e2", "agg", 2, wait)), claim.InProgress)
}
