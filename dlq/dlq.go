// Package dlq is the operator's side of dead letters: list, show, redrive
// and drop the records a worker gave up on (docs/worker-runtime.md, "Dead
// letters"; docs/operator-commands.md). `sluice dlq` and the admin API call
// the same code.
//
// A dead letter is identified by its DLQ partition and offset, written
// "P:O". What an operator did with a letter is recorded durably in a
// compacted sidecar topic, {dlq topic}.handled: one record per letter, key
// "P:O", value a Marker; the latest record of a key wins. List hides letters
// marked redriven or dropped unless asked for all.
//
// Redrive of one letter, made idempotent by the marker and the registry:
//  1. a letter already marked redriven or dropped is skipped; so is a letter
//     whose original record (topic/partition/offset) was already redriven
//     through another letter (the DLQ may hold duplicates);
//  2. the marker "redriving" is written (intent);
//  3. Registry.Redrive(handler, event_id) resets the dead row. A row that is
//     no longer dead means someone else redrove it (or the worker finished
//     it): the letter is marked redriven without producing — unless this
//     letter's own intent marker was already there (a redrive interrupted
//     between the reset and the produce), in which case the produce is
//     repeated; no row at all (parse errors have none) goes on to the
//     produce;
//  4. the original record (key, value, headers) is produced to its original
//     topic and acknowledged;
//  5. the marker "redriven" is written.
//
// A crash between 4 and 5 makes a second run produce the record again; the
// worker's registry absorbs that duplicate (at most one side effect per
// event_id), the usual "duplicate work over lost work".
package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/kafka"
)

// Letter states, as recorded in the handled topic ("new": no marker).
const (
	StateNew       = "new"
	StateRedriving = "redriving"
	StateRedriven  = "redriven"
	StateDropped   = "dropped"
)

// ErrNoLetter matches the error of Show, Redrive and Drop when no letter
// is at the given partition and offset.
var ErrNoLetter = errors.New("no dead letter")

// Marker is the value of a {dlq topic}.handled record.
type Marker struct {
	Action            string    `json:"action"`
	DLQTopic          string    `json:"dlq_topic"`
	DLQPartition      int32     `json:"dlq_partition"`
	DLQOffset         int64     `json:"dlq_offset"`
	OriginalTopic     string    `json:"original_topic"`
	OriginalPartition int32     `json:"original_partition"`
	OriginalOffset    int64     `json:"original_offset"`
	Handler           string    `json:"handler,omitempty"`
	EventID           string    `json:"event_id,omitempty"`
	Note              string    `json:"note,omitempty"`
	At                time.Time `json:"at"`
	By                string    `json:"by"`
}

// Registry is what redrive needs of the processed-event registry
// (*registry.Registry).
type Registry interface {
	Get(ctx context.Context, eventID string) ([]claim.Row, error)
	Redrive(ctx context.Context, handler, eventID string) error
}

// Config configures a Queue.
type Config struct {
	// Topic is the dead-letter topic (COMMANDS_DLQ_TOPIC, EVENTS_DLQ_TOPIC).
	// Required.
	Topic string
	// Kafka is the KAFKA_* configuration its clients are built from
	// (kafka.NewClient: brokers, TLS, SASL, producer settings).
	Kafka kafka.Config
	// ReplicationFactor of the handled topic when it is created; -1 (or
	// 0) takes the cluster's default.replication.factor (KIP-464).
	ReplicationFactor int16
	// By says who acts, in the markers (user@host, an admin token's name).
	By string
}

// Deps are the resources of a Queue.
type Deps struct {
	// Registry resets the dead rows on redrive; required by Redrive.
	Registry Registry
}

// Option is a test hook of a Queue (docs/architecture.md, "One
// construction convention"); there is none yet.
type Option func(*hooks)

type hooks struct{}

// Queue is one dead-letter topic with its handled topic.
type Queue struct {
	cfg  Config // defaults applied
	deps Deps
	cl   *kgo.Client
	adm  *kadm.Client
}

