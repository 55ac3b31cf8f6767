package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/pgarray"
)

// claimSQL runs sluice.registry_claim_batch (migrations/00014_registry.sql): all claims
// of a call in one statement, one transaction, one round trip. The lease
// tokens are generated here (one per input, used only if it is claimed).
const claimSQL = `SELECT idx, kind, attempt, holder, last_sequence,
       not_before, wait_us, stalled_us, outcome, last_error
FROM sluice.registry_claim_batch($1::text[], $2::text[], $3::text[], $4::bigint[], $5::boolean[],
                                 $6::uuid[], $7::text, $8::text::uuid, $9::bigint)`

// Claim claims one event for one handler (docs/registry.md#claim-results): the same as ClaimBatch
// with one request. See Kind for what each result asks the caller to do.
func (r *Registry) Claim(ctx context.Context, req claim.Request) (claim.Result, error) {
	res, err := r.ClaimBatch(ctx, []claim.Request{req})
	if err != nil {
		return claim.Result{}, err
	}
	return res[0], nil
}

// ClaimBatch claims many events in one Postgres round trip and one
// transaction; result i answers reqs[i]. The results are those of calling
// Claim for each request in slice order: several events of one aggregate
// are evaluated in order against the same last finished sequence (claiming
// does not advance it; only MarkDone and a dead row do), so under
// WaitForPredecessor with last = 4 the events 5 and 6 give CLAIMED and WAIT,
// and under SkipStale both are CLAIMED. A repeated (handler, event_id) in one
// batch gets its first occurrence's result, except that a CLAIMED first
// occurrence makes the repeats IN_PROGRESS.
//
// The per-(handler, aggregate) advisory locks of the batch are taken in one
// global order, so concurrent batches cannot deadlock. An invalid request
// fails the whole call with a *RequestError before anything is sent.
func (r *Registry) ClaimBatch(ctx context.Context, reqs []claim.Request) ([]claim.Result, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	b, err := newClaimBatch(reqs)
	if err != nil {
		return nil, err
	}
	instance := r.currentInstance()
	tokens := newTokens(len(b.handlers))
	uniq := make([]claim.Result, len(b.handlers))
	err = r.run(ctx, "claim", func(ctx context.Context) error {
		rows, err := r.pool.Query(ctx, claimSQL, b.handlers, b.eventIDs, b.aggregates, b.seqs, b.waits, pgarray.UUID(tokens),
			r.cfg.Owner, instance, r.cfg.LeaseTimeout.Microseconds())
		if err != nil {
			return err
		}
		defer rows.Close()
		n := 0
		var row claimRow
		for rows.Next() {
			p, res, err := r.scanClaim(rows, &row, len(uniq))
			if err != nil {
				return err
			}
			if res.Kind == claim.Claimed {
				res.Holder = r.cfg.Owner
				res.Lease = claim.Lease{Handler: b.handlers[p], EventID: b.eventIDs[p], Token: formatUUID(tokens[p].Bytes), Attempt: res.Attempt}
			}
			uniq[p] = res
			n++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if n != len(uniq) {
			return fmt.Errorf("claim returned %d results for %d requests", n, len(uniq))
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrUnavailable) && ambiguous(err) {
			r.rotateInstance(instance)
		}
		return nil, err
	}
	return b.results(uniq, r.cfg.Owner), nil
}

// claimBatch is a ClaimBatch call's requests as sent: the arrays of the
// distinct (handler, event_id) pairs, in first-occurrence order.
type claimBatch struct {
	pos        []int // per request: its index in the arrays, or -1-j for a repeat of request j
	handlers   pgarray.Text
	eventIDs   pgarray.Text
	aggregates pgarray.Text
	seqs       pgarray.Int8
	waits      pgarray.NullBool // NULL: Unguarded
}

// newClaimBatch validates the requests and folds the repeats of a
// (handler, event_id); a repeat that differs from its first is invalid.
func newClaimBatch(reqs []claim.Request) (claimBatch, error) {
	type key struct{ handler, eventID string }
	firstOf := make(map[key]int, len(reqs))
	b := claimBatch{
		pos:        make([]int, len(reqs)),
		handlers:   make(pgarray.Text, 0, len(reqs)),
		eventIDs:   make(pgarray.Text, 0, len(reqs)),
		aggregates: make(pgarray.Text, 0, len(reqs)),
		seqs:       make(pgarray.Int8, 0, len(reqs)),
		waits:      make(pgarray.NullBool, 0, len(reqs)),
	}
	for i, q := range reqs {
		agg, err := validateClaim(i, q)
		if err != nil {
			return claimBatch{}, err
		}
		k := key{q.Handler, q.EventID}
		if j, ok := firstOf[k]; ok {
			p := b.pos[j]
			if b.aggregates[p] != agg || b.seqs[p] != q.Seq || reqs[j].Policy != q.Policy {
				return claimBatch{}, &claim.RequestError{Index: i, Field: "event_id", Reason: fmt.Sprintf("event %q appears twice in the batch with different aggregate, sequence or policy", q.EventID)}
			}
			b.pos[i] = -1 - j
			continue
		}
		firstOf[k] = i
		b.pos[i] = len(b.handlers)
		b.handlers = append(b.handlers, q.Handler)
		b.eventIDs = append(b.eventIDs, q.EventID)
		b.aggregates = append(b.aggregates, agg)
		b.seqs = append(b.seqs, q.Seq)
		b.waits = append(b.waits, pgtype.Bool{Bool: q.Policy == claim.WaitForPredecessor, Valid: q.Policy != claim.Unguarded})
	}
	return b, nil
}

// results spreads the results of the distinct pairs over the requests: a
// repeat gets its first's result, IN_PROGRESS (held by owner) where the
// first was CLAIMED.
func (b claimBatch) results(uniq []claim.Result, owner string) []claim.Result {
	out := make([]claim.Result, len(b.pos))
	for i, p := range b.pos {
		if p >= 0 {
			out[i] = uniq[p]
			continue
		}
		first := out[-1-p]
		if first.Kind == claim.Claimed {
			first = claim.Result{Kind: claim.InProgress, Attempt: first.Attempt, Holder: owner, LastSequence: first.LastSequence}
		}
		out[i] = first
	}
	return out
}

// claimRow holds the columns of one row of claimSQL as scanned: one per
// call reused for every row, instead of ten variables that escape to the
// heap on every row.
type claimRow struct {
	idx               int32
	kind              string
	holder, lerr      pgtype.Text
	attempt           pgtype.Int4
	last              int64
	notBefore         pgtype.Timestamptz
	waitUS, stalledUS pgtype.Int8
	outcome           []byte
}

// scanClaim reads one row of claimSQL into row: the index p of the pair
// it answers (of n) and its result, without the lease of a CLAIMED one.
func (r *Registry) scanClaim(rows pgx.Rows, row *claimRow, n int) (p int, res claim.Result, err error) {
	*row = claimRow{outcome: row.outcome[:0]}
	if err := rows.Scan(&row.idx, &row.kind, &row.attempt, &row.holder, &row.last, &row.notBefore, &row.waitUS, &row.stalledUS, &row.outcome, &row.lerr); err != nil {
		return 0, claim.Result{}, err
	}
	idx, kind, holder, lerr, attempt, last := row.idx, row.kind, row.holder, row.lerr, row.attempt, row.last
	notBefore, waitUS, stalledUS, outcome := row.notBefore, row.waitUS, row.stalledUS, row.outcome
	if idx < 1 || int(idx) > n {
		return 0, claim.Result{}, fmt.Errorf("claim result index %d out of range", idx)
	}
	k, err := parseKind(kind)
	if err != nil {
		return 0, claim.Result{}, err
	}
	res = claim.Result{
		Kind:         k,
		Attempt:      int(attempt.Int32),
		Holder:       holder.String,
		LastSequence: last,
		LastError:    lerr.String,
	}
	if notBefore.Valid {
		res.NotBefore = notBefore.Time
	}
	if waitUS.Valid {
		res.RetryIn = time.Duration(max(waitUS.Int64, 0)) * time.Microsecond
	}
	if stalledUS.Valid {
		res.Stalled = time.Duration(max(stalledUS.Int64, 0)) * time.Microsecond
		res.HealDue = k == claim.Wait && res.Stalled >= r.cfg.LeaseTimeout
	}
	if res.Outcome, err = decodeOutcome(outcome); err != nil {
		return 0, claim.Result{}, err
	}
	return int(idx - 1), res, nil
}

// validateClaim checks a request and returns its normalised aggregate id.
func validateClaim(i int, q claim.Request) (string, error) {
	if err := validateKey(i, q.Handler, q.EventID); err != nil {
		return "", err
	}
	agg, err := envelope.NormalizeAggregateID(q.AggregateID)
	if err != nil {
		return "", &claim.RequestError{Index: i, Field: "aggregate_id", Reason: err.Error(), Err: err}
	}
	if q.Seq < 1 {
		return "", &claim.RequestError{Index: i, Field: "seq", Reason: fmt.Sprintf("sequence %d must be at least 1", q.Seq)}
	}
	if !q.Policy.Valid() {
		return "", &claim.RequestError{Index: i, Field: "policy", Reason: fmt.Sprintf("%s is not SkipStale, WaitForPredecessor or Unguarded", q.Policy)}
	}
	return agg, nil
}

// validateKey checks a handler name and an event id.
func validateKey(i int, handler, eventID string) error {
	for _, f := range []struct{ name, v string }{{"handler", handler}, {"event_id", eventID}} {
		switch {
		case f.v == "":
			return &claim.RequestError{Index: i, Field: f.name, Reason: "must not be empty"}
		case len(f.v) > maxIDBytes:
			return &claim.RequestError{Index: i, Field: f.name, Reason: fmt.Sprintf("is %d bytes; the limit is %d", len(f.v), maxIDBytes)}
		case !cleanID(f.v):
			return &claim.RequestError{Index: i, Field: f.name, Reason: "must be valid UTF-8 without control characters"}
		}
	}
	return nil
}

// validateLease checks a lease before a fenced write.
func validateLease(i int, l claim.Lease) error {
	if err := validateKey(i, l.Handler, l.EventID); err != nil {
		return err
	}
	if !validUUID(l.Token) {
		return &claim.RequestError{Index: i, Field: "lease_token", Reason: fmt.Sprintf("%q is not a lease token from Claim", l.Token)}
	}
	return nil
}
