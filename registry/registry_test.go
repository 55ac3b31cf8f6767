package registry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
)

const (
	skip = claim.SkipStale
	wait = claim.WaitForPredecessor
)

func TestNewValidatesConfig(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	for _, tc := range []struct {
		name string
		cfg  registry.Config
		want string // substring of the error; "" = valid
	}{
		{"defaults", registry.Config{Owner: "w1"}, ""},
		{"no owner", registry.Config{}, "PROCESSED_EVENT_OWNER"},
		{"control char owner", registry.Config{Owner: "w\n1"}, "control"},
		{"heartbeat equals lease", registry.Config{Owner: "w", LeaseTimeout: 30 * time.Second, HeartbeatInterval: 30 * time.Second}, "must be shorter than LeaseTimeout"},
		{"heartbeat above lease", registry.Config{Owner: "w", LeaseTimeout: 10 * time.Second}, "must be shorter than LeaseTimeout"},
		{"negative heartbeat", registry.Config{Owner: "w", HeartbeatInterval: -time.Second}, "must be positive"},
		{"tiny lease", registry.Config{Owner: "w", LeaseTimeout: time.Millisecond, HeartbeatInterval: time.Microsecond}, "at least 1s"},
		{"base above cap", registry.Config{Owner: "w", BackoffBase: time.Minute, BackoffCap: time.Second}, "must not exceed BackoffCap"},
		{"negative attempts", registry.Config{Owner: "w", MaxAttempts: -1}, "MaxAttempts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := registry.New(tc.cfg, registry.Deps{Pool: pool})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				o := r.Config()
				if o.LeaseTimeout != registry.DefaultConfig().LeaseTimeout || o.HeartbeatInterval != registry.DefaultConfig().HeartbeatInterval || o.MaxAttempts != 5 {
					t.Fatalf("defaults not applied: %+v", o)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if _, err := registry.New(registry.Config{Owner: "w"}, registry.Deps{}); err == nil {
		t.Fatal("nil pool accepted")
	}
}

func TestInvalidRequests(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	r := newRegistry(t, pool, "w1", registry.Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		req   claim.Request
		field string
	}{
		{"empty handler", req("", "e", "a", 1, skip), "handler"},
		{"empty event", req("h", "", "a", 1, skip), "event_id"},
		{"blank aggregate", req("h", "e", "  \t", 1, skip), "aggregate_id"},
		{"control char aggregate", req("h", "e", "a\x07b", 1, skip), "aggregate_id"},
		{"invalid utf8 aggregate", req("h", "e", "a\xffb", 1, skip), "aggregate_id"},
		{"seq zero", req("h", "e", "a", 0, skip), "seq"},
		{"no policy", req("h", "e", "a", 1, 0), "policy"},
		{"nul in event id", req("h", "e\x00", "a", 1, skip), "event_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Claim(ctx, tc.req)
			var re *claim.RequestError
			if !errors.Is(err, registry.ErrInvalidRequest) || !errors.As(err, &re) || re.Field != tc.field {
				t.Fatalf("got %v, want a RequestError on %s", err, tc.field)
			}
		})
	}
	bad := claim.Lease{Handler: "h", EventID: "e", Token: "not-a-token"}
	if err := r.MarkDone(ctx, bad, claim.Applied()); !errors.Is(err, registry.ErrInvalidRequest) {
		t.Fatalf("bad token: %v", err)
	}
	res := claimOne(t, r, req("h", "e1", "a", 1, skip))
	if err := r.MarkDone(ctx, res.Lease, claim.Outcome{Result: claim.OutcomeRejected}); !errors.Is(err, registry.ErrInvalidRequest) {
		t.Fatalf("rejected without reason: %v", err)
	}
	if err := r.MarkDone(ctx, res.Lease, claim.Outcome{Result: "maybe"}); !errors.Is(err, registry.ErrInvalidRequest) {
		t.Fatalf("unknown outcome: %v", err)
	}
	if _, err := r.ClaimBatch(ctx, []claim.Request{req("h", "x", "a", 1, skip), req("h", "x", "a", 2, skip)}); !errors.Is(err, registry.ErrInvalidRequest) {
		t.Fatalf("conflicting duplicate in batch: %v", err)
	}
}

// Duplicate delivery: after claim and done, every redelivery is
// DUPLICATE_DONE with the recorded outcome and the attempt count stays 1.
func TestDuplicateDelivery(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	for _, p := range []claim.Policy{skip, wait} {
		t.Run(p.String(), func(t *testing.T) {
			r := newRegistry(t, pool, "w1", registry.Config{})
			other := newRegistry(t, pool, "w2", registry.Config{})
			h := "h-" + p.String()
			res := claimOne(t, r, req(h, "evt-1", "Order-1", 1, p))
			mustKind(t, res, claim.Claimed)
			if res.Lease.Attempt != 1 || res.Attempt != 1 {
				t.Fatalf("attempt %d", res.Lease.Attempt)
			}
			if err := r.MarkDone(ctx, res.Lease, claim.Rejected("instance exists")); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				reg := r
				if i%2 == 1 {
					reg = other
				}
				d := claimOne(t, reg, req(h, "evt-1", "Order-1", 1, p))
				mustKind(t, d, claim.DuplicateDone)
				if d.Outcome == nil || d.Outcome.Result != claim.OutcomeRejected || d.Outcome.Reason != "instance exists" {
					t.Fatalf("outcome %+v", d.Outcome)
				}
			}
			got := row(t, r, h, "evt-1")
			if got.Status != claim.StatusDone || got.Attempts != 1 || got.ProcessedAt.IsZero() {
				t.Fatalf("row %+v", got)
			}
			// MarkDone again with the same lease is an idempotent success.
			if err := r.MarkDone(ctx, res.Lease, claim.Applied()); err != nil {
				t.Fatalf("repeated mark done: %v", err)
			}
			if last, _ := r.LastSequence(ctx, h, "Order-1"); last != 1 {
				t.Fatalf("last %d", last)
			}
		})
	}
}

// Concurrent delivery: 20 goroutines claim one event at once; exactly one
// gets CLAIMED, the others IN_PROGRESS — through one shared Registry (one
// worker's goroutines) and through 20 registries of different owners.
func TestConcurrentDelivery(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	shared := newRegistry(t, pool, "w-shared", registry.Config{})
	for _, mode := range []string{"one registry", "twenty owners"} {
		t.Run(mode, func(t *testing.T) {
			regs := make([]*registry.Registry, 20)
			for i := range regs {
				regs[i] = shared
				if mode == "twenty owners" {
					regs[i] = newRegistry(t, pool, fmt.Sprintf("w%d", i), registry.Config{})
				}
			}
			evt := "evt-" + strings.ReplaceAll(mode, " ", "-")
			start := make(chan struct{})
			results := make([]claim.Result, 20)
			errs := make([]error, 20)
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Go(func() {
					<-start
					results[i], errs[i] = regs[i].Claim(context.Background(), req("h", evt, "agg-1", 1, wait))
				})
			}
			close(start)
			wg.Wait()
			claimed, inProgress := 0, 0
			for i := range 20 {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				switch results[i].Kind {
				case claim.Claimed:
					claimed++
				case claim.InProgress:
					inProgress++
				default:
					t.Fatalf("unexpected %s", results[i].Kind)
				}
			}
			if claimed != 1 || inProgress != 19 {
				t.Fatalf("claimed %d, in progress %d", claimed, inProgress)
			}
			if got := row(t, shared, "h", evt); got.Attempts != 1 {
				t.Fatalf("attempts %d", got.Attempts)
			}
		})
	}
}

