package eventstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/suggest"
)

// AggregateQuery selects aggregates of one type by id prefix, in id order,
// one page at a time.
type AggregateQuery struct {
	// Type is the aggregate type (envelope.AggregateTypeInstance, say).
	Type string
	// Prefix selects the aggregate ids that start with it ("" selects all).
	Prefix string
	// After starts the page after this aggregate id ("" from the first).
	After string
	// Limit is the most aggregates returned (default 500).
	Limit int
	// Kind selects which committed events LastSeq counts ("" both).
	Kind envelope.Kind
}

// AggregateInfo is one aggregate of a page.
type AggregateInfo struct {
	ID string
	// LastSeq is the highest committed sequence number of the query's kind;
	// 0 when the aggregate has none (all its slots of that kind were
	// rejected, abandoned or are still reserved).
	LastSeq int64
}

// Aggregates returns a page of the aggregates matching q, each with its
// last committed sequence of q.Kind. Page on with q.After set to the last
// id returned; an empty page is the end.
func (s *Store) Aggregates(ctx context.Context, q AggregateQuery) ([]AggregateInfo, error) {
	if s.parts != nil {
		return s.aggregatesServers(ctx, q)
	}
	if q.Limit <= 0 {
		q.Limit = 500
	}
	if q.Kind != "" && !q.Kind.Valid() {
		return nil, fmt.Errorf("eventstore: aggregates: kind %q: want command, domain or empty", q.Kind)
	}
	rows, err := s.pool.Query(ctx, `SELECT s.aggregate_id,
			coalesce((SELECT max(a.sequence_number) FROM sluice.appends a
			 WHERE a.aggregate_type = s.aggregate_type AND a.aggregate_id = s.aggregate_id
			   AND ($5 = '' OR a.kind = $5) AND a.state = '`+StateCommitted+`'), 0)
		FROM sluice.sequences s
		WHERE s.aggregate_type = $1 AND s.aggregate_id LIKE $2 ESCAPE '\' AND s.aggregate_id > $3
		ORDER BY s.aggregate_id LIMIT $4`, q.Type, escapeLike(q.Prefix)+"%", q.After, q.Limit, string(q.Kind))
	if err != nil {
		return nil, fmt.Errorf("eventstore: aggregates of %s %q: %w", q.Type, q.Prefix, err)
	}
	defer rows.Close()
	var out []AggregateInfo
	for rows.Next() {
		var a AggregateInfo
		if err := rows.Scan(&a.ID, &a.LastSeq); err != nil {
			return nil, fmt.Errorf("eventstore: aggregates of %s %q: %w", q.Type, q.Prefix, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("eventstore: aggregates of %s %q: %w", q.Type, q.Prefix, err)
	}
	return out, nil
}

// CountAggregates returns the number of aggregates of type aggType whose id
// starts with prefix.
func (s *Store) CountAggregates(ctx context.Context, aggType, prefix string) (int64, error) {
	if s.parts != nil {
		return s.countServers(func(p *Store) (int64, error) { return p.CountAggregates(ctx, aggType, prefix) })
	}
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM sluice.sequences WHERE aggregate_type = $1 AND aggregate_id LIKE $2 ESCAPE '\'`,
		aggType, escapeLike(prefix)+"%").Scan(&n); err != nil {
		return 0, fmt.Errorf("eventstore: count aggregates of %s %q: %w", aggType, prefix, err)
	}
	return n, nil
}

// escapeLike escapes the LIKE metacharacters of s (escape character \).
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// Streams returns the committed events of kind ("" both) of many aggregates
// of one type at once: one index query for all of them and the segment
// reads of Stream (ranged GETs, coalesced, in parallel). The result holds
// one stream per id, at the index of its id, each ordered as Stream orders
// it; an id without events gets an empty stream. A rebuild reads a page of
// aggregates with it instead of one round trip per aggregate.
func (s *Store) Streams(ctx context.Context, aggregateType string, ids []string, kind envelope.Kind) ([][]Event, error) {
	if s.parts != nil {
		return s.streamsServers(ctx, aggregateType, ids, kind)
	}
	out := make([][]Event, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	if kind != "" && !kind.Valid() {
		return nil, fmt.Errorf("eventstore: streams: kind %q: want command, domain or empty", kind)
	}
	norm := make([]string, len(ids))
	at := make(map[string]int, len(ids))
	for i, id := range ids {
		n, err := envelope.NormalizeAggregateID(id)
		if err != nil {
			return nil, err
		}
		norm[i] = n
		at[n] = i
	}
	rows, err := s.queryRows(ctx, `SELECT `+indexColumns+` FROM sluice.appends
		WHERE aggregate_type = $1 AND aggregate_id = ANY($2)
		  AND ($3 = '' OR kind = $3) AND state = '`+StateCommitted+`'
		ORDER BY aggregate_id, sequence_number, kind`, aggregateType, norm, string(kind))
	if err != nil {
		return nil, fmt.Errorf("eventstore: streams of %d %s: %w", len(ids), aggregateType, err)
	}
	evs, err := s.fetch(ctx, rows)
	if err != nil {
		return nil, err
	}
	for k, r := range rows {
		i := at[r.aggID]
		out[i] = append(out[i], evs[k])
	}
	return out, nil
}

// CountAggregatesByPart counts, in one query, the aggregates of type aggType
// that have at least one committed event of kind ("" either), grouped by the
// part of the aggregate id before the first sep (the db of an instance
// aggregate "{db}:{class}:{id}" with sep ":"). The instance worker compares
// it with its index document counts (docs/instanceworker.md#read-model-lost).
func (s *Store) CountAggregatesByPart(ctx context.Context, aggType, sep string, kind envelope.Kind) (map[string]int64, error) {
	if s.parts != nil {
		return s.countByPartServers(ctx, aggType, sep, kind)
	}
	if kind != "" && !kind.Valid() {
		return nil, fmt.Errorf("eventstore: count aggregates: kind %q: want command, domain or empty", kind)
	}
	rows, err := s.pool.Query(ctx, `SELECT split_part(s.aggregate_id, $2, 1), count(*) FROM sluice.sequences s
		WHERE s.aggregate_type = $1 AND EXISTS (SELECT 1 FROM sluice.appends a
			WHERE a.aggregate_type = s.aggregate_type AND a.aggregate_id = s.aggregate_id
			  AND ($3 = '' OR a.kind = $3) AND a.state = '`+StateCommitted+`')
		GROUP BY 1`, Replan, aggType, sep, string(kind))
	if err != nil {
		return nil, fmt.Errorf("eventstore: count aggregates of %s by part: %w", aggType, err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var part string
		var n int64
		if err := rows.Scan(&part, &n); err != nil {
			return nil, fmt.Errorf("eventstore: count aggregates of %s by part: %w", aggType, err)
		}
		out[part] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("eventstore: count aggregates of %s by part: %w", aggType, err)
	}
	return out, nil
}

// AggregatesEstimate is the planner's estimate of the number of aggregates
// in the store (all types; pg_class.reltuples, kept by ANALYZE and
// autovacuum): one catalog read, whatever the size of the store. It is
// negative when the table was never analyzed.
func (s *Store) AggregatesEstimate(ctx context.Context) (float64, error) {
	if s.parts != nil {
		return s.estimateServers(ctx)
	}
	var rows float64
	if err := s.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'sluice.sequences'::regclass`).Scan(&rows); err != nil {
		return 0, fmt.Errorf("eventstore: estimate aggregates: %w", err)
	}
	return rows, nil
}

// SampleAggregates returns up to n ids of aggregates of type aggType that
// have at least one committed event of kind ("" either), drawn at random
// from the index (a block sample of sluice.sequences sized from the
// planner's row estimate, TABLESAMPLE SYSTEM), so its cost is bounded by n
// and not by the size of the store. A small store is read whole. The
// instance worker's start-up check of its read models uses it
// (docs/instanceworker.md#read-model-lost).
func (s *Store) SampleAggregates(ctx context.Context, aggType string, kind envelope.Kind, n int) ([]string, error) {
	if s.parts != nil {
		return s.sampleServers(ctx, aggType, kind, n)
	}
	if kind != "" && !kind.Valid() {
		return nil, fmt.Errorf("eventstore: sample aggregates: kind %q: want command, domain or empty", kind)
	}
	if n <= 0 {
		return nil, nil
	}
	rows, err := s.AggregatesEstimate(ctx)
	if err != nil {
		return nil, fmt.Errorf("eventstore: sample aggregates of %s: %w", aggType, err)
	}
	// Four times the rows asked for, as a share of the table (100 % when
	// the table is small or was never analyzed): other aggregate types and
	// aggregates without such an event take their part of the sample.
	pct := 100.0
	if rows > 0 {
		pct = min(100, 4*float64(n)*100/rows)
	}
	q, err := s.pool.Query(ctx, `SELECT s.aggregate_id FROM sluice.sequences s TABLESAMPLE SYSTEM ($3)
		WHERE s.aggregate_type = $1 AND EXISTS (SELECT 1 FROM sluice.appends a
			WHERE a.aggregate_type = s.aggregate_type AND a.aggregate_id = s.aggregate_id
			  AND ($2 = '' OR a.kind = $2) AND a.state = '`+StateCommitted+`')
		LIMIT $4`, aggType, string(kind), pct, n)
	if err != nil {
		return nil, fmt.Errorf("eventstore: sample aggregates of %s: %w", aggType, err)
	}
	ids, err := pgx.CollectRows(q, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("eventstore: sample aggregates of %s: %w", aggType, err)
	}
	return ids, nil
}

// FindStream returns nil when the store has a stream aggType/aggID (an
// aggregate with a reserved slot), else a *suggest.NotFoundError naming
// the nearest that exists: among the type's aggregates next to aggID in
// the index's order, or, when the type has none, among the aggregate
// types. Bounded: one primary-key lookup, two index range reads of a few
// rows, and a walk over the distinct types (one index probe per type).
func (s *Store) FindStream(ctx context.Context, aggType, aggID string) error {
	if s.parts != nil {
		// The aggregate's server says whether it exists, and suggests
		// from its own aggregates when it does not.
		p, err := s.serverOfAggregate(aggType, aggID)
		if err != nil {
			return err
		}
		return p.FindStream(ctx, aggType, aggID)
	}
	aggID, err := envelope.NormalizeAggregateID(aggID) // as Stream reads it
	if err != nil {
		return err
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sluice.sequences WHERE aggregate_type = $1 AND aggregate_id = $2)`,
		aggType, aggID).Scan(&exists); err != nil {
		return fmt.Errorf("eventstore: find stream %s/%s: %w", aggType, aggID, err)
	}
	if exists {
		return nil
	}
	rows, err := s.pool.Query(ctx, `(SELECT aggregate_id FROM sluice.sequences WHERE aggregate_type = $1 AND aggregate_id > $2 ORDER BY aggregate_id LIMIT 5)
		UNION ALL (SELECT aggregate_id FROM sluice.sequences WHERE aggregate_type = $1 AND aggregate_id < $2 ORDER BY aggregate_id DESC LIMIT 5)`, aggType, aggID)
	if err != nil {
		return fmt.Errorf("eventstore: find stream %s/%s: %w", aggType, aggID, err)
	}
	near, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("eventstore: find stream %s/%s: %w", aggType, aggID, err)
	}
	if len(near) > 0 {
		nf := suggest.NotFound(aggType+" stream", aggID, near)
		nf.Note = "no event of it is stored"
		if nf.Nearest == "" {
			slices.Sort(near)
			nf.Note += "; streams of " + aggType + " next to it: " + strings.Join(near[:min(len(near), 3)], ", ")
		}
		return nf
	}
	rows, err = s.pool.Query(ctx, `WITH RECURSIVE t(typ) AS (
			SELECT min(aggregate_type) FROM sluice.sequences
			UNION ALL
			SELECT (SELECT min(aggregate_type) FROM sluice.sequences WHERE aggregate_type > t.typ) FROM t WHERE t.typ IS NOT NULL)
		SELECT typ FROM t WHERE typ IS NOT NULL`)
	if err != nil {
		return fmt.Errorf("eventstore: find stream %s/%s: %w", aggType, aggID, err)
	}
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("eventstore: find stream %s/%s: %w", aggType, aggID, err)
	}
	nf := suggest.NotFound("aggregate type", aggType, types)
	nf.Note = "the store holds no stream of it"
	return nf
}