// New connects to the brokers for the dead-letter topic cfg.Topic.
// The caller calls Close.
func New(cfg Config, deps Deps, opts ...Option) (*Queue, error) {
	if cfg.Topic == "" {
		return nil, errors.New("dlq: no topic")
	}
	if cfg.ReplicationFactor == 0 {
		cfg.ReplicationFactor = -1
	}
	var h hooks
	for _, o := range opts {
		o(&h)
	}
	cl, err := kafka.NewClient(cfg.Kafka, kafka.MaxBuffered(100))
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	return &Queue{cfg: cfg, deps: deps, cl: cl, adm: kadm.NewClient(cl)}, nil
}

// Close releases the Kafka client.
func (q *Queue) Close() { q.cl.Close() }

// Topic is the dead-letter topic.
func (q *Queue) Topic() string { return q.cfg.Topic }

// HandledTopic is the compacted topic of the markers.
func (q *Queue) HandledTopic() string { return q.cfg.Topic + ".handled" }

// Markers reads the handled topic: the latest marker per letter ID.
func (q *Queue) Markers(ctx context.Context) (map[string]Marker, error) {
	ms := map[string]Marker{}
	err := readTopicRange(ctx, q.cfg.Kafka, q.adm, q.HandledTopic(), -1, -1, true, nil, func(r *kgo.Record) (bool, error) {
		var m Marker
		if err := json.Unmarshal(r.Value, &m); err != nil {
			return false, fmt.Errorf("%s %d/%d: %w", q.HandledTopic(), r.Partition, r.Offset, err)
		}
		ms[string(r.Key)] = m
		return false, nil
	})
	return ms, err
}

// StateOf is the state of l in the markers ms.
func StateOf(ms map[string]Marker, l *Letter) string {
	if m, ok := ms[l.ID()]; ok {
		return m.Action
	}
	return StateNew
}

// writeMarker records what was done with l, durably (acks=all).
func (q *Queue) writeMarker(ctx context.Context, l *Letter, action, note string) error {
	_, err := q.adm.CreateTopic(ctx, 1, q.cfg.ReplicationFactor,
		map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, q.HandledTopic())
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create %s: %w", q.HandledTopic(), err)
	}
	m := Marker{Action: action, DLQTopic: q.cfg.Topic, DLQPartition: l.Partition, DLQOffset: l.Offset,
		OriginalTopic: l.Record.OriginalTopic, OriginalPartition: l.Record.OriginalPartition, OriginalOffset: l.Record.OriginalOffset,
		Handler: l.Record.Handler, EventID: l.EventID(), Note: note, At: time.Now().UTC(), By: q.cfg.By}
	b, _ := json.Marshal(m)
	if err := q.cl.ProduceSync(ctx, &kgo.Record{Topic: q.HandledTopic(), Key: []byte(l.ID()), Value: b}).FirstErr(); err != nil {
		return fmt.Errorf("record %s of %s in %s: %w", action, l.ID(), q.HandledTopic(), err)
	}
	return nil
}

