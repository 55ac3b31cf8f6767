package inspect

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/recordformat"
)

// located is where a published record was found.
type located struct {
	topic     string
	partition int32
	offset    int64
	at        time.Time
}

// lookupTimeout bounds one read-back of a partition.
const lookupTimeout = 10 * time.Second

// published is the relay's step for ev: parked (with its fate), or
// published with the record's topic, partition and offset as read back
// from Kafka, or pending while the checkpoint is below the position.
func (in *Inspector) published(ctx context.Context, ev eventstore.Event, since time.Time, src *sources, warn func(string, ...any)) (Step, *located) {
	e := ev.Envelope
	st := Step{Step: "published", State: StateUnknown, Position: e.Position}
	topic := ""
	if in.o.Router != nil {
		topic = in.o.Router.Topic(e)
	}
	passed := src.checkpoint != nil && src.checkpoint.Position >= e.Position
	if in.o.Parked != nil {
		p, err := in.o.Parked.Get(ctx, in.o.RelayName, e.Position)
		switch {
		case err == nil:
			st = Step{Step: "parked", State: StateParked, At: p.ParkedAt, Position: e.Position, Topic: p.Topic, Attempts: p.Attempts,
				Error: p.Reason + ": " + p.Error, Status: p.State,
				Detail: "Kafka refused the record " + strconv.Itoa(p.Attempts) + " times; the relay parked it and moved on"}
			switch p.State {
			case relay.ParkedStateDropped:
				st.State, st.Detail = StateSkipped, "parked, then dropped by an operator at "+p.ResolvedAt.UTC().Format(time.RFC3339)
				return st, nil
			case relay.ParkedStateRepublished:
				st.State = StateDone
				st.Detail = "parked, then republished by an operator at " + p.ResolvedAt.UTC().Format(time.RFC3339)
				topic = p.ResolvedTopic
				if topic == "" {
					topic = p.Topic
				}
			default:
				return st, nil
			}
		case !errors.Is(err, relay.ErrParkedNotFound):
			warn("parked records: %v", err)
		}
	}
	if st.Step == "published" {
		switch {
		case src.checkpoint == nil:
			st.Detail = "relay checkpoint not readable"
		case passed:
			st.State, st.Detail = StateDone, "acknowledged by Kafka: the relay checkpoint ("+strconv.FormatInt(src.checkpoint.Position, 10)+") is past it"
		default:
			st.State, st.Detail = StatePending, "not yet: the relay checkpoint is at "+strconv.FormatInt(src.checkpoint.Position, 10)
		}
	}
	st.Topic = topic
	if in.adm == nil || topic == "" {
		return st, nil
	}
	loc, scanned, err := in.locate(ctx, topic, envelope.KafkaKey(e), e.Position, since.Add(-in.o.ClockSkew))
	switch {
	case err != nil:
		warn("read back %s at position %d: %v", topic, e.Position, err)
		return st, nil
	case loc == nil:
		if passed && st.Step == "published" {
			st.Detail += fmt.Sprintf("; the record was not found in %d records read back (retention, or republished elsewhere)", scanned)
		}
		return st, nil
	}
	st.Partition, st.Offset = &loc.partition, &loc.offset
	if st.Step == "published" {
		st.State, st.At = StateDone, loc.at
		if !passed {
			st.Detail = "in Kafka; the relay checkpoint has not passed it yet"
		}
	}
	return st, loc
}

