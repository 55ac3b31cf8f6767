package eventstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/shared/backoff"
	"github.com/sluicehq/sluice/shared/envelope"
)

// item is one envelope on its way through the committer.
type item struct {
	ctx          context.Context
	idx          int
	env          envelope.Envelope // prepared (normalised, defaults, valid)
	explicitTime bool              // the caller set occurred_at
	hash         [32]byte          // canonical SHA-256
	tmpl         lineTemplate
	slot         bool   // postgres allocator: a domain event into its command's slot
	slotKey      string // (aggregate, sequence, kind) when the caller chose the sequence
	shard        int    // ShardOf its aggregate
	arrived      time.Time
	stream       bool // arrived within GroupCommitLinger of the appends before it (committer.gather)

	done      chan struct{}
	res       Result
	followers []*item // identical appends of the same event_id that share res
	unit      *unit   // the atomic batch (AppendBatch) this item belongs to, or nil

	// set by the group worker, read by the committer after the group is done
	requeue   bool
	notBefore time.Time
	waits     int

	// reservation outcome (reset per attempt)
	seq, pos int64
	stored   *indexRow // committed row of this event_id (idempotent hit)
	mismatch *IdempotencyMismatchError
	moved    *indexRow // abandoned row of this event_id, replaced by this append's fresh reservation
	resolve  string    // segment key of a dead reservation to settle first
}

func (s *Store) newItem(ctx context.Context, e envelope.Envelope) (*item, error) {
	explicit := !e.OccurredAt.IsZero()
	p, err := envelope.Prepare(e, s.cfg.Limits, s.hooks.now)
	if err != nil {
		return nil, err
	}
	if p.Position != 0 {
		return nil, &envelope.ValidationError{Code: envelope.CodeInvalid, Field: "position", Limit: "assigned by the store",
			Reason: "is assigned by the store and must not be set at append"}
	}
	it := &item{ctx: ctx, env: p, explicitTime: explicit, done: make(chan struct{}), shard: ShardOf(p.AggregateType, p.AggregateID, s.shards)}
	if s.cfg.allocatorOff() {
		if p.SequenceNumber == 0 {
			return nil, &envelope.ValidationError{Code: envelope.CodeInvalid, Field: "sequence_number", Limit: "required (allocator off)",
				Reason: "is required when EVENT_STORE_SEQUENCE_ALLOCATOR_MODE=off"}
		}
	} else if p.SequenceNumber != 0 {
		if p.Kind != envelope.KindDomain {
			return nil, &envelope.ValidationError{Code: envelope.CodeInvalid, Field: "sequence_number", Limit: "assigned by the store",
				Reason: "is assigned by the store for commands (only a domain event names the slot of its command)"}
		}
		it.slot = true
	}
	if p.SequenceNumber != 0 {
		it.slotKey = slotKeyOf(p.AggregateType, p.AggregateID, p.SequenceNumber, p.Kind)
	}
	// One encoding of the data for both (issue 34); an error here cannot
	// happen after Prepare (it checked data, metadata and occurred_at).
	if it.tmpl, it.hash, err = newLineTemplateHash(p); err != nil {
		return nil, err
	}
	if err := s.checkLineSize(it.tmpl); err != nil {
		return nil, err
	}
	return it, nil
}

// checkLineSize refuses an envelope whose stored line could exceed
// EVENT_STORE_MAX_ENVELOPE_BYTES once the store adds sequence_number and
// position (issue 21 item 4): the limit bounds the line every consumer
// reads, not the envelope as the producer sent it. The bound takes both
// numbers at their widest, so the answer does not depend on the position
// the envelope would get.
func (s *Store) checkLineSize(t lineTemplate) error {
	limit := s.cfg.MaxEnvelopeBytes
	if n := t.maxLine(); n > limit {
		return &envelope.ValidationError{Code: envelope.CodeLimitExceeded, Limit: strconv.Itoa(limit) + " bytes",
			Reason: fmt.Sprintf("envelope of %d bytes as stored (with sequence_number and position, %d bytes for them at their widest) exceeds the limit of %d bytes",
				n, len(sentinelMarker)-1, limit)}
	}
	return nil
}

// hashWithTime is the canonical hash of the item's envelope as if its
// occurred_at were t, when the caller did not set occurred_at (the store's
// default must not make a retry look different, docs/eventstore.md#append-protocol-group-commit step 2).
func (it *item) hashWithTime(t envelope.Timestamp) [32]byte {
	if it.explicitTime || t.Time().Equal(it.env.OccurredAt.Time()) {
		return it.hash
	}
	e := it.env
	e.OccurredAt = t
	h, err := envelope.CanonicalHash(e)
	if err != nil {
		return it.hash
	}
	return h
}

func (it *item) resetOutcome() {
	it.seq, it.pos = 0, 0
	it.stored, it.mismatch, it.moved, it.resolve = nil, nil, nil, ""
	it.requeue = false
	it.res = Result{}
}

// waitDelay is the delay before an item's retry n while it waits for
// another writer: 5 ms doubling to 320 ms (shared/backoff).
func waitDelay(n int) time.Duration {
	return backoff.Policy{Base: 5 * time.Millisecond, Cap: 320 * time.Millisecond}.Delay(n)
}

// backoff schedules a retry of an item waiting for another writer.
func (it *item) backoff(now time.Time) {
	d := waitDelay(it.waits)
	it.waits++
	it.requeue = true
	it.notBefore = now.Add(d)
}
