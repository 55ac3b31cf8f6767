package eventstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/shared/envelope"
)

// ExpectKind is the kind of an atomic batch's precondition (AppendBatch).
type ExpectKind int

// Preconditions of an atomic batch on its aggregate's last sequence.
const (
	// ExpectAny: no precondition.
	ExpectAny ExpectKind = iota
	// ExpectNoStream: the aggregate has no sequence yet (last sequence 0).
	ExpectNoStream
	// ExpectExists: the aggregate has at least one sequence.
	ExpectExists
	// ExpectSequence: the last sequence equals Expectation.Seq.
	ExpectSequence
)

// Expectation is an atomic batch's optimistic-concurrency precondition,
// checked against the aggregate's last sequence inside the reservation
// transaction (with the aggregate's sequence row locked).
type Expectation struct {
	Kind ExpectKind
	Seq  int64 // ExpectSequence only
}

// holds reports whether the aggregate's last sequence cur meets e.
func (e Expectation) holds(cur int64) bool {
	switch e.Kind {
	case ExpectNoStream:
		return cur == 0
	case ExpectExists:
		return cur > 0
	case ExpectSequence:
		return cur == e.Seq
	default:
		return true
	}
}

// String is "any", "no_stream", "exists" or the sequence number.
func (e Expectation) String() string {
	switch e.Kind {
	case ExpectNoStream:
		return "no_stream"
	case ExpectExists:
		return "exists"
	case ExpectSequence:
		return strconv.FormatInt(e.Seq, 10)
	default:
		return "any"
	}
}

// BatchConflictError is an atomic batch's precondition failure (HTTP 409):
// nothing of the batch was written.
type BatchConflictError struct {
	AggregateType string
	AggregateID   string
	Expected      Expectation
	ActualSeq     int64
}

func (e *BatchConflictError) Error() string {
	return fmt.Sprintf("eventstore: optimistic concurrency conflict on %s %q: expected %s, actual_seq %d",
		e.AggregateType, e.AggregateID, e.Expected, e.ActualSeq)
}

// HTTPStatus is 409.
func (e *BatchConflictError) HTTPStatus() int { return 409 }

// BatchAbortedError is the result of every envelope of an atomic batch that
// was not written because another envelope of the batch (Index) failed
// with Cause. Nothing of the batch was written.
type BatchAbortedError struct {
	Index int
	Cause error
}

func (e *BatchAbortedError) Error() string {
	return fmt.Sprintf("eventstore: batch not written: envelope %d failed: %v", e.Index, e.Cause)
}

// Unwrap returns the failing envelope's error.
func (e *BatchAbortedError) Unwrap() error { return e.Cause }

// unit ties the items of one AppendBatch call: they are reserved in one
// group, in one transaction, all or none.
type unit struct {
	expect Expectation
	items  []*item
}

// AppendBatch appends envelopes of one aggregate atomically: all of them
// are stored, at consecutive sequence numbers of the aggregate and in one
// segment, or none is. expect is checked against the aggregate's last
// sequence in the reservation transaction. The envelopes must not carry
// sequence_number or expected_seq (the batch's precondition replaces it)
// and their event_ids must be distinct.
//
// Idempotency is per event_id, as in Append: a batch whose envelopes are
// all stored already (identical) returns the stored events, each with
// Duplicate, without checking expect. A batch mixing stored and new
// envelopes is refused (BatchAbortedError with a *PartialBatchError), as
// is one where any envelope fails; every envelope's Result then carries
// an error (the failing one its own, the others *BatchAbortedError). The
// returned error is the call's, as with Append.
func (s *Store) AppendBatch(ctx context.Context, expect Expectation, envs ...envelope.Envelope) ([]Result, error) {
	results := make([]Result, len(envs))
	if len(envs) == 0 {
		return results, nil
	}
	if s.cfg.allocatorOff() {
		for i := range results {
			results[i].Err = &envelope.ValidationError{Code: envelope.CodeInvalid, Field: "sequence_number", Limit: "allocator on",
				Reason: "atomic batches need the store's sequence allocator (EVENT_STORE_SEQUENCE_ALLOCATOR_MODE=postgres)"}
		}
		return results, nil
	}
	u := &unit{expect: expect}
	seen := map[string]int{}
	fail := -1
	var cause error
	for i, e := range envs {
		var err error
		switch {
		case e.SequenceNumber != 0:
			err = &envelope.ValidationError{Code: envelope.CodeInvalid, Field: "sequence_number", Limit: "assigned by the store",
				Reason: "is assigned by the store in an atomic batch"}
		case e.ExpectedSeq != nil:
			err = &envelope.ValidationError{Code: envelope.CodeInvalid, Field: "expected_seq", Limit: "batch precondition",
				Reason: "is given once for an atomic batch, not per envelope"}
		}
		var it *item
		if err == nil {
			it, err = s.newItem(ctx, e)
		}
		if err == nil {
			first := u.items
			if len(first) > 0 && (first[0].env.AggregateType != it.env.AggregateType || first[0].env.AggregateID != it.env.AggregateID) {
				err = &envelope.ValidationError{Code: envelope.CodeInvalid, Field: "aggregate_id", Limit: "one aggregate",
					Reason: "an atomic batch appends to one aggregate"}
			} else if j, dup := seen[it.env.EventID]; dup {
				err = &envelope.ValidationError{Code: envelope.CodeInvalid, Field: "event_id", Limit: "distinct in a batch",
					Reason: fmt.Sprintf("event_id %s is given twice in the batch (envelopes %d and %d)", it.env.EventID, j, i)}
			}
		}
		if err != nil {
			fail, cause = i, err
			break
		}
		seen[it.env.EventID] = i
		it.idx, it.unit = i, u
		u.items = append(u.items, it)
	}
	if fail >= 0 {
		for i := range results {
			results[i].Err = &BatchAbortedError{Index: fail, Cause: cause}
		}
		results[fail].Err = cause
		s.m.countResults(results)
		return results, nil
	}
	return s.submit(ctx, u.items, results)
}

// PartialBatchError: some envelopes of an atomic batch are stored already
// and others are not (their event_ids were reused from another append).
type PartialBatchError struct {
	StoredEventIDs []string
}

func (e *PartialBatchError) Error() string {
	return fmt.Sprintf("eventstore: batch mixes stored and new envelopes (stored: %v): a retry must repeat the whole batch, a new batch needs new event_ids", e.StoredEventIDs)
}

// HTTPStatus is 409.
func (e *PartialBatchError) HTTPStatus() int { return 409 }
