package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
)

// ClaimBatch has the semantics of Claim called for each request in order:
// every case runs once through Claim and once through ClaimBatch (on its own
// handler name, same set-up), and both must give the expected results.
func TestClaimBatchEqualsClaim(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	r := newRegistry(t, pool, "me", registry.Config{BackoffBase: time.Minute, BackoffCap: time.Minute})
	other := newRegistry(t, pool, "someone-else", registry.Config{})

	K := struct{ C, D, I, S, W, X, R claim.Kind }{claim.Claimed, claim.DuplicateDone, claim.InProgress, claim.Stale, claim.Wait, claim.Dead, claim.RetryLater}
	type tcase struct {
		name  string
		setup func(t *testing.T, h string)
		reqs  func(h string) []claim.Request
		want  []claim.Kind
	}
	cases := []tcase{
		{
			name: "fresh aggregates",
			reqs: func(h string) []claim.Request {
				return []claim.Request{req(h, "a1", "A", 1, wait), req(h, "b3", "B", 3, wait), req(h, "c5", "C", 5, skip), req(h, "d1", "D", 1, skip)}
			},
			want: []claim.Kind{K.C, K.W, K.C, K.C},
		},
		{
			name:  "wait: 5, 6, 7 of one aggregate with last 4",
			setup: func(t *testing.T, h string) { advance(t, r, h, "A", 4) },
			reqs: func(h string) []claim.Request {
				return []claim.Request{req(h, "e5", "A", 5, wait), req(h, "e6", "A", 6, wait), req(h, "e7", "A", 7, wait), req(h, "e4", "A", 4, wait)}
			},
			want: []claim.Kind{K.C, K.W, K.W, K.S},
		},
		{
			name:  "wait: out of order in the batch",
			setup: func(t *testing.T, h string) { advance(t, r, h, "A", 4) },
			reqs: func(h string) []claim.Request {
				return []claim.Request{req(h, "e6", "A", 6, wait), req(h, "e5", "A", 5, wait)}
			},
			want: []claim.Kind{K.W, K.C},
		},
		{
			name:  "skip-stale: 5, 6 and 3 of one aggregate with last 4",
			setup: func(t *testing.T, h string) { advance(t, r, h, "A", 4) },
			reqs: func(h string) []claim.Request {
				return []claim.Request{req(h, "e5", "A", 5, skip), req(h, "e6", "A", 6, skip), req(h, "e3", "A", 3, skip)}
			},
			want: []claim.Kind{K.C, K.C, K.S},
		},
		{
			name: "existing rows in every state",
			setup: func(t *testing.T, h string) {
				claimDone(t, r, req(h, "done", "A", 1, wait))
				mustKind(t, claimOne(t, r, req(h, "stale", "A", 1, wait)), claim.Stale)
				x := claimOne(t, r, req(h, "dead", "X", 1, skip))
				if _, err := r.MarkFailed(ctx, x.Lease, claim.Failure{Err: errors.New("permanent")}); err != nil {
					t.Fatal(err)
				}
				mustKind(t, claimOne(t, other, req(h, "theirs", "P", 1, skip)), claim.Claimed)
				f := claimOne(t, r, req(h, "failed", "F", 1, skip))
				if _, err := r.MarkFailed(ctx, f.Lease, claim.Failure{Err: errors.New("503"), Retryable: true}); err != nil {
					t.Fatal(err)
				}
			},
			reqs: func(h string) []claim.Request {
				return []claim.Request{
					req(h, "done", "A", 1, wait), req(h, "stale", "A", 1, wait), req(h, "dead", "X", 1, skip),
					req(h, "theirs", "P", 1, skip), req(h, "failed", "F", 1, skip), req(h, "new", "A", 2, wait),
				}
			},
			want: []claim.Kind{K.D, K.S, K.X, K.I, K.R, K.C},
		},
		{
			// A row takes precedence over the guard: e6 was claimed by another
			// owner (skip-stale) while the aggregate is at 4, so under
			// wait-for-predecessor it is IN_PROGRESS, not WAIT; the new
			// events of the batch are still claimed (the claim's fast path
			// for new events is undone and the general path decides).
			name: "wait-for-predecessor input that already has a row",
			setup: func(t *testing.T, h string) {
				advance(t, r, h, "A", 4)
				mustKind(t, claimOne(t, other, req(h, "e6", "A", 6, skip)), claim.Claimed)
			},
			reqs: func(h string) []claim.Request {
				return []claim.Request{req(h, "a5", "A", 5, wait), req(h, "e6", "A", 6, wait), req(h, "z1", "Z", 1, wait), req(h, "b7", "A", 7, wait)}
			},
			want: []claim.Kind{K.C, K.I, K.C, K.W},
		},
		{
			// The existing row sorts last: every new event before it was
			// inserted by the fast path before the conflict; none may be
			// left behind or claimed twice.
			name: "existing row last in key order",
			setup: func(t *testing.T, h string) {
				claimDone(t, r, req(h, "zz-done", "Q", 1, skip))
			},
			reqs: func(h string) []claim.Request {
				out := []claim.Request{req(h, "zz-done", "Q", 1, skip)}
				for i := range 20 {
					out = append(out, req(h, fmt.Sprintf("a%02d", i), fmt.Sprintf("n%d", i), 1, skip))
				}
				return out
			},
			want: func() []claim.Kind {
				out := []claim.Kind{K.D}
				for range 20 {
					out = append(out, K.C)
				}
				return out
			}(),
		},
		{
			name: "repeated event in one batch",
			reqs: func(h string) []claim.Request {
				return []claim.Request{req(h, "e", "A", 1, wait), req(h, "e", "A", 1, wait), req(h, "f", "B", 1, wait), req(h, "e", " A ", 1, wait)}
			},
			want: []claim.Kind{K.C, K.I, K.C, K.I},
		},
		{
			name: "100 events over 10 aggregates",
			reqs: func(h string) []claim.Request {
				var out []claim.Request
				for i := range 100 {
					out = append(out, req(h, fmt.Sprintf("e%d", i), fmt.Sprintf("agg-%d", i%10), int64(i/10+1), wait))
				}
				return out
			},
			want: func() []claim.Kind {
				out := make([]claim.Kind, 100)
				for i := range out {
					out[i] = K.W
					if i < 10 {
						out[i] = K.C
					}
				}
				return out
			}(),
		},
	}
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hs, hb := fmt.Sprintf("case%d-one", ci), fmt.Sprintf("case%d-batch", ci)
			if tc.setup != nil {
				tc.setup(t, hs)
				tc.setup(t, hb)
			}
			var one []claim.Result
			for _, q := range tc.reqs(hs) {
				one = append(one, claimOne(t, r, q))
			}
			batch, err := r.ClaimBatch(ctx, tc.reqs(hb))
			if err != nil {
				t.Fatal(err)
			}
			if len(batch) != len(tc.want) || len(one) != len(tc.want) {
				t.Fatalf("%d and %d results for %d requests", len(one), len(batch), len(tc.want))
			}
			for i, want := range tc.want {
				o, b := one[i], batch[i]
				if o.Kind != want || b.Kind != want {
					t.Errorf("request %d: Claim %s, ClaimBatch %s, want %s", i, o.Kind, b.Kind, want)
				}
				if o.Attempt != b.Attempt || o.LastSequence != b.LastSequence || o.Holder != b.Holder || o.LastError != b.LastError {
					t.Errorf("request %d differs:\n one   %+v\n batch %+v", i, o, b)
				}
				if b.Kind == claim.Claimed && (b.Lease.Token == "" || b.Lease.EventID != tc.reqs(hb)[i].EventID) {
					t.Errorf("request %d: lease %+v", i, b.Lease)
				}
			}
			// The lease each CLAIMED result carries is the row's: it marks
			// the row done (fencing accepts it), and tokens are distinct.
			tokens := map[string]bool{}
			for i, b := range batch {
				if b.Kind != claim.Claimed || tokens[b.Lease.Token] {
					if b.Kind == claim.Claimed {
						t.Errorf("request %d: token %s handed out twice", i, b.Lease.Token)
					}
					continue
				}
				tokens[b.Lease.Token] = true
				if got := row(t, r, hb, b.Lease.EventID); got.LeaseToken != b.Lease.Token || got.Attempts != b.Attempt {
					t.Errorf("request %d: row has token %s attempt %d, result %s attempt %d", i, got.LeaseToken, got.Attempts, b.Lease.Token, b.Attempt)
				}
			}
		})
	}
}