// Letters reads every letter of the topic, in partition and offset order;
// prog (optional) is told of each record read.
func (q *Queue) Letters(ctx context.Context, prog ProgressFunc) ([]*Letter, error) {
	var out []*Letter
	err := readTopicRange(ctx, q.cfg.Kafka, q.adm, q.cfg.Topic, -1, -1, false, prog, func(r *kgo.Record) (bool, error) {
		out = append(out, ParseLetter(r))
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out, nil
}

// Ref names one letter. Partition -1 means the topic's only partition (an
// error when it has several).
type Ref struct {
	Partition int32
	Offset    int64
}

// resolvePartition picks the partition of a Ref.
func (q *Queue) resolvePartition(ctx context.Context, p int32) (int32, error) {
	if p >= 0 {
		return p, nil
	}
	td, err := q.adm.ListTopics(ctx, q.cfg.Topic)
	if err != nil {
		return 0, err
	}
	t, ok := td[q.cfg.Topic]
	if !ok || t.Err != nil {
		return 0, fmt.Errorf("topic %s: %w", q.cfg.Topic, errors.Join(t.Err, kerr.UnknownTopicOrPartition))
	}
	if len(t.Partitions) != 1 {
		return 0, &PartitionRequiredError{Topic: q.cfg.Topic, Partitions: len(t.Partitions)}
	}
	return 0, nil
}

// PartitionRequiredError is a letter named by its offset alone on a topic
// of several partitions: the caller's input is incomplete (an admin API
// answers 400, not an outage).
type PartitionRequiredError struct {
	Topic      string
	Partitions int
}

func (e *PartitionRequiredError) Error() string {
	return fmt.Sprintf("topic %s has %d partitions: give --partition (dlq list shows letters as partition:offset)", e.Topic, e.Partitions)
}

// Letter reads the letter at ref; an error wrapping ErrNoLetter when there
// is none.
func (q *Queue) Letter(ctx context.Context, ref Ref) (*Letter, error) {
	p, err := q.resolvePartition(ctx, ref.Partition)
	if err != nil {
		return nil, err
	}
	var l *Letter
	err = readTopicRange(ctx, q.cfg.Kafka, q.adm, q.cfg.Topic, p, ref.Offset, false, nil, func(r *kgo.Record) (bool, error) {
		if r.Offset == ref.Offset {
			l = ParseLetter(r)
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("%w at %s %d:%d", ErrNoLetter, q.cfg.Topic, p, ref.Offset)
	}
	return l, nil
}

// Original is l.Original(), or for a letter in pointer form (the original
// was too large to embed, consumer.DLQRecord.OriginalTruncated) the
// original record read back from Kafka at its topic, partition and offset;
// an error says so when retention has removed it, and names the way out.
func (q *Queue) Original(ctx context.Context, l *Letter) (*kgo.Record, error) {
	if l.Bad != nil || !l.Record.OriginalTruncated {
		return l.Original()
	}
	var orig *kgo.Record
	err := readTopicRange(ctx, q.cfg.Kafka, q.adm, l.Record.OriginalTopic, l.Record.OriginalPartition, l.Record.OriginalOffset, false, nil,
		func(r *kgo.Record) (bool, error) {
			if r.Offset == l.Record.OriginalOffset {
				orig = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
			}
			return true, nil
		})
	if err == nil && orig == nil {
		err = errors.New("no record at that offset any more (retention or compaction removed it)")
	}
	if err != nil {
		return nil, fmt.Errorf("dlq %s: pointer form: read the original at %s: %w; republish it from the event store instead "+
			"(event_id %q, position %d: sluice relay republish)", l.ID(), l.OriginalRef(), err, l.EventID(), l.Record.OriginalPosition)
	}
	return orig, nil
}

// ListOptions select the letters of List.
type ListOptions struct {
	// All includes the letters already redriven or dropped.
	All bool
	// Limit is the most letters returned (0: all).
	Limit int
	// Progress, when set, is told of each record read.
	Progress ProgressFunc
}

// ListEntry is one listed letter with its state.
type ListEntry struct {
	*Letter
	State string
}

// ListResult is what List found.
type ListResult struct {
	Topic   string
	Letters []ListEntry
	// Total letters in the topic; Handled of them redriven or dropped,
	// Hidden of those left out (without All); More left out by Limit.
	Total, Handled, Hidden, More int
	// Read is the number of records read from the topic.
	Read int64
}

// List reads the letters with their states.
func (q *Queue) List(ctx context.Context, o ListOptions) (ListResult, error) {
	res := ListResult{Topic: q.cfg.Topic, Letters: []ListEntry{}}
	ms, err := q.Markers(ctx)
	if err != nil {
		return res, err
	}
	prog := func(done, total int64) {
		res.Read = total
		if o.Progress != nil {
			o.Progress(done, total)
		}
	}
	ls, err := q.Letters(ctx, prog)
	if err != nil {
		return res, err
	}
	res.Total = len(ls)
	for _, l := range ls {
		st := StateOf(ms, l)
		if st == StateRedriven || st == StateDropped {
			res.Handled++
			if !o.All {
				res.Hidden++
				continue
			}
		}
		if o.Limit > 0 && len(res.Letters) >= o.Limit {
			res.More++
			continue
		}
		res.Letters = append(res.Letters, ListEntry{Letter: l, State: st})
	}
	return res, nil
}

// ShowResult is one letter in full.
type ShowResult struct {
	Letter *Letter
	State  string
	// Marker is the latest marker of the letter, nil when none.
	Marker *Marker
	// Original is the original record (read back from Kafka for a letter
	// in pointer form); nil with OriginalErr set when it cannot be had.
	Original    *kgo.Record
	OriginalErr error
}

// Show reads one letter, its state and its original record.
func (q *Queue) Show(ctx context.Context, ref Ref) (ShowResult, error) {
	l, err := q.Letter(ctx, ref)
	if err != nil {
		return ShowResult{}, err
	}
	ms, err := q.Markers(ctx)
	if err != nil {
		return ShowResult{}, err
	}
	res := ShowResult{Letter: l, State: StateOf(ms, l)}
	if m, ok := ms[l.ID()]; ok {
		res.Marker = &m
	}
	if l.Bad == nil {
		res.Original, res.OriginalErr = q.Original(ctx, l)
	}
	return res, nil
}

// DropResult is what Drop did.
type DropResult struct {
	Letter *Letter
	// Already is the earlier marker when the letter was already redriven
	// or dropped (nothing changed).
	Already *Marker
	// Dropped is true when the drop marker was written (false on a dry run).
	Dropped bool
}

// Drop records, durably, that a letter needs no redrive: List hides it
// from then on and Redrive skips it. The letter stays in the DLQ topic, its
// registry row stays dead. dryRun checks and changes nothing.
func (q *Queue) Drop(ctx context.Context, ref Ref, reason string, dryRun bool) (DropResult, error) {
	l, err := q.Letter(ctx, ref)
	if err != nil {
		return DropResult{}, err
	}
	ms, err := q.Markers(ctx)
	if err != nil {
		return DropResult{}, err
	}
	res := DropResult{Letter: l}
	if m, ok := ms[l.ID()]; ok && (m.Action == StateDropped || m.Action == StateRedriven) {
		res.Already = &m
		return res, nil
	}
	if dryRun {
		return res, nil
	}
	if err := q.writeMarker(ctx, l, StateDropped, reason); err != nil {
		return res, err
	}
	res.Dropped = true
	return res, nil
}

// Counts are the letters of a topic without reading them: Total retained
// records (end − start offsets), Handled the letters marked redriven or
// dropped, Open the difference.
type Counts struct {
	Topic   string `json:"topic"`
	Total   int64  `json:"total"`
	Handled int64  `json:"handled"`
	Open    int64  `json:"open"`
}

// Count returns the topic's Counts (a missing topic counts zero).
func (q *Queue) Count(ctx context.Context) (Counts, error) {
	c := Counts{Topic: q.cfg.Topic}
	starts, err := q.adm.ListStartOffsets(ctx, q.cfg.Topic)
	if err == nil {
		err = starts.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("topic %s: %w", q.cfg.Topic, err)
	}
	ends, err := q.adm.ListEndOffsets(ctx, q.cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return c, fmt.Errorf("topic %s: %w", q.cfg.Topic, err)
	}
	ends.Each(func(e kadm.ListedOffset) {
		s, _ := starts.Lookup(e.Topic, e.Partition)
		c.Total += max(e.Offset-s.Offset, 0)
	})
	ms, err := q.Markers(ctx)
	if err != nil {
		return c, err
	}
	for _, m := range ms {
		if m.Action == StateRedriven || m.Action == StateDropped {
			c.Handled++
		}
	}
	c.Open = max(c.Total-c.Handled, 0)
	return c, nil
}
