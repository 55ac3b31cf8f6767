package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/failure"
	"github.com/sluicehq/sluice/shared/kafka"
)

// Parking (docs/relay.md, "Parked records"): a record Kafka refuses for a
// reason of its own is retried EVENT_PUBLISHER_PARK_AFTER_ATTEMPTS times
// (at least once produced alone) and then written to sluice.relay_parked,
// durably, before the checkpoint may pass its position. The relay then
// moves on; nothing is lost (the row holds the record) and nothing is
// skipped silently (a metric, an error log line, `sluice relay parked`).

// Reasons a record is parked (sluice.relay_parked.reason, the reason label
// of sluice_relay_parked_total).
const (
	// ReasonTooLarge: MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE, from the
	// producer's budget or the broker's (or the topic's) limit.
	ReasonTooLarge = "too_large"
	// ReasonInvalidTopic: the record's topic breaks Kafka's naming rule or
	// the broker refuses to create it (INVALID_TOPIC_EXCEPTION,
	// POLICY_VIOLATION).
	ReasonInvalidTopic = "invalid_topic"
	// ReasonTopicCollision: the record's topic differs from an existing
	// one only by '.' versus '_', which Kafka refuses.
	ReasonTopicCollision = "topic_collision"
	// ReasonRejected: the broker refused the record itself (INVALID_RECORD,
	// INVALID_TIMESTAMP, POLICY_VIOLATION on produce).
	ReasonRejected = "rejected"
)

// States of a parked row.
const (
	ParkedStateParked      = "parked"
	ParkedStateRepublished = "republished"
	ParkedStateDropped     = "dropped"
)

// Errors of the parked-record operations; callers branch with errors.Is.
var (
	// ErrParkedNotFound: no parked row at that relay name and position.
	ErrParkedNotFound = errors.New("relay: no parked record at that position")
	// ErrNotParked: the row was republished or dropped already.
	ErrNotParked = errors.New("relay: record is no longer parked")
)

// ParkedRecord is one row of sluice.relay_parked: the Kafka record the
// relay could not publish, why, and what became of it. Its JSON (the
// admin API's parked list) uses snake_case names like every other body;
// bytes (key, envelope, header values) are base64, as encoding/json writes
// them, and the resolution fields are left out while the row is parked.
type ParkedRecord struct {
	Relay string `json:"relay"`
	// Shard is the shard of Position (0 in a store of one shard).
	Shard    int                `json:"shard"`
	Position int64              `json:"position"`
	EventID  string             `json:"event_id"`
	Topic    string             `json:"topic"`
	Key      []byte             `json:"key"`
	Headers  []kgo.RecordHeader `json:"-"` // as ParkedHeader in MarshalJSON
	// Envelope is the stored line, byte for byte (the record's value). List
	// leaves it nil and sets EnvelopeBytes only.
	Envelope      []byte `json:"envelope,omitempty"`
	EnvelopeBytes int    `json:"envelope_bytes"`
	// SegmentKey is the segment the line is stored in.
	SegmentKey    string    `json:"segment_key"`
	Reason        string    `json:"reason"`
	Error         string    `json:"error"`
	Attempts      int       `json:"attempts"`
	ParkedAt      time.Time `json:"parked_at"`
	State         string    `json:"state"`
	ResolvedAt    time.Time `json:"resolved_at,omitzero"`     // zero while parked
	ResolvedTopic string    `json:"resolved_topic,omitempty"` // the topic a republish produced to
}

// ParkedHeader is a parked record's header in its JSON form.
type ParkedHeader struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

// MarshalJSON writes p with its headers as ParkedHeader objects (franz-go's
// RecordHeader has no JSON names of its own).
func (p ParkedRecord) MarshalJSON() ([]byte, error) {
	type plain ParkedRecord // without this method
	hs := make([]ParkedHeader, len(p.Headers))
	for i, h := range p.Headers {
		hs[i] = ParkedHeader{Key: h.Key, Value: h.Value}
	}
	return json.Marshal(struct {
		plain
		Headers []ParkedHeader `json:"headers"`
	}{plain(p), hs})
}

// Record returns the Kafka record to produce (to topic when non-empty,
// else to the parked record's topic).
func (p ParkedRecord) Record(topic string) *kgo.Record {
	if topic == "" {
		topic = p.Topic
	}
	return &kgo.Record{Topic: topic, Key: p.Key, Value: p.Envelope, Headers: p.Headers}
}

// ParkedStore reads and writes sluice.relay_parked.
type ParkedStore struct{ pool *pgxpool.Pool }

