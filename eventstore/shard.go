package eventstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Shards of the log (docs/eventstore.md#shards, docs/scale-out.md#shards-of-the-log):
// a store has N shards, fixed when it is created (EVENT_STORE_SHARDS,
// recorded in sluice.eventstore_layout). An aggregate lives in one shard,
// ShardOf; each shard has its own head row and positions, so an event is
// addressed by (shard, position). N = 1 is the layout of a store from
// before shards, byte for byte.

// MaxShards bounds EVENT_STORE_SHARDS (a segment key writes the shard in
// four digits).
const MaxShards = 1024

// ShardOf returns the shard of an aggregate in a store of n shards: the
// first four bytes of SHA-256(aggregate_type + ":" + aggregate_id), read
// as a big-endian unsigned 32-bit integer, modulo n. aggregate_id is the
// stored (normalised) id; aggregate_type holds no ':', so the input names
// one aggregate. n <= 1 gives 0 without hashing. The function is part of
// the store's format — every shard of every stored event depends on it —
// and TestShardOfGolden pins it.
func ShardOf(aggregateType, aggregateID string, n int) int {
	if n <= 1 {
		return 0
	}
	h := sha256.New()
	h.Write([]byte(aggregateType))
	h.Write([]byte{':'})
	h.Write([]byte(aggregateID))
	var sum [sha256.Size]byte
	return int(binary.BigEndian.Uint32(h.Sum(sum[:0])[:4]) % uint32(n))
}

// ShardsMismatchError: the store was created with Stored shards and the
// configuration asks for Configured. The number of shards is fixed when
// the store is created; the store refuses to open rather than address
// events in the wrong shard.
type ShardsMismatchError struct {
	Stored, Configured int
	// Where says where the stored number was found: the index
	// (sluice.eventstore_layout) or a segment key (Reindex; New on an
	// index that holds nothing yet).
	Where string
}

func (e *ShardsMismatchError) Error() string {
	return fmt.Sprintf("eventstore: the store has %d shard(s) (%s) but EVENT_STORE_SHARDS is %d: the number of shards is fixed when a store is created; "+
		"set EVENT_STORE_SHARDS=%d, or replay the events into a new store of %d shards (docs/scale-out.md#changing-the-number-of-shards)",
		e.Stored, e.Where, e.Configured, e.Stored, e.Configured)
}

// HTTPStatus is 503: the store refuses to serve until the deployment's
// configuration is fixed. Like a credential mistake, it is the
// deployment's, never a record's, so shared/failure classifies it as an
// outage: a worker pauses with readiness red instead of dead-lettering
// every command it appends (a Store that opened during a Postgres outage
// finds a mismatch only later, in the background).
func (e *ShardsMismatchError) HTTPStatus() int { return http.StatusServiceUnavailable }

// ShardsNotSupportedError: a reader of the log by one global position met
// a store of more than one shard, where no global position exists. Every
// reader has a form for such a store: by cursor (Log, LogWalk, LogTail;
// /v1/log, the subscriptions, store cat --cursor) or by shard (ShardLog;
// the relay and its tools with --shard). Stream reads (an aggregate's
// events, by event_id, by slot) and appends work for any number of shards.
type ShardsNotSupportedError struct {
	// Reader is what refused ("Head", "sluice store segments", ...).
	Reader string
	// Shards is the store's number of shards.
	Shards int
}

func (e *ShardsNotSupportedError) Error() string {
	return fmt.Sprintf("eventstore: %s reads the log by one global position, which a store of %d shards does not have "+
		"(EVENT_STORE_SHARDS > 1): read it by cursor (the log, the subscriptions, store cat --cursor) or by shard "+
		"(the relay's tools with --shard; docs/scale-out.md#shards-of-the-log); stream reads and appends work",
		e.Reader, e.Shards)
}

// HTTPStatus is 501: the server does not implement this read for the
// store's layout.
func (e *ShardsNotSupportedError) HTTPStatus() int { return http.StatusNotImplemented }

// Shards returns the store's number of shards (fixed at its creation).
func (s *Store) Shards() int { return s.shards }

// readerByPosition is RequireOneShard for the store's own readers by
// global position, once the store's layout is checked (layoutChecked).
func (s *Store) readerByPosition(reader string) error {
	if err := s.layoutChecked(); err != nil {
		return err
	}
	return s.RequireOneShard(reader)
}

// RequireOneShard returns a *ShardsNotSupportedError naming reader when
// the store has more than one shard: what a reader of the log by one
// global position calls at its start. Before the store's layout is checked
// (Postgres down when the store opened) it answers from the configured
// number; the store's own readers by position then refuse a mismatch.
func (s *Store) RequireOneShard(reader string) error {
	if s.shards > 1 {
		return &ShardsNotSupportedError{Reader: reader, Shards: s.shards}
	}
	return nil
}

// sqlLayout records the number of shards, and the shards this server
// holds ($2; NULL: every shard), when the index has none yet: a store
// that already holds something (rows, sequences, a head moved past 1) is
// a store from before shards, hence one shard held whole; an empty one
// takes the configured layout. It returns the recorded layout (NULL
// shards when a concurrent opener recorded it between the read and the
// insert: read again).
const sqlLayout = `
WITH existing AS (SELECT shards, held FROM sluice.eventstore_layout WHERE singleton),
old AS (SELECT EXISTS (SELECT 1 FROM sluice.appends) OR EXISTS (SELECT 1 FROM sluice.sequences)
            OR EXISTS (SELECT 1 FROM sluice.log_head WHERE next_position > 1) AS yes),
ins AS (
  INSERT INTO sluice.eventstore_layout (singleton, shards, held)
  SELECT true, CASE WHEN old.yes THEN 1 ELSE $1::int END, CASE WHEN old.yes THEN NULL ELSE $2::int[] END
    FROM old
   WHERE NOT EXISTS (SELECT 1 FROM existing)
  ON CONFLICT (singleton) DO NOTHING
  RETURNING shards, held
)
SELECT coalesce((SELECT shards FROM existing), (SELECT shards FROM ins)),
       CASE WHEN EXISTS (SELECT 1 FROM existing) THEN (SELECT held FROM existing) ELSE (SELECT held FROM ins) END`

// sqlReadLayout reads the recorded number of shards (NULL: none yet) and
// held shards (NULL: every shard), how many head rows there are and
// whether the index holds nothing (sqlLayout's test); a plain read, so
// that a store opened with read-only credentials on an existing index
// writes nothing.
const sqlReadLayout = `SELECT (SELECT shards FROM sluice.eventstore_layout WHERE singleton),
  (SELECT held FROM sluice.eventstore_layout WHERE singleton), (SELECT array_agg(shard ORDER BY shard) FROM sluice.log_head),
  NOT (EXISTS (SELECT 1 FROM sluice.appends) OR EXISTS (SELECT 1 FROM sluice.sequences)
       OR EXISTS (SELECT 1 FROM sluice.log_head WHERE next_position > 1))`

// sqlHeadRows makes sure every shard held ($1) has its head row, and
// removes the unused head rows of shards another server holds (a new
// database's shard 0, migration 23). A row it creates starts past the
// shard's last position in the index (1 on an empty shard): a head row
// wiped by hand is recreated where it was, never below positions already
// handed out (one backward step of the appends key per shard).
const sqlHeadRows = `WITH gone AS (DELETE FROM sluice.log_head WHERE shard <> ALL ($1::int[]) AND next_position = 1)
INSERT INTO sluice.log_head (shard, next_position)
SELECT s, coalesce((SELECT a.position FROM sluice.appends a WHERE a.shard = s ORDER BY a.position DESC LIMIT 1), 0) + 1
FROM unnest($1::int[]) AS s ON CONFLICT (shard) DO NOTHING`

// heldShards are the shards this store holds: s.held on one server's part
// of a store of several, else 0..N-1.
func (s *Store) heldShards() []int {
	if s.held != nil {
		return s.held
	}
	all := make([]int, s.shards)
	for i := range all {
		all[i] = i
	}
	return all
}

// holds says whether shard lives on this store's server.
func (s *Store) holds(shard int) bool {
	return s.held == nil || slices.Contains(s.held, shard)
}

// serverName names this store's server in logs and messages: "shards
// 2-3" for a part of a store of several servers, else "".
func (s *Store) serverName() string {
	if s.held == nil {
		return ""
	}
	return ShardServer{Shards: s.held}.Name()
}

// layoutRefused says whether err is the store refusing its configuration
// (a number of shards or a shard map other than the store's), for good,
// rather than Postgres not answering.
func layoutRefused(err error) bool {
	var mismatch *ShardsMismatchError
	var mapMismatch *ShardMapMismatchError
	return errors.As(err, &mismatch) || errors.As(err, &mapMismatch)
}

// openLayout reads (or, on a new index, records) the store's number of
// shards and the shards this server holds, refuses a configuration that
// asks for others, and creates the held shards' head rows that are
// missing (a new index; a wiped log_head).
func (s *Store) openLayout(ctx context.Context, configured int) (int, error) {
	var stored *int
	var held, heads []int32
	var empty bool
	if err := s.pool.QueryRow(ctx, sqlReadLayout).Scan(&stored, &held, &heads, &empty); err != nil {
		return 0, fmt.Errorf("eventstore: read the store's layout: %w", err)
	}
	if stored == nil && empty {
		// An empty index over a bucket that holds segments (a lost index
		// to rebuild with Reindex): their keys say the store's number of
		// shards, and recording another would refuse the right one later.
		var mismatch *ShardsMismatchError
		if err := s.bucketAgrees(ctx, configured); errors.As(err, &mismatch) {
			return 0, err
		} else if err != nil {
			// Best effort: an object store that does not answer does not
			// hold the store's opening (nor its appends, which answer the
			// outage themselves).
			s.log.Warn("eventstore: could not list the bucket's segments; recording the configured number of shards",
				"shards", configured, "err", err)
		}
	}
	var want []int32 // NULL: every shard
	for _, sh := range s.held {
		want = append(want, int32(sh))
	}
	for attempt := 0; stored == nil && attempt < 3; attempt++ {
		if err := s.pool.QueryRow(ctx, sqlLayout, configured, want).Scan(&stored, &held); err != nil {
			return 0, fmt.Errorf("eventstore: record the store's layout: %w", err)
		}
	}
	if stored == nil {
		return 0, errors.New("eventstore: record the store's layout: no row after three attempts")
	}
	if *stored != configured {
		return 0, &ShardsMismatchError{Stored: *stored, Configured: configured, Where: "recorded in the index"}
	}
	if err := s.heldAgrees(held); err != nil {
		return 0, err
	}
	if mine := s.heldShards(); !slices.EqualFunc(heads, mine, func(a int32, b int) bool { return int(a) == b }) {
		if _, err := s.pool.Exec(ctx, sqlHeadRows, mine); err != nil {
			return 0, fmt.Errorf("eventstore: create the shards' head rows: %w", err)
		}
	}
	return *stored, nil
}

// heldAgrees refuses, with a *ShardMapMismatchError, a server whose
// recorded shards (nil: every shard) are not the ones the map gives it.
func (s *Store) heldAgrees(recorded []int32) error {
	stored := s.heldShards()
	if recorded != nil {
		stored = make([]int, len(recorded))
		for i, sh := range recorded {
			stored[i] = int(sh)
		}
		slices.Sort(stored)
	}
	if mine := s.heldShards(); !slices.Equal(stored, mine) {
		name := s.serverName() + " (EVENT_STORE_SHARD_MAP)"
		if s.held == nil {
			name = "EVENT_STORE_DATABASE_URL (no EVENT_STORE_SHARD_MAP: every shard)"
		}
		return &ShardMapMismatchError{Server: name, Stored: stored, Configured: mine}
	}
	return nil
}

// layoutListTimeout bounds bucketAgrees's listing, within New's openTimeout.
const layoutListTimeout = 2 * time.Second

// bucketAgrees refuses, with a *ShardsMismatchError, a configured number
// of shards that the first segment of the bucket contradicts: the
// segments of one index are all of its layout.
func (s *Store) bucketAgrees(ctx context.Context, configured int) error {
	ctx, cancel := context.WithTimeout(ctx, layoutListTimeout)
	defer cancel()
	page, err := s.bucket.List(ctx, SegmentPrefix, "", 1000)
	if err != nil {
		return fmt.Errorf("eventstore: read the store's layout: list the bucket's segments: %w", err)
	}
	for _, o := range page {
		n, err := parseSegmentName(o.Key)
		if err != nil {
			continue // not a segment (Reindex skips it too)
		}
		if n.shards != configured {
			return &ShardsMismatchError{Stored: n.shards, Configured: configured, Where: "segment " + o.Key + " in the bucket"}
		}
		return nil
	}
	return nil
}

// segmentName is what a segment key says: for one shard the block of
// positions first..last (segments/{first:020d}-{last:020d}.jsonl, the
// layout from before shards); for n > 1 shards the block of the group's
// lowest shard (segments/n{n}/{shard:04d}-{first:020d}-{last:020d}.jsonl)
// — the segment's other shards' blocks are in its lines.
type segmentName struct {
	shards, shard int
	first, last   int64
}

func (n segmentName) key() string {
	if n.shards <= 1 {
		return SegmentKey(n.first, n.last)
	}
	return fmt.Sprintf("%sn%d/%04d-%020d-%020d%s", SegmentPrefix, n.shards, n.shard, n.first, n.last, segmentSuffix)
}

// parseSegmentName reads a segment key of either layout; shards is 1 for
// a key of the one-shard layout.
func parseSegmentName(key string) (segmentName, error) {
	rest, ok := strings.CutPrefix(key, SegmentPrefix+"n")
	if !ok {
		first, last, err := ParseSegmentKey(key)
		return segmentName{shards: 1, first: first, last: last}, err
	}
	bad := fmt.Errorf("eventstore: %q is not a segment key (segments/n{shards}/{shard:04d}-{first:020d}-{last:020d}.jsonl)", key)
	ns, rest, ok := strings.Cut(rest, "/")
	if !ok {
		return segmentName{}, bad
	}
	if rest, ok = strings.CutSuffix(rest, segmentSuffix); !ok || len(rest) != 46 || rest[4] != '-' || rest[25] != '-' {
		return segmentName{}, bad
	}
	shards, err0 := strconv.Atoi(ns)
	shard, err1 := parseDigits(rest[:4])
	first, err2 := parseDigits(rest[5:25])
	last, err3 := parseDigits(rest[26:])
	if err0 != nil || err1 != nil || err2 != nil || err3 != nil || strconv.Itoa(shards) != ns ||
		shards < 2 || shards > MaxShards || shard >= int64(shards) || first < 1 || last < first {
		return segmentName{}, bad
	}
	return segmentName{shards: shards, shard: int(shard), first: first, last: last}, nil
}

// ParseShardedSegmentKey returns what a segment key of a store of more
// than one shard names: the store's number of shards, and the block of
// positions first..last of the lowest shard in the segment.
func ParseShardedSegmentKey(key string) (shards, shard int, first, last int64, err error) {
	n, err := parseSegmentName(key)
	if err == nil && n.shards < 2 {
		err = fmt.Errorf("eventstore: %q is a segment key of a one-shard store", key)
	}
	return n.shards, n.shard, n.first, n.last, err
}

// nameOf parses a segment key of this store's layout: a key of another
// number of shards is a *ShardsMismatchError.
func (s *Store) nameOf(key string) (segmentName, error) {
	n, err := parseSegmentName(key)
	if err != nil {
		return n, err
	}
	if n.shards != s.shards {
		return n, &ShardsMismatchError{Stored: n.shards, Configured: s.shards, Where: "segment " + key}
	}
	return n, nil
}

// shardBlock is the block of positions a group took in one shard.
type shardBlock struct {
	shard       int
	first, last int64
}

// blockNotify is the payload of a NOTIFY about blocks ("reserved",
// "committed", "abandoned"): for one shard "WORD FIRST LAST", as before
// shards; for more, "WORD S:FIRST-LAST …", one per shard, ascending
// (parsed as a Resync until the readers are per shard, issue 33 item 4).
func blockNotify(word string, shards int, blocks []shardBlock) string {
	if shards <= 1 && len(blocks) == 1 {
		return fmt.Sprintf("%s %d %d", word, blocks[0].first, blocks[0].last)
	}
	var b strings.Builder
	b.WriteString(word)
	for _, k := range blocks {
		fmt.Fprintf(&b, " %d:%d-%d", k.shard, k.first, k.last)
	}
	return b.String()
}

// ShardHead is one shard's committed head.
type ShardHead struct {
	Shard int
	// Position is the shard's highest committed position, 0 when none.
	Position int64
}

// sqlHeads reads every shard's highest committed position, one backward
// probe of the primary key (shard, position) per shard.
const sqlHeads = `
SELECT h.shard, coalesce(m.p, 0) FROM sluice.log_head h
  LEFT JOIN LATERAL (SELECT a.position AS p FROM sluice.appends a
                      WHERE a.shard = h.shard AND a.state = '` + StateCommitted + `'
                      ORDER BY a.position DESC LIMIT 1) m ON true
 ORDER BY h.shard`

// Heads returns the highest committed position of every shard, for any
// number of shards (Head is the one-shard form). It also serves as the
// API's readiness probe of the index: until the store's layout is
// checked, and after it was refused, it answers what appends answer.
func (s *Store) Heads(ctx context.Context) ([]ShardHead, error) {
	if s.parts != nil {
		return s.headsServers(ctx)
	}
	if err := s.layoutChecked(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, sqlHeads, Replan)
	if err != nil {
		return nil, fmt.Errorf("eventstore: heads: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ShardHead, error) {
		var h ShardHead
		err := r.Scan(&h.Shard, &h.Position)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("eventstore: heads: %w", err)
	}
	return out, nil
}