func advance(t *testing.T, r *registry.Registry, h, agg string, seq int64) {
	t.Helper()
	if _, err := r.AdvanceTo(context.Background(), h, agg, seq); err != nil {
		t.Fatal(err)
	}
}

func TestMarkDoneBatch(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	r := newRegistry(t, pool, "me", registry.Config{})
	var reqs []claim.Request
	for i := range 50 {
		reqs = append(reqs, req("h", fmt.Sprintf("e%d", i), fmt.Sprintf("agg-%d", i%5), int64(i/5+1), skip))
	}
	res, err := r.ClaimBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	items := make([]claim.Done, len(res))
	for i, c := range res {
		mustKind(t, c, claim.Claimed)
		items[i] = claim.Done{Lease: c.Lease, Outcome: claim.Applied()}
	}
	// One lease is forged: only it fails.
	items[7].Lease.Token = "00000000-0000-4000-8000-000000000000"
	errs, err := r.MarkDoneBatch(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if (i == 7) != errors.Is(e, registry.ErrLeaseLost) {
			t.Fatalf("item %d: %v", i, e)
		}
	}
	for a := range 5 {
		last, err := r.LastSequence(ctx, "h", fmt.Sprintf("agg-%d", a))
		if err != nil || last != 10 {
			t.Fatalf("agg-%d last %d %v", a, last, err)
		}
	}
	if got := row(t, r, "h", "e7"); got.Status != claim.StatusProcessing {
		t.Fatalf("forged lease changed the row: %+v", got)
	}
	// An old and the current lease of one event in one batch: only the
	// current one counts.
	old := claimOne(t, r, req("h", "x", "agg-x", 1, skip))
	if err := r.Release(ctx, old.Lease); err != nil {
		t.Fatal(err)
	}
	cur := claimOne(t, r, req("h", "x", "agg-x", 1, skip))
	errs, err = r.MarkDoneBatch(ctx, []claim.Done{{Lease: old.Lease, Outcome: claim.Applied()}, {Lease: cur.Lease, Outcome: claim.Applied()}})
	if err != nil || !errors.Is(errs[0], registry.ErrLeaseLost) || errs[1] != nil {
		t.Fatalf("old and current lease: %v %v", errs, err)
	}
	hb, err := r.HeartbeatBatch(ctx, []claim.Lease{old.Lease, cur.Lease})
	if err != nil || !errors.Is(hb[0], registry.ErrLeaseLost) || !errors.Is(hb[1], registry.ErrLeaseLost) {
		t.Fatalf("heartbeat after done: %v %v", hb, err)
	}

	// The same lease twice in one batch, once in upper case: both done.
	dup := claimOne(t, r, req("h", "dup", "agg-dup", 1, skip))
	upper := dup.Lease
	upper.Token = strings.ToUpper(upper.Token)
	errs, err = r.MarkDoneBatch(ctx, []claim.Done{{Lease: dup.Lease, Outcome: claim.Applied()}, {Lease: upper, Outcome: claim.Rejected("twice")}})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("same lease twice: %v %v", errs, err)
	}
	if got := row(t, r, "h", "dup"); got.Status != claim.StatusDone {
		t.Fatalf("dup row %+v", got)
	}

	// Retrying the whole batch after a lost reply is harmless.
	items[7].Lease = res[7].Lease
	errs, err = r.MarkDoneBatch(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("retry item %d: %v", i, e)
		}
	}
}

