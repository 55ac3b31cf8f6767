package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/eventstore"
)

// ErrCheckpointOutOfRange is wrapped by PlanCheckpoint when the target is
// past the store's head (the relay would silently skip events appended
// later) or below the retention floor (positions whose segments are gone:
// nothing to republish, and the relay would walk a gap of missing events).
var ErrCheckpointOutOfRange = errors.New("relay: checkpoint target out of range")

// CheckpointPlan is what `sluice relay checkpoint set` would do.
type CheckpointPlan struct {
	Key   string `json:"key"`
	Found bool   `json:"found"`
	From  int64  `json:"from"`
	To    int64  `json:"to"`
	Head  int64  `json:"head"`
	// Floor is the lowest allowed position: the first retained segment's
	// first position minus one (0 for a store that kept everything).
	Floor int64 `json:"floor"`
	// Republish is the number of positions published again (moving back);
	// Skip the number never published (moving forward past unpublished
	// events).
	Republish int64 `json:"republish"`
	Skip      int64 `json:"skip"`
	// DroppedGaps is the number of pending gaps above To that are dropped
	// (they are walked again).
	DroppedGaps int `json:"dropped_gaps"`
}

// PlanCheckpoint validates a checkpoint move to position against the store
// (head and retention floor) and returns the plan; it changes nothing. It
// reads the one log of a store of one shard (PlanShardCheckpoint any
// shard's).
func PlanCheckpoint(ctx context.Context, st *eventstore.Store, cps *CheckpointStore, position int64) (CheckpointPlan, error) {
	if err := st.RequireOneShard("relay checkpoint set"); err != nil {
		return CheckpointPlan{Key: cps.Key(), To: position}, err
	}
	return PlanShardCheckpoint(ctx, st, 0, cps, position)
}

// PlanShardCheckpoint is PlanCheckpoint of one shard's checkpoint (cps,
// ShardCheckpointKey) against that shard's head and floor.
func PlanShardCheckpoint(ctx context.Context, st *eventstore.Store, shard int, cps *CheckpointStore, position int64) (CheckpointPlan, error) {
	p := CheckpointPlan{Key: cps.Key(), To: position}
	log := st.ShardLog(shard)
	cp, _, found, err := cps.Load(ctx)
	if err != nil {
		return p, err
	}
	p.Found, p.From = found, cp.Position
	if p.Head, err = log.Head(ctx); err != nil {
		return p, err
	}
	segs, err := log.Segments(ctx, 0, 1)
	if err != nil {
		return p, err
	}
	if len(segs) > 0 {
		p.Floor = max(segs[0].First-1, 0)
	}
	switch {
	case position < 0:
		return p, fmt.Errorf("%w: position %d must be >= 0", ErrCheckpointOutOfRange, position)
	case position > p.Head:
		return p, fmt.Errorf("%w: position %d is past the store's head %d: the relay would never publish positions %d..%d",
			ErrCheckpointOutOfRange, position, p.Head, p.Head+1, position)
	case position < p.Floor:
		return p, fmt.Errorf("%w: position %d is below the retention floor %d (the oldest retained segment starts at %d): those events are gone",
			ErrCheckpointOutOfRange, position, p.Floor, p.Floor+1)
	}
	if position < p.From {
		p.Republish = p.From - position
	} else {
		p.Skip = position - p.From
	}
	for _, g := range cp.PendingGaps {
		if g.First > position {
			p.DroppedGaps++
		}
	}
	return p, nil
}