// NewParkedStore returns the store of parked records in pool's database.
func NewParkedStore(pool *pgxpool.Pool) *ParkedStore { return &ParkedStore{pool: pool} }

type headerJSON struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

// Park writes p as parked. It is idempotent by relay name, shard and position: a
// row already parked there is kept as it is (a relay that crashed after
// parking parks the same record again); a row republished or dropped
// before (the checkpoint was moved back and the record refused again) is
// parked again with the new attempt. inserted reports whether the row is
// new or parked again.
func (s *ParkedStore) Park(ctx context.Context, p ParkedRecord) (inserted bool, err error) {
	hs := make([]headerJSON, len(p.Headers))
	for i, h := range p.Headers {
		hs[i] = headerJSON{h.Key, h.Value}
	}
	hb, err := json.Marshal(hs)
	if err != nil {
		return false, fmt.Errorf("relay: park position %d: encode headers: %w", p.Position, err)
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO sluice.relay_parked
  (relay, position, event_id, topic, key, headers, envelope, segment_key, reason, error, attempts, shard)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (relay, shard, position) DO UPDATE SET
  event_id = excluded.event_id, topic = excluded.topic, key = excluded.key, headers = excluded.headers,
  envelope = excluded.envelope, segment_key = excluded.segment_key, reason = excluded.reason,
  error = excluded.error, attempts = excluded.attempts, parked_at = now(), state = 'parked',
  resolved_at = NULL, resolved_topic = NULL
WHERE sluice.relay_parked.state <> 'parked'`,
		p.Relay, p.Position, p.EventID, p.Topic, nonNil(p.Key), hb, nonNil(p.Envelope), p.SegmentKey, p.Reason, p.Error, max(p.Attempts, 1), p.Shard)
	if err != nil {
		return false, fmt.Errorf("relay: park position %d: %w", p.Position, err)
	}
	return tag.RowsAffected() == 1, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// parkedAfter returns the positions of shard above after parked by relay
// and not resolved: a new leader marks them done, so it neither produces
// nor parks them again.
func (s *ParkedStore) parkedAfter(ctx context.Context, relay string, shard int, after int64) ([]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT position FROM sluice.relay_parked WHERE relay = $1 AND shard = $3 AND state = 'parked' AND position > $2 ORDER BY position`, relay, after, shard)
	if err != nil {
		return nil, fmt.Errorf("relay: parked positions: %w", err)
	}
	ps, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("relay: parked positions: %w", err)
	}
	return ps, nil
}

// CountShard returns the number of rows of relay's shard in state parked.
func (s *ParkedStore) CountShard(ctx context.Context, relay string, shard int) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM sluice.relay_parked WHERE relay = $1 AND shard = $2 AND state = 'parked'`, relay, shard).Scan(&n); err != nil {
		return 0, fmt.Errorf("relay: count parked: %w", err)
	}
	return n, nil
}

// Count returns the number of rows of relay in state parked, every shard's.
func (s *ParkedStore) Count(ctx context.Context, relay string) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM sluice.relay_parked WHERE relay = $1 AND state = 'parked'`, relay).Scan(&n); err != nil {
		return 0, fmt.Errorf("relay: count parked: %w", err)
	}
	return n, nil
}

// ParkedFilter selects rows for List. Zero fields select everything.
type ParkedFilter struct {
	Relay  string // required
	State  string // parked, republished, dropped; "" = any
	Reason string
	Topic  string
	// FromPosition and ToPosition bound the positions (inclusive; 0 = open).
	FromPosition, ToPosition int64
	// Limit bounds the rows (default 100).
	Limit int
	// Shard, when set, selects one shard's rows; nil: every shard's.
	Shard *int
}

const parkedCols = `relay, shard, position, event_id, topic, key, headers, segment_key, reason, error, attempts, parked_at, state, resolved_at, coalesce(resolved_topic, '')`