// locate finds the record of position in topic: its partition follows from
// the key (the producer's default partitioner, as the relay's), and the
// partition is read from the first offset at or after since (ListOffsets by
// timestamp) until the record, the end of the partition or ScanLimit
// records. nil when not found; scanned counts the records read.
func (in *Inspector) locate(ctx context.Context, topic string, key []byte, position int64, since time.Time) (*located, int, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	md, err := in.adm.ListTopics(ctx, topic)
	if err != nil {
		return nil, 0, err
	}
	td, ok := md[topic]
	if !ok || td.Err != nil || len(td.Partitions) == 0 {
		if ok && td.Err != nil {
			return nil, 0, td.Err
		}
		return nil, 0, fmt.Errorf("topic %s has no partitions", topic)
	}
	p := PartitionOf(topic, key, len(td.Partitions))
	starts, err := in.adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topic)
	if err != nil {
		return nil, 0, err
	}
	ends, err := in.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, 0, err
	}
	so, ok1 := starts.Lookup(topic, p)
	eo, ok2 := ends.Lookup(topic, p)
	if !ok1 || !ok2 || so.Err != nil || eo.Err != nil {
		return nil, 0, fmt.Errorf("offsets of %s[%d]: %v %v", topic, p, so.Err, eo.Err)
	}
	start, end := so.Offset, eo.Offset
	if start < 0 || start >= end {
		return nil, 0, nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, in.o.KafkaOpts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(start)}}),
		kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		return nil, 0, err
	}
	defer cl.Close()
	scanned := 0
	for scanned < in.o.ScanLimit {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, scanned, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, scanned, ferr
		}
		last := int64(-1)
		var found *located
		fs.EachRecord(func(r *kgo.Record) {
			if found != nil {
				return
			}
			scanned++
			last = r.Offset
			if p, ok := recordformat.Position(r.Headers); ok && p == position { // either record format
				found = &located{topic: topic, partition: r.Partition, offset: r.Offset, at: r.Timestamp}
			}
		})
		if found != nil {
			return found, scanned, nil
		}
		if last+1 >= end {
			return nil, scanned, nil
		}
	}
	return nil, scanned, nil
}

// PartitionOf is the partition the relay's producer (franz-go's default
// partitioner: murmur2 of the key, as Kafka's Java client) puts a record
// with key into, of n partitions.
func PartitionOf(topic string, key []byte, n int) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic(topic).Partition(&kgo.Record{Topic: topic, Key: key}, n))
}

// groupCommits reads every consumer group's committed offsets.
func (in *Inspector) groupCommits(ctx context.Context) (map[string]map[string]map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	groups, err := in.adm.ListGroups(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]map[int32]int64{}
	names := groups.Groups()
	if len(names) == 0 {
		return out, nil
	}
	for g, resp := range in.adm.FetchManyOffsets(ctx, names...) {
		if resp.Err != nil {
			return nil, fmt.Errorf("group %s: %w", g, resp.Err)
		}
		m := map[string]map[int32]int64{}
		resp.Fetched.Each(func(o kadm.OffsetResponse) {
			if o.Err != nil || o.At < 0 {
				return
			}
			if m[o.Topic] == nil {
				m[o.Topic] = map[int32]int64{}
			}
			m[o.Topic][o.Partition] = o.At
		})
		out[g] = m
	}
	return out, nil
}

// commitSteps are the offset commits of the record at loc: one per group
// with a commit on its partition, and a pending one for each configured
// handler's group without.
func (in *Inspector) commitSteps(kind envelope.Kind, loc located, src *sources) []Step {
	if !src.commitsLoaded {
		return []Step{{Step: "offset_commit", State: StateUnknown, Topic: loc.topic, Detail: "consumer group offsets not readable"}}
	}
	handlerOf := map[string]string{}
	for _, h := range in.o.Handlers {
		handlerOf[h.Group] = h.Name
	}
	var groups []string
	for g, topics := range src.commits {
		if _, ok := topics[loc.topic][loc.partition]; ok {
			groups = append(groups, g)
		}
	}
	for _, h := range in.o.Handlers {
		if h.Kind == kind && src.commits[h.Group][loc.topic] == nil {
			groups = append(groups, h.Group)
		}
	}
	sort.Strings(groups)
	var out []Step
	for _, g := range groups {
		part, off := loc.partition, loc.offset
		st := Step{Step: "offset_commit", Group: g, Handler: handlerOf[g], Topic: loc.topic, Partition: &part, Offset: &off}
		c, ok := src.commits[g][loc.topic][loc.partition]
		switch {
		case !ok:
			st.State, st.Detail = StatePending, "the group has committed nothing on this partition"
		case c > loc.offset:
			st.State, st.Detail = StateDone, fmt.Sprintf("committed offset %d is past the record (%d)", c, loc.offset)
		default:
			st.State, st.Detail = StatePending, fmt.Sprintf("committed offset %d has not passed the record (%d) yet", c, loc.offset)
		}
		if ok {
			st.Committed = &c
		}
		out = append(out, st)
	}
	return out
}
