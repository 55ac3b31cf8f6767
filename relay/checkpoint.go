package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/eventstore/objstore"
)

// Checkpoint is the relay's durable progress (docs/relay.md#the-checkpoint), stored as JSON at
// checkpoints/{name}.json.
type Checkpoint struct {
	// Position: every position <= Position was acknowledged by Kafka or
	// resolved as abandoned (then it is listed in PendingGaps while within
	// the lookback).
	Position  int64     `json:"position"`
	UpdatedAt time.Time `json:"updated_at"`
	// PendingGaps are abandoned ranges the checkpoint passed; they are
	// re-checked for the lookback and published late if they get committed.
	PendingGaps []Gap `json:"pending_gaps"`
	// RecentEventIDs are the ids most recently acknowledged by Kafka
	// (bounded), so that a new leader does not re-publish them.
	RecentEventIDs []string `json:"recent_event_ids"`
	// RelayEpoch is the lease epoch of the relay that wrote it (fencing).
	RelayEpoch int64 `json:"relay_epoch"`
	// Holder is the replica that wrote it (informational).
	Holder string `json:"holder,omitempty"`
}

// Gap is a range of positions resolved as abandoned (no segment, writer gone).
type Gap struct {
	First int64     `json:"first"`
	Last  int64     `json:"last"`
	Since time.Time `json:"since"`
}

// Errors of the checkpoint and leadership.
var (
	// ErrFenced: a relay with a newer lease epoch owns the checkpoint; this
	// one must stop publishing.
	ErrFenced = errors.New("relay: fenced by a newer relay epoch")
	// ErrCheckpointMoved: the checkpoint was changed by someone else with
	// the same or an older epoch (an operator's `relay checkpoint set`);
	// the relay adopts it.
	ErrCheckpointMoved = errors.New("relay: checkpoint changed externally")
)

// CheckpointStore reads and conditionally writes one checkpoint object.
type CheckpointStore struct {
	bucket objstore.Bucket
	key    string
}

// NewCheckpointStore returns the store of the checkpoint at key.
func NewCheckpointStore(bucket objstore.Bucket, key string) *CheckpointStore {
	return &CheckpointStore{bucket: bucket, key: key}
}

// Key is the object key of the checkpoint.
func (s *CheckpointStore) Key() string { return s.key }

// Load returns the checkpoint and its ETag; found is false when it does not
// exist yet.
func (s *CheckpointStore) Load(ctx context.Context) (cp Checkpoint, etag string, found bool, err error) {
	body, oi, err := s.bucket.Get(ctx, s.key)
	if errors.Is(err, objstore.ErrNotFound) {
		return Checkpoint{}, "", false, nil
	}
	if err != nil {
		return Checkpoint{}, "", false, fmt.Errorf("relay: read checkpoint %s: %w", s.key, err)
	}
	if err := json.Unmarshal(body, &cp); err != nil {
		return Checkpoint{}, "", false, fmt.Errorf("relay: checkpoint %s is not valid JSON: %w", s.key, err)
	}
	return cp, oi.ETag, true, nil
}

// Save writes cp over the version etag (If-Match), or creates the object
// when etag is empty (If-None-Match: *). It returns the new ETag. A lost
// race fails with objstore.ErrPreconditionFailed.
func (s *CheckpointStore) Save(ctx context.Context, cp Checkpoint, etag string) (string, error) {
	if cp.PendingGaps == nil {
		cp.PendingGaps = []Gap{}
	}
	if cp.RecentEventIDs == nil {
		cp.RecentEventIDs = []string{}
	}
	body, err := json.Marshal(cp)
	if err != nil {
		return "", fmt.Errorf("relay: encode checkpoint: %w", err)
	}
	var oi objstore.ObjectInfo
	if etag == "" {
		oi, err = s.bucket.Create(ctx, s.key, body)
	} else {
		oi, err = s.bucket.Put(ctx, s.key, body, objstore.PutOptions{IfMatch: etag})
		if errors.Is(err, objstore.ErrNotFound) {
			err = fmt.Errorf("%w (checkpoint deleted meanwhile): %w", objstore.ErrPreconditionFailed, err)
		}
	}
	if err != nil {
		return "", fmt.Errorf("relay: write checkpoint %s: %w", s.key, err)
	}
	return oi.ETag, nil
}

// ShardCheckpointKey is the checkpoint object of one shard's leader
// (docs/relay.md#shards): key itself for a store of one shard (the
// checkpoint from before shards, so an upgrade changes nothing), else key
// without its ".json" followed by "/shard-0003.json"
// (checkpoints/default/shard-0003.json for the default key).
func ShardCheckpointKey(key string, shard, shards int) string {
	if shards <= 1 {
		return key
	}
	return fmt.Sprintf("%s/shard-%04d.json", strings.TrimSuffix(key, ".json"), shard)
}
