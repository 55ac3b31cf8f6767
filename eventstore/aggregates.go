package eventstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/shared/envelope"
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