// Lease expiry on the database clock: another owner reclaims an expired
// lease with attempt 2 and a new token; the first owner is fenced out.
func TestLeaseExpiry(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	opts := registry.Config{LeaseTimeout: time.Second, HeartbeatInterval: 200 * time.Millisecond}
	a := newRegistry(t, pool, "owner-a", opts)
	b := newRegistry(t, pool, "owner-b", opts)

	first := claimOne(t, a, req("h", "e1", "agg", 1, skip))
	mustKind(t, first, claim.Claimed)
	early := claimOne(t, b, req("h", "e1", "agg", 1, skip))
	mustKind(t, early, claim.InProgress)
	if early.Holder != "owner-a" || early.RetryIn <= 0 || early.RetryIn > time.Second {
		t.Fatalf("in progress detail %+v", early)
	}
	time.Sleep(early.RetryIn + 50*time.Millisecond) // the database said when
	second := claimOne(t, b, req("h", "e1", "agg", 1, skip))
	mustKind(t, second, claim.Claimed)
	if second.Lease.Attempt != 2 || second.Lease.Token == first.Lease.Token {
		t.Fatalf("reclaim %+v", second.Lease)
	}
	if err := a.MarkDone(ctx, first.Lease, claim.Applied()); !errors.Is(err, registry.ErrLeaseLost) {
		t.Fatalf("stale holder's mark done: %v, want ErrLeaseLost", err)
	}
	if _, err := a.MarkFailed(ctx, first.Lease, claim.Failure{Err: errors.New("x"), Retryable: true}); !errors.Is(err, registry.ErrLeaseLost) {
		t.Fatalf("stale holder's mark failed: %v", err)
	}
	if err := a.Heartbeat(ctx, first.Lease); !errors.Is(err, registry.ErrLeaseLost) {
		t.Fatalf("stale holder's heartbeat: %v", err)
	}
	if got := row(t, a, "h", "e1"); got.Status != claim.StatusProcessing || got.Owner != "owner-b" {
		t.Fatalf("row %+v", got)
	}
	markDone(t, b, second.Lease)
}

