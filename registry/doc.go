// Package registry provides sluice's processed-event registry and
// per-aggregate sequence guard (docs/registry.md), on Postgres tables
// sluice.processed_events and sluice.aggregate_versions
// (migrations/00014_registry.sql).
//
// Every worker passes it before any side effect:
//
//	res, err := reg.Claim(ctx, claim.Request{Handler: h, EventID: id,
//		AggregateID: agg, Seq: seq, Policy: claim.WaitForPredecessor})
//	// errors.Is(err, registry.ErrUnavailable): pause, do not commit, retry.
//	switch res.Kind {
//	case claim.Claimed:
//		pctx, stop := reg.Hold(ctx, res.Lease) // heartbeats; cancelled if the lease is lost
//		outcome, perr := process(pctx)          // the side effect
//		stop()
//		if perr != nil { reg.MarkFailed(ctx, res.Lease, claim.Failure{...}) } else {
//			reg.MarkDone(ctx, res.Lease, outcome) } // then commit the offset
//	case claim.DuplicateDone, claim.Stale:  // acknowledge without effect
//	case claim.InProgress, claim.RetryLater, claim.Wait: // retry later, do not commit past it
//	case claim.Dead:                           // already dead-lettered
//	}
//
// The guarantees it keeps:
//
//   - at most one side effect per event_id, per handler (docs/architecture.md#at-most-one-side-effect): the
//     primary key (handler, event_id) is the gate. A claim is one
//     transaction; only the holder of the current lease token can mark the
//     row done or failed (fencing, ErrLeaseLost), and a holder whose lease
//     was taken learns it from its heartbeat, which cancels its processing
//     context (Hold). Leases are timed on the database clock only: every
//     "now" in the lease, backoff and stall arithmetic is Postgres's, never
//     the worker's.
//   - per-aggregate order (docs/architecture.md#per-aggregate-order): sluice.aggregate_versions holds the
//     highest finished sequence per (handler, aggregate); a per-(handler,
//     aggregate) advisory lock serialises the guard. Under SkipStale an
//     event at or below it is STALE; under WaitForPredecessor only the next
//     slot may run and later ones WAIT; Unguarded (per-event side effects
//     such as history, which have no "newer state" to protect) has no
//     guard. A done or dead row finishes its slot
//     (the version advances monotonically in the same transaction), so later
//     events are never blocked forever; AdvanceTo finishes empty slots when a
//     worker heals a gap.
//   - an outage pauses (docs/architecture.md#explicit-failure): every method reports an unreachable
//     Postgres as an error matching ErrUnavailable (*UnavailableError),
//     distinct from logic errors, so callers pause without side effects,
//     dead letters or commits; Check is the readiness probe.
//
// Throughput (docs/architecture.md#observability): ClaimBatch, MarkDoneBatch and the heartbeats of
// Hold cost one Postgres round trip for any number of events; a batch of
// first deliveries takes the claim's fast path (docs/registry.md, "Where the
// time goes").
//
// docs/registry.md is the operator guide: states, outcomes, policies,
// healing, knobs and runbooks.
package registry
