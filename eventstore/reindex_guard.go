package eventstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrWriterLive is wrapped by PlanReindex when a writer is live: a
// reservation was made within the quiet window.
// Reindex locks the index and replaces it; a writer appending meanwhile
// fails its commits, so reindex runs with the writers stopped.
var ErrWriterLive = errors.New("eventstore: a writer is live")

// ErrNoQuietWindow is wrapped by PlanReindex (and CheckQuietWindow) given
// a quiet window shorter than the append timeout: 0 or less sees no
// writer as live, so the check would always pass; a window shorter than
// EVENT_STORE_APPEND_TIMEOUT misses a live writer whose reservation is
// older than the window but still in flight (a writer may take up to the
// append timeout from its reservation to its commit), and reindex would
// replace the index under it.
var ErrNoQuietWindow = errors.New("eventstore: reindex: the quiet window is shorter than the append timeout")

// MinQuietWindow is the shortest quiet window PlanReindex takes: the
// append timeout, the age below which a reservation is a live writer's
// append in flight (repair and lookups take an older one as crashed).
func (c Config) MinQuietWindow() time.Duration { return c.AppendTimeout }

// CheckQuietWindow returns an error wrapping ErrNoQuietWindow when quiet is
// shorter than c.MinQuietWindow() (or not positive), nil otherwise. It
// reads nothing: a caller checks a window before it connects.
func (c Config) CheckQuietWindow(quiet time.Duration) error {
	if minQuiet := c.MinQuietWindow(); quiet <= 0 || quiet < minQuiet {
		return fmt.Errorf("%w: got %s, want at least %s (EVENT_STORE_APPEND_TIMEOUT): a writer may take that long from its reservation to its commit, so a shorter window does not see it as live",
			ErrNoQuietWindow, quiet, minQuiet)
	}
	return nil
}

// ReindexProgress is reported by ReindexWithProgress after each page of
// segments: the segments read and the lines (events) copied so far.
type ReindexProgress struct {
	Segments int
	Lines    int64
}

// RecentWriter is a writer_id that reserved positions within the quiet
// window of PlanReindex.
type RecentWriter struct {
	WriterID string    `json:"writer_id"`
	Last     time.Time `json:"last_reserved_at"`
	Rows     int64     `json:"rows"`
	InFlight int64     `json:"in_flight"`
}

// ReindexPlan is what `sluice store reindex` would rebuild.
type ReindexPlan struct {
	// Segments, Positions and Bytes are read from the object listing: the
	// number of segment objects, the positions they hold (the events to
	// copy, duplicates included; in a store of more than one shard only
	// the positions their keys name, those of each segment's lowest
	// shard: a lower bound) and their size.
	Segments  int   `json:"segments"`
	Positions int64 `json:"positions"`
	Bytes     int64 `json:"bytes"`
	// IndexRows and NextPosition (shard 0's) describe the index that is
	// replaced.
	IndexRows    int64 `json:"index_rows"`
	NextPosition int64 `json:"next_position"`
	// Writers lists the writers found live (empty when reindex may run).
	Writers []RecentWriter `json:"writers,omitempty"`
}

// PlanReindex lists the segments and the current index, and checks that no
// writer is live: no reservation made within quiet (the writers stopped at
// least that long ago; a reservation older than that and still reserved is
// a crashed writer's, which Reindex resolves from the segments). With a live writer
// it returns the plan and an error wrapping ErrWriterLive; a quiet
// shorter than the append timeout, which would miss a live writer's append
// in flight, is refused (ErrNoQuietWindow, CheckQuietWindow). It changes
// nothing.
func (s *Store) PlanReindex(ctx context.Context, quiet time.Duration) (ReindexPlan, error) {
	if err := s.cfg.CheckQuietWindow(quiet); err != nil {
		return ReindexPlan{}, err
	}
	if s.parts != nil {
		return s.planReindexServers(ctx, quiet)
	}
	var p ReindexPlan
	if err := s.layoutChecked(); err != nil {
		return p, err
	}
	startAfter := ""
	for {
		page, err := s.bucket.List(ctx, SegmentPrefix, startAfter, 1000)
		if err != nil {
			return p, fmt.Errorf("eventstore: plan reindex: list: %w", err)
		}
		if len(page) == 0 {
			break
		}
		startAfter = page[len(page)-1].Key
		for _, o := range page {
			n, err := parseSegmentName(o.Key)
			if err != nil {
				continue // Reindex skips it too, with a warning
			}
			if n.shards != s.shards {
				return p, &ShardsMismatchError{Stored: n.shards, Configured: s.shards, Where: "segment " + o.Key}
			}
			p.Segments++
			p.Positions += n.last - n.first + 1
			p.Bytes += o.Size
		}
	}
	err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM sluice.appends),
		coalesce((SELECT next_position FROM sluice.log_head WHERE shard = 0), 1)`).Scan(&p.IndexRows, &p.NextPosition)
	if err != nil {
		return p, fmt.Errorf("eventstore: plan reindex: index: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT writer_id, max(reserved_at), count(*), count(*) FILTER (WHERE state = '`+StateReserved+`')
		FROM sluice.appends
		WHERE writer_id <> $2 AND reserved_at > now() - $1::bigint * interval '1 microsecond'
		GROUP BY writer_id ORDER BY 2 DESC`, quiet.Microseconds(), writerReindex)
	if err != nil {
		return p, fmt.Errorf("eventstore: plan reindex: writers: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var w RecentWriter
		if err := rows.Scan(&w.WriterID, &w.Last, &w.Rows, &w.InFlight); err != nil {
			return p, fmt.Errorf("eventstore: plan reindex: writers: %w", err)
		}
		p.Writers = append(p.Writers, w)
	}
	if err := rows.Err(); err != nil {
		return p, fmt.Errorf("eventstore: plan reindex: writers: %w", err)
	}
	if len(p.Writers) > 0 {
		var ws []string
		for _, w := range p.Writers {
			ws = append(ws, fmt.Sprintf("%s (last reservation %s, %d in flight)", w.WriterID, w.Last.UTC().Format(time.RFC3339), w.InFlight))
		}
		return p, fmt.Errorf("%w: %d writers reserved positions within the last %s: %s; stop them (api, instance-worker) and run reindex once %s passed",
			ErrWriterLive, len(p.Writers), quiet, strings.Join(ws, ", "), quiet)
	}
	return p, nil
}