// Hold keeps a lease alive past its timeout; a heartbeat that finds the
// lease lost cancels the holder's context with ErrLeaseLost as the cause.
func TestHoldHeartbeatsAndCancelsOnLoss(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	opts := registry.Config{LeaseTimeout: time.Second, HeartbeatInterval: 150 * time.Millisecond}
	a := newRegistry(t, pool, "owner-a", opts)
	b := newRegistry(t, pool, "owner-b", opts)

	res := claimOne(t, a, req("h", "e1", "agg", 1, skip))
	claimedAt := row(t, a, "h", "e1").HeartbeatAt
	pctx, stop := a.Hold(ctx, res.Lease)
	defer stop()
	res2 := claimOne(t, a, req("h", "e2", "agg2", 1, skip))
	pctx2, stop2 := a.Hold(ctx, res2.Lease)
	if a.Held() != 2 {
		t.Fatalf("held %d", a.Held())
	}
	// Evidence, not a 2.5 s pause: on the database clock the holder's
	// heartbeats carried the lease past two lease timeouts after the
	// claim — a lease without them would have expired twice over. (The
	// deadline is a hang guard.)
	var outlived bool
	testenv.WaitFor(t, 30*time.Second, "heartbeats past two lease timeouts", func() bool {
		err := pool.QueryRow(ctx, `SELECT heartbeat_at >= $2::timestamptz + interval '2 seconds' FROM sluice.processed_events WHERE handler = 'h' AND event_id = $1`,
			"e1", claimedAt).Scan(&outlived)
		return err == nil && outlived
	})
	mustKind(t, claimOne(t, b, req("h", "e1", "agg", 1, skip)), claim.InProgress)
	if pctx.Err() != nil {
		t.Fatalf("held context cancelled: %v", context.Cause(pctx))
	}
	stop2()
	if pctx2.Err() == nil || a.Held() != 1 {
		t.Fatal("stop did not cancel and release")
	}

	// The holder stalls (a long GC pause, a frozen VM): its lease expires
	// and owner b takes the event.
	testenv.MustExec(t, pool, `UPDATE sluice.processed_events SET heartbeat_at = now() - interval '1 hour' WHERE event_id = 'e1'`)
	stolen := claimOne(t, b, req("h", "e1", "agg", 1, skip))
	mustKind(t, stolen, claim.Claimed)
	select {
	case <-pctx.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("holder's context not cancelled after its lease was taken")
	}
	if cause := context.Cause(pctx); !errors.Is(cause, registry.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
	if err := a.MarkDone(ctx, res.Lease, claim.Applied()); !errors.Is(err, registry.ErrLeaseLost) {
		t.Fatalf("fencing: %v", err)
	}
	markDone(t, b, stolen.Lease)
	if a.Held() != 0 {
		t.Fatalf("held %d after loss", a.Held())
	}
}

// A restarted worker (same owner, new Registry) reclaims its in-flight rows
// at once; a different owner must wait for the lease to expire.
func TestSameOwnerRestart(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	before := newRegistry(t, pool, "worker-0", registry.Config{})
	res := claimOne(t, before, req("h", "e1", "agg", 1, wait))
	mustKind(t, res, claim.Claimed)
	// The same process asking again does not steal its own claim.
	mustKind(t, claimOne(t, before, req("h", "e1", "agg", 1, wait)), claim.InProgress)

	stranger := newRegistry(t, pool, "worker-1", registry.Config{})
	in := claimOne(t, stranger, req("h", "e1", "agg", 1, wait))
	mustKind(t, in, claim.InProgress)
	if in.Holder != "worker-0" || in.RetryIn < 14*time.Minute {
		t.Fatalf("in progress %+v", in)
	}

	after := newRegistry(t, pool, "worker-0", registry.Config{}) // the restart
	again := claimOne(t, after, req("h", "e1", "agg", 1, wait))
	mustKind(t, again, claim.Claimed)
	if again.Lease.Attempt != 2 {
		t.Fatalf("attempt %d", again.Lease.Attempt)
	}
	mustKind(t, claimOne(t, stranger, req("h", "e1", "agg", 1, wait)), claim.InProgress)
	if err := before.MarkDone(ctx, res.Lease, claim.Applied()); !errors.Is(err, registry.ErrLeaseLost) {
		t.Fatalf("old incarnation: %v", err)
	}
	markDone(t, after, again.Lease)
}

func TestSkipStale(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	r := newRegistry(t, pool, "w", registry.Config{})
	claimDone(t, r, req("proj", "e10", "agg", 10, skip))

	for _, tc := range []struct {
		event string
		seq   int64
	}{{"e10-again", 10}, {"e9", 9}} {
		res := claimOne(t, r, req("proj", tc.event, "agg", tc.seq, skip))
		mustKind(t, res, claim.Stale)
		if res.LastSequence != 10 || res.Outcome == nil || res.Outcome.Result != claim.OutcomeStale {
			t.Fatalf("stale result %+v", res)
		}
		got := row(t, r, "proj", tc.event)
		if got.Status != claim.StatusSkippedStale || got.Attempts != 0 || got.ProcessedAt.IsZero() || got.Outcome == nil || got.Outcome.Result != claim.OutcomeStale {
			t.Fatalf("stale row %+v", got)
		}
		// Recorded: redelivery is STALE without re-evaluation.
		mustKind(t, claimOne(t, r, req("proj", tc.event, "agg", tc.seq, skip)), claim.Stale)
	}
	e12 := claimOne(t, r, req("proj", "e12", "agg", 12, skip)) // across the gap at 11
	mustKind(t, e12, claim.Claimed)
	e11 := claimOne(t, r, req("proj", "e11", "agg", 11, skip)) // not stale: 12 is not finished yet
	mustKind(t, e11, claim.Claimed)
	markDone(t, r, e12.Lease)
	markDone(t, r, e11.Lease)
	// 11 finished after 12: the version stays at 12 (monotonic).
	if last, err := r.LastSequence(ctx, "proj", "agg"); err != nil || last != 12 {
		t.Fatalf("last %d, %v", last, err)
	}
	mustKind(t, claimOne(t, r, req("proj", "e11b", "agg", 11, skip)), claim.Stale)
	// Versions are per handler.
	mustKind(t, claimOne(t, r, req("other-proj", "e9", "agg", 9, skip)), claim.Claimed)
}

// Unguarded (history): an event at or below the aggregate's last finished
// sequence is still claimable, once — on the fast path (no input has a row)
// and on the general path (a batch in which some input has a row) alike —
// while its own row still decides duplicates, leases and retries.
func TestUnguarded(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	r := newRegistry(t, pool, "w", registry.Config{})
	other := newRegistry(t, pool, "other", registry.Config{})
	const h = "projection:history:v1"
	none := claim.Unguarded
	claimDone(t, r, req(h, "e10", "agg", 10, none))
	claimDone(t, r, req(h, "e12", "agg", 12, none))

	// Fast path: a late event (published after 12) is claimed, not STALE.
	late := claimOne(t, r, req(h, "e9", "agg", 9, none))
	mustKind(t, late, claim.Claimed)
	// Its row decides a concurrent delivery: IN_PROGRESS, not a second claim.
	mustKind(t, claimOne(t, other, req(h, "e9", "agg", 9, none)), claim.InProgress)
	markDone(t, r, late.Lease)
	mustKind(t, claimOne(t, other, req(h, "e9", "agg", 9, none)), claim.DuplicateDone)
	if last, err := r.LastSequence(ctx, h, "agg"); err != nil || last != 12 {
		t.Fatalf("last %d, %v (must stay monotonic)", last, err)
	}

	// General path: the batch holds done rows, so the fast path gives way.
	res, err := r.ClaimBatch(ctx, []claim.Request{
		req(h, "e10", "agg", 10, none),    // done
		req(h, "e11", "agg", 11, none),    // late, no row
		req(h, "e11b", "agg", 5, none),    // later still
		req(h, "e13", "agg", 13, none),    // new
		req(h, "e12", "agg", 12, none),    // done
		req(h, "s11", "agg", 11, skip),    // a skip-stale handler of the same name is still guarded
		req("proj", "p1", "agg", 1, skip), // other handlers unaffected
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []claim.Kind{claim.DuplicateDone, claim.Claimed, claim.Claimed, claim.Claimed,
		claim.DuplicateDone, claim.Stale, claim.Claimed}
	for i, k := range want {
		if res[i].Kind != k {
			t.Fatalf("input %d: got %s (%+v), want %s", i, res[i].Kind, res[i], k)
		}
	}
	for _, i := range []int{1, 2, 3} {
		markDone(t, r, res[i].Lease)
		if got := row(t, r, h, res[i].Lease.EventID); got.Status != claim.StatusDone {
			t.Fatalf("row %+v", got)
		}
	}
	// A failed attempt of an unguarded event is retried by its row, not
	// dropped as stale.
	f := claimOne(t, r, req(h, "e7", "agg", 7, none))
	mustKind(t, f, claim.Claimed)
	if fr, err := r.MarkFailed(ctx, f.Lease, claim.Failure{Err: errors.New("es 503"), Retryable: true}); err != nil || fr.Status != claim.StatusFailed {
		t.Fatalf("mark failed %+v %v", fr, err)
	}
	if got := claimOne(t, r, req(h, "e7", "agg", 7, none)); got.Kind != claim.RetryLater && got.Kind != claim.Claimed {
		t.Fatalf("failed unguarded event: %+v", got)
	}
}

func TestWaitForPredecessor(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	r := newRegistry(t, pool, "w", registry.Config{})
	h := "instanceworker"
	for seq := int64(1); seq <= 10; seq++ {
		claimDone(t, r, req(h, fmt.Sprintf("c%d", seq), "agg", seq, wait))
	}
	w := claimOne(t, r, req(h, "c12", "agg", 12, wait))
	mustKind(t, w, claim.Wait)
	if w.LastSequence != 10 || w.HealDue {
		t.Fatalf("wait %+v", w)
	}
	if _, err := r.GetRow(ctx, h, "c12"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("WAIT recorded a row: %v", err)
	}
	c11 := claimOne(t, r, req(h, "c11", "agg", 11, wait))
	mustKind(t, c11, claim.Claimed)
	mustKind(t, claimOne(t, r, req(h, "c12", "agg", 12, wait)), claim.Wait) // 11 not finished
	markDone(t, r, c11.Lease)
	c12 := claimOne(t, r, req(h, "c12", "agg", 12, wait))
	mustKind(t, c12, claim.Claimed)
	markDone(t, r, c12.Lease)
	mustKind(t, claimOne(t, r, req(h, "c5-replay", "agg", 5, wait)), claim.Stale)

	// First command of an aggregate: slot 1 is claimable, slot 3 waits.
	mustKind(t, claimOne(t, r, req(h, "n1", "new-agg", 1, wait)), claim.Claimed)
	mustKind(t, claimOne(t, r, req(h, "m3", "newer-agg", 3, wait)), claim.Wait)

	// A dead or rejected slot finishes it: later commands are not blocked.
	c13 := claimOne(t, r, req(h, "c13", "agg", 13, wait))
	if fr, err := r.MarkFailed(ctx, c13.Lease, claim.Failure{Err: errors.New("validation"), Retryable: false}); err != nil || fr.Status != claim.StatusDead {
		t.Fatalf("mark failed %+v %v", fr, err)
	}
	c14 := claimOne(t, r, req(h, "c14", "agg", 14, wait))
	mustKind(t, c14, claim.Claimed)
	if err := r.MarkDone(ctx, c14.Lease, claim.Rejected("instance missing")); err != nil {
		t.Fatal(err)
	}
	mustKind(t, claimOne(t, r, req(h, "c15", "agg", 15, wait)), claim.Claimed)
}

// Healing: a stalled aggregate reports HealDue after the lease timeout
// (database clock); AdvanceTo finishes empty slots.
func TestWaitHealing(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	r := newRegistry(t, pool, "w", registry.Config{LeaseTimeout: time.Second, HeartbeatInterval: 100 * time.Millisecond})
	h := "instanceworker"
	w := claimOne(t, r, req(h, "c3", "agg", 3, wait))
	mustKind(t, w, claim.Wait)
	if w.HealDue || w.LastSequence != 0 {
		t.Fatalf("%+v", w)
	}
	time.Sleep(1100 * time.Millisecond)
	w = claimOne(t, r, req(h, "c3", "agg", 3, wait))
	mustKind(t, w, claim.Wait)
	if !w.HealDue || w.Stalled < time.Second {
		t.Fatalf("heal not due: %+v", w)
	}
	// The worker reads slots 1..2 from the store: slot 1 holds a command,
	// slot 2 was abandoned (empty).
	claimDone(t, r, req(h, "c1", "agg", 1, wait))
	if last, err := r.AdvanceTo(ctx, h, "agg", 2); err != nil || last != 2 {
		t.Fatalf("advance: %d %v", last, err)
	}
	if last, err := r.AdvanceTo(ctx, h, "agg", 1); err != nil || last != 2 { // monotonic
		t.Fatalf("advance back: %d %v", last, err)
	}
	claimDone(t, r, req(h, "c3", "agg", 3, wait))
}

// Retry path: failures back off on the database clock until max attempts,
// then the row is dead and redelivery does not re-run it; Redrive resets it.
func TestRetryPath(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	const maxAttempts = 3
	r := newRegistry(t, pool, "w", registry.Config{MaxAttempts: maxAttempts, BackoffBase: 400 * time.Millisecond, BackoffCap: 600 * time.Millisecond})
	h := "proj"
	rq := req(h, "e1", "agg", 1, wait)
	res := claimOne(t, r, rq)
	for attempt := 1; attempt < maxAttempts; attempt++ {
		mustKind(t, res, claim.Claimed)
		if res.Lease.Attempt != attempt {
			t.Fatalf("attempt %d, want %d", res.Lease.Attempt, attempt)
		}
		fr, err := r.MarkFailed(ctx, res.Lease, claim.Failure{Err: fmt.Errorf("es 503 #%d", attempt), Retryable: true})
		if err != nil {
			t.Fatal(err)
		}
		// min(cap, base·2^(n−1)) · [0.5, 1): 400ms → [200, 400), then 600ms → [300, 600).
		wantMin := min(600*time.Millisecond, 400*time.Millisecond*time.Duration(1<<(attempt-1))) / 2
		if fr.Status != claim.StatusFailed || fr.Attempt != attempt || fr.RetryIn < wantMin-20*time.Millisecond || fr.RetryIn > 600*time.Millisecond || fr.FirstFailedAt.IsZero() {
			t.Fatalf("fail result %+v (want retry in [%s, 600ms])", fr, wantMin)
		}
		// Not before the backoff: redelivery now is RETRY_LATER.
		later := claimOne(t, r, rq)
		mustKind(t, later, claim.RetryLater)
		if later.LastError != fmt.Sprintf("es 503 #%d", attempt) || later.RetryIn <= 0 || later.Attempt != attempt {
			t.Fatalf("retry later %+v", later)
		}
		time.Sleep(later.RetryIn + 30*time.Millisecond)
		res = claimOne(t, r, rq)
	}
	mustKind(t, res, claim.Claimed)
	fr, err := r.MarkFailed(ctx, res.Lease, claim.Failure{Err: errors.New("es 503 #3"), Retryable: true})
	if err != nil || fr.Status != claim.StatusDead || fr.Attempt != maxAttempts {
		t.Fatalf("last attempt: %+v %v", fr, err)
	}
	// Repeating MarkFailed with the same lease reports, does not change.
	if again, err := r.MarkFailed(ctx, res.Lease, claim.Failure{Err: errors.New("x"), Retryable: true}); err != nil || again.Status != claim.StatusDead {
		t.Fatalf("repeat: %+v %v", again, err)
	}
	for range 5 {
		d := claimOne(t, r, rq)
		mustKind(t, d, claim.Dead)
		if d.Attempt != maxAttempts || d.LastError != "es 503 #3" {
			t.Fatalf("dead %+v", d)
		}
	}
	if last, _ := r.LastSequence(ctx, h, "agg"); last != 1 {
		t.Fatalf("dead slot not finished: last %d", last)
	}
	// Operator redrive.
	if err := r.Redrive(ctx, h, "e1"); err != nil {
		t.Fatal(err)
	}
	red := claimOne(t, r, rq)
	mustKind(t, red, claim.Claimed)
	if red.Lease.Attempt != 1 {
		t.Fatalf("redriven attempt %d", red.Lease.Attempt)
	}
	markDone(t, r, red.Lease)
	if err := r.Redrive(ctx, h, "e1"); !errors.Is(err, registry.ErrNotDead) {
		t.Fatalf("redrive of done: %v", err)
	}
	if err := r.Redrive(ctx, h, "nope"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("redrive of missing: %v", err)
	}

	// Per-handler max attempts and permanent failures.
	p := claimOne(t, r, req(h, "e2", "agg2", 1, skip))
	if fr, err := r.MarkFailed(ctx, p.Lease, claim.Failure{Err: errors.New("mapping"), Retryable: true, MaxAttempts: 1}); err != nil || fr.Status != claim.StatusDead {
		t.Fatalf("max 1: %+v %v", fr, err)
	}
	p = claimOne(t, r, req(h, "e3", "agg3", 1, skip))
	if fr, err := r.MarkFailed(ctx, p.Lease, claim.Failure{Err: errors.New("bad\x00input\xff"), Retryable: false}); err != nil || fr.Status != claim.StatusDead {
		t.Fatalf("permanent: %+v %v", fr, err)
	}
}

func TestRelease(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	a := newRegistry(t, pool, "a", registry.Config{})
	b := newRegistry(t, pool, "b", registry.Config{})
	res := claimOne(t, a, req("h", "e", "agg", 1, wait))
	if err := a.Release(ctx, res.Lease); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, res.Lease); !errors.Is(err, registry.ErrLeaseLost) {
		t.Fatalf("second release: %v", err)
	}
	again := claimOne(t, b, req("h", "e", "agg", 1, wait))
	mustKind(t, again, claim.Claimed)
	if again.Lease.Attempt != 1 {
		t.Fatalf("a release counted as an attempt: %d", again.Lease.Attempt)
	}
	markDone(t, b, again.Lease)
}

// Aggregate ids share a version row exactly when equal after normalisation
// (docs/architecture.md#aggregate-identity): surrounding white space and Unicode form do not matter, case
// and inner characters do.
func TestAggregateNormalisation(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	r := newRegistry(t, pool, "w", registry.Config{})
	h := "instanceworker"
	claimDone(t, r, req(h, "base", "Order-1/é:x", 1, wait))
	for i, tc := range []struct {
		agg  string
		want claim.Kind
	}{
		{"Order-1/é:x", claim.Stale},
		{"  Order-1/é:x\t", claim.Stale},
		{"\u00a0Order-1/e\u0301:x", claim.Stale}, // NBSP trimmed, NFD → NFC
		{"order-1/é:x", claim.Claimed},           // case is significant
		{"Order-1/é: x", claim.Claimed},
		{"Order-1/e:x", claim.Claimed},
		{"Order-1/é:x%", claim.Claimed},
		{"Order-1/é:x ", claim.Stale},
	} {
		res := claimOne(t, r, req(h, fmt.Sprintf("e%d", i), tc.agg, 1, wait))
		if res.Kind != tc.want {
			t.Errorf("%q: %s, want %s", tc.agg, res.Kind, tc.want)
		}
	}
	got := row(t, r, h, "e2")
	if got.AggregateID != "Order-1/é:x" {
		t.Fatalf("stored aggregate id %q not normalised", got.AggregateID)
	}
}

func TestGetAndFormat(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	r := newRegistry(t, pool, "w", registry.Config{})
	claimDone(t, r, req("instanceworker", "cmd-1", "agg", 1, wait))
	res := claimOne(t, r, req("projection:history:v1", "cmd-1", "agg", 1, skip))
	if _, err := r.MarkFailed(ctx, res.Lease, claim.Failure{Err: errors.New("es down"), Retryable: true}); err != nil {
		t.Fatal(err)
	}
	rows, err := r.Get(ctx, "cmd-1")
	if err != nil || len(rows) != 2 {
		t.Fatalf("%v %v", rows, err)
	}
	if rows[0].Handler != "instanceworker" || rows[0].Status != claim.StatusDone || rows[1].Status != claim.StatusFailed || rows[1].LastError != "es down" || rows[1].NextAttemptAt.IsZero() {
		t.Fatalf("rows %+v", rows)
	}
	none, err := r.Get(ctx, "missing")
	if err != nil || none == nil || len(none) != 0 {
		t.Fatalf("missing: %v %v", none, err)
	}
	var buf bytes.Buffer
	if err := registry.FormatRows(&buf, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"instanceworker", "applied", "failed", `"es down"`, "next_attempt_at"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("show output lacks %q:\n%s", want, buf.String())
		}
	}
}

// Prune removes only done and skipped_stale rows older than the retention,
// in bounded batches; the version rows stay, so a pruned event replayed
// later is STALE, not re-run.
func TestPrune(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	r := newRegistry(t, pool, "w", registry.Config{PruneBatch: 3})
	h := "h"
	for i := 1; i <= 7; i++ { // old done
		claimDone(t, r, req(h, fmt.Sprintf("old-done-%d", i), fmt.Sprintf("a%d", i), 1, wait))
	}
	mustKind(t, claimOne(t, r, req(h, "old-stale", "a1", 1, wait)), claim.Stale)
	claimDone(t, r, req(h, "new-done", "b", 1, wait))
	claimOne(t, r, req(h, "old-processing", "c", 1, wait))
	f := claimOne(t, r, req(h, "old-failed", "d", 1, wait))
	if _, err := r.MarkFailed(ctx, f.Lease, claim.Failure{Err: errors.New("x"), Retryable: true}); err != nil {
		t.Fatal(err)
	}
	d := claimOne(t, r, req(h, "old-dead", "e", 1, wait))
	if _, err := r.MarkFailed(ctx, d.Lease, claim.Failure{Err: errors.New("x")}); err != nil {
		t.Fatal(err)
	}
	testenv.MustExec(t, pool, `UPDATE sluice.processed_events
		SET processed_at = now() - interval '8 days', started_at = now() - interval '8 days'
		WHERE event_id LIKE 'old-%'`)
	n, err := r.Prune(ctx, 7*24*time.Hour)
	if err != nil || n != 8 {
		t.Fatalf("pruned %d, %v; want 8", n, err)
	}
	var left []string
	rows, err := pool.Query(ctx, `SELECT event_id FROM sluice.processed_events ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		left = append(left, s)
	}
	if got := strings.Join(left, ","); got != "new-done,old-dead,old-failed,old-processing" {
		t.Fatalf("left %s", got)
	}
	mustKind(t, claimOne(t, r, req(h, "old-done-1", "a1", 1, wait)), claim.Stale)
	if _, err := r.Prune(ctx, 0); !errors.Is(err, registry.ErrInvalidRequest) {
		t.Fatalf("zero retention: %v", err)
	}
}

func TestCheck(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	r := newRegistry(t, pool, "w", registry.Config{})
	if err := r.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	// An unmigrated database is not ready, and says why.
	url := testenv.NewDatabase(t)
	empty, err := pgxpoolNew(url)
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	r2 := newRegistry(t, empty, "w", registry.Config{})
	if err := r2.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "migrate") || errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("unmigrated: %v", err)
	}
}