// List returns the rows f selects, in position order, without the
// envelope bytes (EnvelopeBytes says how large it is).
func (s *ParkedStore) List(ctx context.Context, f ParkedFilter) ([]ParkedRecord, error) {
	if f.Relay == "" {
		return nil, errors.New("relay: list parked: the relay name is required")
	}
	if f.State != "" && f.State != ParkedStateParked && f.State != ParkedStateRepublished && f.State != ParkedStateDropped {
		return nil, fmt.Errorf("relay: list parked: state %q: want parked, republished or dropped", f.State)
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	var to any
	if f.ToPosition > 0 {
		to = f.ToPosition
	}
	rows, err := s.pool.Query(ctx, `SELECT `+parkedCols+`, NULL::bytea, octet_length(envelope) FROM sluice.relay_parked
WHERE relay = $1 AND ($2 = '' OR state = $2) AND ($3 = '' OR reason = $3) AND ($4 = '' OR topic = $4)
  AND position >= $5 AND ($6::bigint IS NULL OR position <= $6) AND ($8::int IS NULL OR shard = $8)
ORDER BY position, shard LIMIT $7`, f.Relay, f.State, f.Reason, f.Topic, f.FromPosition, to, f.Limit, f.Shard)
	if err != nil {
		return nil, fmt.Errorf("relay: list parked: %w", err)
	}
	defer rows.Close()
	var out []ParkedRecord
	for rows.Next() {
		p, err := scanParked(rows)
		if err != nil {
			return nil, fmt.Errorf("relay: list parked: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("relay: list parked: %w", err)
	}
	return out, nil
}

// Get returns the row of relay at position of shard 0 (a store of one
// shard), with its envelope bytes; ErrParkedNotFound when there is none.
func (s *ParkedStore) Get(ctx context.Context, relay string, position int64) (ParkedRecord, error) {
	return s.GetShard(ctx, relay, 0, position)
}

// GetShard returns the row of relay at position of shard, with its
// envelope bytes; ErrParkedNotFound when there is none.
func (s *ParkedStore) GetShard(ctx context.Context, relay string, shard int, position int64) (ParkedRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+parkedCols+`, envelope, octet_length(envelope) FROM sluice.relay_parked WHERE relay = $1 AND position = $2 AND shard = $3`, relay, position, shard)
	if err != nil {
		return ParkedRecord{}, fmt.Errorf("relay: parked position %d: %w", position, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return ParkedRecord{}, fmt.Errorf("relay: parked position %d: %w", position, err)
		}
		return ParkedRecord{}, fmt.Errorf("%w: relay %s, %s", ErrParkedNotFound, relay, where(shard, position))
	}
	p, err := scanParked(rows)
	if err != nil {
		return ParkedRecord{}, fmt.Errorf("relay: parked position %d: %w", position, err)
	}
	return p, nil
}

func scanParked(rows pgx.Rows) (ParkedRecord, error) {
	var p ParkedRecord
	var hb []byte
	var resolved *time.Time
	if err := rows.Scan(&p.Relay, &p.Shard, &p.Position, &p.EventID, &p.Topic, &p.Key, &hb, &p.SegmentKey, &p.Reason, &p.Error,
		&p.Attempts, &p.ParkedAt, &p.State, &resolved, &p.ResolvedTopic, &p.Envelope, &p.EnvelopeBytes); err != nil {
		return p, err
	}
	if resolved != nil {
		p.ResolvedAt = *resolved
	}
	var hs []headerJSON
	if err := json.Unmarshal(hb, &hs); err != nil {
		return p, fmt.Errorf("headers of position %d: %w", p.Position, err)
	}
	for _, h := range hs {
		p.Headers = append(p.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return p, nil
}

// resolve moves a parked row to state (republished or dropped).
func (s *ParkedStore) resolve(ctx context.Context, relay string, shard int, position int64, state, topic string) error {
	var t any
	if topic != "" {
		t = topic
	}
	tag, err := s.pool.Exec(ctx, `UPDATE sluice.relay_parked SET state = $3, resolved_at = now(), resolved_topic = $4
WHERE relay = $1 AND position = $2 AND shard = $5 AND state = 'parked'`, relay, position, state, t, shard)
	if err != nil {
		return fmt.Errorf("relay: mark %s %s: %w", where(shard, position), state, err)
	}
	if tag.RowsAffected() == 0 {
		if _, err := s.GetShard(ctx, relay, shard, position); err != nil {
			return err
		}
		return fmt.Errorf("%w: relay %s, %s", ErrNotParked, relay, where(shard, position))
	}
	return nil
}

// where names a parked position: "position 12" for shard 0 (as before
// shards), "shard 3 position 12" for another.
func where(shard int, position int64) string {
	if shard == 0 {
		return fmt.Sprintf("position %d", position)
	}
	return fmt.Sprintf("shard %d position %d", shard, position)
}

// ResolveOptions configure RepublishParked and DropParked.
type ResolveOptions struct {
	// Topic overrides the parked record's topic (republish only).
	Topic string
	// DryRun checks and reports without producing or changing the row.
	DryRun bool
	// Spec, when Partitions is set, creates the target topic if missing
	// before producing (republish only).
	Spec kafka.Spec
	// Timeout bounds the produce (default 30 s).
	Timeout time.Duration
	// Shard is the shard of the position (0 in a store of one shard).
	Shard int
}

// RepublishParked produces the parked record at position of relay again,
// byte for byte (key, headers, envelope), to its topic or opts.Topic, waits
// for Kafka's acknowledgement and marks the row republished. A record that
// still cannot be produced is refused with Kafka's error and the row stays
// parked. It returns the row as it was before. A dry run only checks that
// the row is parked.
func RepublishParked(ctx context.Context, ps *ParkedStore, cl *kgo.Client, relay string, position int64, opts ResolveOptions) (ParkedRecord, error) {
	p, err := getParked(ctx, ps, relay, opts.Shard, position)
	if err != nil || opts.DryRun {
		return p, err
	}
	rec := p.Record(opts.Topic)
	if opts.Spec.Partitions > 0 {
		if err := kafka.EnsureSpec(ctx, cl, opts.Spec, rec.Topic); err != nil {
			return p, fmt.Errorf("relay: republish parked position %d: %w", position, err)
		}
	} else if err := kafka.ValidName(rec.Topic); err != nil {
		return p, fmt.Errorf("relay: republish parked position %d: %w", position, err)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	pctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if err := cl.ProduceSync(pctx, rec).FirstErr(); err != nil {
		return p, fmt.Errorf("relay: republish parked position %d to %s: still refused (%s): %w", position, rec.Topic, failure.Classify(pctx, err), err)
	}
	return p, ps.resolve(ctx, relay, opts.Shard, position, ParkedStateRepublished, rec.Topic)
}

// getParked reads the row at position of relay and refuses it
// (ErrNotParked) unless it is still parked: what republish and drop, dry
// run or not, both check first.
func getParked(ctx context.Context, ps *ParkedStore, relay string, shard int, position int64) (ParkedRecord, error) {
	p, err := ps.GetShard(ctx, relay, shard, position)
	if err != nil {
		return p, err
	}
	if p.State != ParkedStateParked {
		return p, fmt.Errorf("%w: relay %s, %s is %s", ErrNotParked, relay, where(shard, position), p.State)
	}
	return p, nil
}

// DropParked marks the parked record at position of relay dropped: the
// operator decided it is not to be published. The row (and the envelope in
// it) stays for the record. A dry run only checks that the row is parked.
func DropParked(ctx context.Context, ps *ParkedStore, relay string, position int64, opts ResolveOptions) (ParkedRecord, error) {
	p, err := getParked(ctx, ps, relay, opts.Shard, position)
	if err != nil || opts.DryRun {
		return p, err
	}
	return p, ps.resolve(ctx, relay, opts.Shard, position, ParkedStateDropped, "")
}

// authorization errors are the relay's credentials, not the record's: they
// pause like an outage and are never parked.
var notParkable = []*kerr.Error{
	kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed, kerr.GroupAuthorizationFailed,
	kerr.TransactionalIDAuthorizationFailed, kerr.SaslAuthenticationFailed, kerr.UnknownServerError,
	kerr.InvalidReplicationFactor, kerr.InvalidPartitions, kerr.InvalidConfig, kerr.InvalidRequest,
	kerr.UnsupportedVersion, kerr.OutOfOrderSequenceNumber, kerr.InvalidProducerEpoch,
	kerr.InvalidProducerIDMapping, kerr.UnknownProducerID, kerr.DuplicateSequenceNumber,
}

// parkReason classifies a failure to produce a record, or to create its
// topic: ok when it is the record's own (failure.Permanent and not one of
// the relay-wide refusals above) and the record may be parked after the
// bounded retries; otherwise the relay retries without limit, as for an
// outage (readiness red, nothing skipped).
func parkReason(ctx context.Context, err error) (reason string, ok bool) {
	if failure.Classify(ctx, err) != failure.Permanent {
		return "", false
	}
	for _, ke := range notParkable {
		if errors.Is(err, ke) {
			return "", false
		}
	}
	var te *kafka.TopicError
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return ReasonTooLarge, true
	case errors.As(err, &te) && te.Collides != "":
		return ReasonTopicCollision, true
	case errors.As(err, &te), errors.Is(err, kerr.InvalidTopicException):
		return ReasonInvalidTopic, true
	}
	return ReasonRejected, true
}

// headersString renders headers for the CLI.
func headersString(hs []kgo.RecordHeader) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = h.Key + "=" + string(h.Value)
	}
	return strings.Join(parts, " ")
}

// HeadersString renders a parked record's headers as key=value pairs.
func (p ParkedRecord) HeadersString() string { return headersString(p.Headers) }
