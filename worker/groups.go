package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Consumer-group offset tools, shared by `sluice consumer` and the admin
// API: the lag of a group, and a reset of its committed offsets to replay
// or skip a topic. Replaying a topic into a worker group means: stop the
// group's workers, Reset, start them again; the registry absorbs the
// duplicates (at most one side effect per event_id).

// ErrGroupActive matches the error of ResetOffsets when the group has live
// members (stop its workers first, or Force).
var ErrGroupActive = errors.New("consumer group has live members")

// PartitionLag is one partition of a group's lag.
type PartitionLag struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Committed is the group's committed offset, -1 when none.
	Committed int64 `json:"committed"`
	Start     int64 `json:"start"`
	End       int64 `json:"end"`
	// Lag is End − Committed, or End − Start when nothing is committed
	// (everything retained is unread).
	Lag int64 `json:"lag"`
}

// GroupLag is a consumer group's lag over its topics.
type GroupLag struct {
	Group      string         `json:"group"`
	Topics     []string       `json:"topics"`
	Partitions []PartitionLag `json:"partitions"`
	Total      int64          `json:"total"`
	// Members and State describe the group; MembersKnown is false when
	// describing it failed.
	Members      int    `json:"members"`
	State        string `json:"state"`
	MembersKnown bool   `json:"members_known"`
}

// groupTopics returns the topics to work on: topic, else every topic the
// group has committed offsets for.
func groupTopics(committed kadm.OffsetResponses, topic string) []string {
	if topic != "" {
		return []string{topic}
	}
	var ts []string
	for t := range committed {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

func fetchCommitted(ctx context.Context, adm *kadm.Client, group string) (kadm.OffsetResponses, error) {
	committed, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = committed.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		// Kafka answers an unknown group with no offsets; some brokers
		// (kfake) with this error: the same thing.
		return kadm.OffsetResponses{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("group %s: offsets: %w", group, err)
	}
	return committed, nil
}

func listStartEnd(ctx context.Context, adm *kadm.Client, topics []string) (kadm.ListedOffsets, kadm.ListedOffsets, error) {
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("end offsets: %w", err)
	}
	return starts, ends, nil
}

func sortedListed(l kadm.ListedOffsets) []kadm.ListedOffset {
	var out []kadm.ListedOffset
	l.Each(func(o kadm.ListedOffset) { out = append(out, o) })
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// Lag returns group's committed offset, end offset and lag per partition
// of topic (""; every topic the group committed offsets for). A group
// without committed offsets and no topic given has no partitions.
func Lag(ctx context.Context, adm *kadm.Client, group, topic string) (GroupLag, error) {
	res := GroupLag{Group: group, Topics: []string{}, Partitions: []PartitionLag{}}
	committed, err := fetchCommitted(ctx, adm, group)
	if err != nil {
		return res, err
	}
	res.Topics = groupTopics(committed, topic)
	if len(res.Topics) == 0 {
		return res, nil
	}
	starts, ends, err := listStartEnd(ctx, adm, res.Topics)
	if err != nil {
		return res, err
	}
	if dg, err := adm.DescribeGroups(ctx, group); err == nil {
		if g, ok := dg[group]; ok && g.Err == nil {
			res.Members, res.State, res.MembersKnown = len(g.Members), g.State, true
		}
	}
	for _, e := range sortedListed(ends) {
		p := PartitionLag{Topic: e.Topic, Partition: e.Partition, Committed: -1, End: e.Offset}
		s, hasStart := starts.Lookup(e.Topic, e.Partition)
		if hasStart {
			p.Start = s.Offset
		}
		if o, ok := committed.Lookup(e.Topic, e.Partition); ok && o.At >= 0 {
			p.Committed = o.At
			p.Lag = max(e.Offset-o.At, 0)
		} else if hasStart {
			p.Lag = max(e.Offset-s.Offset, 0) // nothing committed: everything retained is unread
		}
		res.Total += p.Lag
		res.Partitions = append(res.Partitions, p)
	}
	return res, nil
}

// Reset targets.
const (
	ResetEarliest = "earliest" // the log start offset: replay everything retained
	ResetLatest   = "latest"   // the end offset: skip everything not yet consumed
	ResetTime     = "time"     // the first offset with a timestamp at or after At; the end when none
	ResetOffset   = "offset"   // Offset, clamped to [start, end] of each partition
)

// ResetTarget is where ResetOffsets moves a group.
type ResetTarget struct {
	Kind   string    `json:"kind"`
	At     time.Time `json:"at,omitzero"`
	Offset int64     `json:"offset,omitempty"`
}

// String is the target as ParseResetTarget reads it.
func (t ResetTarget) String() string {
	switch t.Kind {
	case ResetTime:
		return "time:" + t.At.Format(time.RFC3339Nano)
	case ResetOffset:
		return "offset:" + strconv.FormatInt(t.Offset, 10)
	}
	return t.Kind
}

// ParseResetTarget reads earliest, latest, time:<RFC 3339> or offset:<N>.
func ParseResetTarget(s string) (ResetTarget, error) {
	switch {
	case s == ResetEarliest || s == ResetLatest:
		return ResetTarget{Kind: s}, nil
	case strings.HasPrefix(s, "time:"):
		t, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(s, "time:"))
		if err != nil {
			return ResetTarget{}, fmt.Errorf("--to %q: want time:<RFC 3339>: %w", s, err)
		}
		return ResetTarget{Kind: ResetTime, At: t}, nil
	case strings.HasPrefix(s, "offset:"):
		n, err := strconv.ParseInt(strings.TrimPrefix(s, "offset:"), 10, 64)
		if err != nil || n < 0 {
			return ResetTarget{}, fmt.Errorf("--to %q: want offset:<N >= 0>", s)
		}
		return ResetTarget{Kind: ResetOffset, Offset: n}, nil
	}
	return ResetTarget{}, fmt.Errorf("--to %q: want earliest, latest, time:<RFC 3339> or offset:<N>", s)
}

// ResetOptions are a reset of one group's offsets.
type ResetOptions struct {
	Group string
	// Topic to reset; "" every topic the group committed offsets for.
	Topic string
	To    ResetTarget
	// DryRun computes the new offsets and commits nothing.
	DryRun bool
	// Force commits although the group has live members (Kafka itself
	// refuses commits from outside a group with members, so this only
	// helps once they are gone or about to time out).
	Force bool
}

// ResetPartition is one partition of a reset.
type ResetPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Current is the committed offset before, -1 when none.
	Current int64 `json:"current"`
	New     int64 `json:"new"`
	Start   int64 `json:"start"`
	End     int64 `json:"end"`
}