// docs/architecture.md#observability: a batch costs O(1) round trips, not one per event. Counted twice:
// statements (a pgx tracer) and network round trips (a proxy between the
// pool and the server).
func TestBatchRoundTrips(t *testing.T) {
	counter := &queryCounter{}
	url, _ := testenv.NewMigratedDatabase(t)
	p, cfg := newProxy(t, url)
	cfg.ConnConfig.Tracer = counter
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()
	r := newRegistry(t, pool, "me", registry.Config{})
	batch := func(prefix string, n int) []claim.Request {
		var out []claim.Request
		for i := range n {
			out = append(out, req("h", fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("%s-agg-%d", prefix, i), 1, wait))
		}
		return out
	}
	claimAndDone := func(reqs []claim.Request) (claimQ, claimRT, doneQ, doneRT int64) {
		q0, t0 := counter.n.Load(), p.Turns()
		res, err := r.ClaimBatch(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		q1, t1 := counter.n.Load(), p.Turns()
		items := make([]claim.Done, len(res))
		for i, c := range res {
			mustKind(t, c, claim.Claimed)
			items[i] = claim.Done{Lease: c.Lease, Outcome: claim.Applied()}
		}
		if errs, err := r.MarkDoneBatch(ctx, items); err != nil || errors.Join(errs...) != nil {
			t.Fatal(err, errs)
		}
		return q1 - q0, t1 - t0, counter.n.Load() - q1, p.Turns() - t1
	}
	claimAndDone(batch("warm", 3)) // prepares the statements on the connection

	cq, crt, dq, drt := claimAndDone(batch("b", 100))
	t.Logf("batch of 100: claim %d statements / %d round trips; mark done %d / %d", cq, crt, dq, drt)
	// mark done is one pipelined request: set_config(enable_seqscan) and
	// the statement (probeQuery)
	if cq != 1 || dq != 2 || crt > 2 || drt > 2 {
		t.Fatalf("a batch of 100 took claim %d/%d, mark done %d/%d (statements/round trips); want 1 and 2 statements and at most 2 round trips each", cq, crt, dq, drt)
	}

	q0, t0 := counter.n.Load(), p.Turns()
	for _, q := range batch("single", 100) {
		res := claimOne(t, r, q)
		markDone(t, r, res.Lease)
	}
	pq, prt := counter.n.Load()-q0, p.Turns()-t0
	t.Logf("100 events one by one: %d statements / %d round trips", pq, prt)
	if pq < 200 || prt < 200 {
		t.Fatalf("per-event path: %d statements, %d round trips", pq, prt)
	}

	// Heartbeats of many held claims: one request per tick.
	res, err := r.ClaimBatch(ctx, batch("held", 50))
	if err != nil {
		t.Fatal(err)
	}
	leases := make([]claim.Lease, len(res))
	for i, c := range res {
		leases[i] = c.Lease
	}
	q0, t0 = counter.n.Load(), p.Turns()
	errs, err := r.HeartbeatBatch(ctx, leases)
	if err != nil || errors.Join(errs...) != nil {
		t.Fatal(err, errs)
	}
	if q, rt := counter.n.Load()-q0, p.Turns()-t0; q != 2 || rt > 2 {
		t.Fatalf("heartbeat of 50: %d statements, %d round trips", q, rt)
	}
}