// ResetResult is what ResetOffsets did (or would do).
type ResetResult struct {
	Group      string           `json:"group"`
	To         string           `json:"to"`
	DryRun     bool             `json:"dry_run"`
	Partitions []ResetPartition `json:"partitions"`
	// Members are the group's live members (client id @ host) and State
	// its state when the reset ran.
	Members []string `json:"members"`
	State   string   `json:"state"`
	// Committed is true when the new offsets were committed.
	Committed bool `json:"committed"`
}

// ResetOffsets sets a consumer group's committed offsets for every
// partition of its topics to o.To. It refuses (ErrGroupActive, nothing
// changed, the result names the members) while the group has live members,
// unless DryRun or Force. On a commit failure the result holds the plan.
func ResetOffsets(ctx context.Context, adm *kadm.Client, o ResetOptions) (ResetResult, error) {
	res := ResetResult{Group: o.Group, To: o.To.String(), DryRun: o.DryRun, Partitions: []ResetPartition{}, Members: []string{}}
	dg, err := adm.DescribeGroups(ctx, o.Group)
	if err != nil {
		return res, fmt.Errorf("describe group %s: %w", o.Group, err)
	}
	g := dg[o.Group]
	if g.Err != nil {
		return res, fmt.Errorf("describe group %s: %w", o.Group, g.Err)
	}
	res.State = g.State
	for _, m := range g.Members {
		res.Members = append(res.Members, m.ClientID+"@"+m.ClientHost)
	}
	if len(res.Members) > 0 && !o.Force && !o.DryRun {
		return res, fmt.Errorf("%w: %s", ErrGroupActive, res.MembersText())
	}
	committed, err := fetchCommitted(ctx, adm, o.Group)
	if err != nil {
		return res, err
	}
	topics := groupTopics(committed, o.Topic)
	if len(topics) == 0 {
		return res, fmt.Errorf("group %s has no committed offsets: give --topic", o.Group)
	}
	starts, ends, err := listStartEnd(ctx, adm, topics)
	if err != nil {
		return res, err
	}
	var atTime kadm.ListedOffsets
	if o.To.Kind == ResetTime {
		if atTime, err = adm.ListOffsetsAfterMilli(ctx, o.To.At.UnixMilli(), topics...); err == nil {
			err = atTime.Error()
		}
		if err != nil {
			return res, fmt.Errorf("offsets at %s: %w", o.To.At.Format(time.RFC3339), err)
		}
	}
	var set kadm.Offsets
	for _, e := range sortedListed(ends) {
		s, _ := starts.Lookup(e.Topic, e.Partition)
		var n int64
		switch o.To.Kind {
		case ResetEarliest:
			n = s.Offset
		case ResetLatest:
			n = e.Offset
		case ResetTime:
			n = e.Offset
			if at, ok := atTime.Lookup(e.Topic, e.Partition); ok && at.Offset >= 0 {
				n = at.Offset
			}
		case ResetOffset:
			n = min(max(o.To.Offset, s.Offset), e.Offset)
		default:
			return res, fmt.Errorf("reset target %q: want earliest, latest, time or offset", o.To.Kind)
		}
		cur := int64(-1)
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok && c.At >= 0 {
			cur = c.At
		}
		res.Partitions = append(res.Partitions, ResetPartition{Topic: e.Topic, Partition: e.Partition, Current: cur, New: n, Start: s.Offset, End: e.Offset})
		set.AddOffset(e.Topic, e.Partition, n, -1)
	}
	if o.DryRun {
		return res, nil
	}
	resp, err := adm.CommitOffsets(ctx, o.Group, set)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return res, fmt.Errorf("commit offsets of group %s: %w (Kafka refuses commits from outside a group with live members)", o.Group, err)
	}
	res.Committed = true
	return res, nil
}

// MembersText describes the live members: "group G has N live members
// (ids, state S): stop its workers first".
func (r ResetResult) MembersText() string {
	return fmt.Sprintf("group %s has %d live members (%s, state %s): stop its workers first", r.Group, len(r.Members), strings.Join(r.Members, ", "), r.State)
}
