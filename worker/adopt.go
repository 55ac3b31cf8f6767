package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sluicehq/sluice/shared/kafka"
)

// CopyOptions are a copy of one group's committed offsets on a topic to
// another group: the migration of a worker to a new group id (issue 27:
// KAFKA_GROUP_PREFIX) without re-reading the topic.
type CopyOptions struct {
	From, To string
	// Topic whose offsets are copied. Required.
	Topic string
	// DryRun computes the copy and commits nothing.
	DryRun bool
	// Force commits although To already has committed offsets on Topic
	// (they are overwritten) or From has live members.
	Force bool
}

// CopyPartition is one partition of a copy.
type CopyPartition struct {
	Partition int32 `json:"partition"`
	// From is From's committed offset; Current is To's before, -1 when
	// none.
	From    int64 `json:"from"`
	Current int64 `json:"current"`
}

// CopyResult is what CopyOffsets did (or would do).
type CopyResult struct {
	From       string          `json:"from"`
	To         string          `json:"to"`
	Topic      string          `json:"topic"`
	DryRun     bool            `json:"dry_run"`
	Partitions []CopyPartition `json:"partitions"`
	// FromMembers and ToMembers are the live members of each group.
	FromMembers []string `json:"from_members"`
	ToMembers   []string `json:"to_members"`
	// Committed is true when To's offsets were committed.
	Committed bool `json:"committed"`
}

// ErrTargetHasOffsets refuses a copy onto a group that already committed
// offsets on the topic (it is in use: Force overwrites).
var ErrTargetHasOffsets = errors.New("target group already has committed offsets")

// ErrNoOffsets: the source group has no committed offset on the topic.
var ErrNoOffsets = errors.New("source group has no committed offsets")

// CopyOffsets commits From's committed offsets on o.Topic as To's. It
// refuses (nothing changed) when To has live members (Kafka refuses the
// commit anyway: ErrGroupActive), when To already has committed offsets on
// the topic (ErrTargetHasOffsets), or when From has live members — its
// offsets still move, and a copy of them would be stale (ErrGroupActive) —
// unless DryRun or Force. Records between a stale copied offset and the
// source's final one are read twice: the registry absorbs that.
func CopyOffsets(ctx context.Context, adm *kadm.Client, o CopyOptions) (CopyResult, error) {
	res := CopyResult{From: o.From, To: o.To, Topic: o.Topic, DryRun: o.DryRun, Partitions: []CopyPartition{}, FromMembers: []string{}, ToMembers: []string{}}
	if o.From == "" || o.To == "" || o.Topic == "" || o.From == o.To {
		return res, errors.New("consumer: copy offsets needs two different groups and a topic")
	}
	dg, err := adm.DescribeGroups(ctx, o.From, o.To)
	if err != nil {
		return res, fmt.Errorf("describe groups: %w", err)
	}
	for name, dst := range map[string]*[]string{o.From: &res.FromMembers, o.To: &res.ToMembers} {
		g := dg[name]
		if g.Err != nil && !errors.Is(g.Err, kerr.GroupIDNotFound) {
			return res, fmt.Errorf("describe group %s: %w", name, g.Err)
		}
		for _, m := range g.Members {
			*dst = append(*dst, m.ClientID+"@"+m.ClientHost)
		}
		sort.Strings(*dst)
	}
	from, err := committedOn(ctx, adm, o.From, o.Topic)
	if err != nil {
		return res, err
	}
	to, err := committedOn(ctx, adm, o.To, o.Topic)
	if err != nil {
		return res, err
	}
	if len(from) == 0 {
		return res, fmt.Errorf("%w: %s on %s", ErrNoOffsets, o.From, o.Topic)
	}
	parts := make([]int32, 0, len(from))
	for p := range from {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	var set kadm.Offsets
	for _, p := range parts {
		cur := int64(-1)
		if c, ok := to[p]; ok {
			cur = c
		}
		res.Partitions = append(res.Partitions, CopyPartition{Partition: p, From: from[p], Current: cur})
		set.AddOffset(o.Topic, p, from[p], -1)
	}
	if o.DryRun {
		return res, nil
	}
	switch {
	case len(res.ToMembers) > 0:
		return res, fmt.Errorf("%w: group %s (%v): stop its workers first", ErrGroupActive, o.To, res.ToMembers)
	case len(to) > 0 && !o.Force:
		return res, fmt.Errorf("%w: %s on %s (--force overwrites them)", ErrTargetHasOffsets, o.To, o.Topic)
	case len(res.FromMembers) > 0 && !o.Force:
		return res, fmt.Errorf("%w: group %s (%v): its offsets still move; stop its workers first (or --force)", ErrGroupActive, o.From, res.FromMembers)
	}
	resp, err := adm.CommitOffsets(ctx, o.To, set)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return res, fmt.Errorf("commit offsets of group %s: %w", o.To, err)
	}
	res.Committed = true
	return res, nil
}

// committedOn returns group's committed offsets on topic by partition
// (empty when the group does not exist or committed nothing there).
func committedOn(ctx context.Context, adm *kadm.Client, group, topic string) (map[int32]int64, error) {
	offs, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]int64{}, nil
	}
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of group %s: %w", group, err)
	}
	out := map[int32]int64{}
	for p, r := range offs[topic] {
		if r.Err == nil && r.At >= 0 {
			out[p] = r.At
		}
	}
	return out, nil
}

// AdoptOffsets prepares group to take over from legacy, an earlier id of
// the same worker (the unprefixed group before KAFKA_GROUP_PREFIX): when
// group has committed nothing on topic and legacy has, legacy's offsets
// are copied, so that the worker goes on where the old group stopped
// instead of re-reading the whole topic. It returns the copy (Committed
// false when there was nothing to adopt). Live members of legacy (workers
// of the old version still running in a rolling upgrade) do not stop it:
// their last records are read once more, which the registry absorbs.
func AdoptOffsets(ctx context.Context, adm *kadm.Client, legacy, group, topic string) (CopyResult, error) {
	if legacy == "" || legacy == group {
		return CopyResult{}, nil
	}
	res, err := CopyOffsets(ctx, adm, CopyOptions{From: legacy, To: group, Topic: topic, Force: false})
	switch {
	case errors.Is(err, ErrNoOffsets), errors.Is(err, ErrTargetHasOffsets):
		return res, nil
	case errors.Is(err, ErrGroupActive) && len(res.ToMembers) > 0:
		// Another replica of the new version joined first: it adopted.
		return res, nil
	case errors.Is(err, ErrGroupActive):
		// Only legacy is live: copy anyway.
		return CopyOffsets(ctx, adm, CopyOptions{From: legacy, To: group, Topic: topic, Force: true})
	}
	return res, err
}

// adoptTimeout bounds the adoption check of New, its repeats included.
const adoptTimeout = 30 * time.Second

// adoptBeforeJoin runs AdoptOffsets for Config.AdoptGroup with a client
// of its own, before New's client joins Config.Group: Kafka refuses offset
// commits from outside a group that has members. A failed attempt (a dropped
// connection, a coordinator that moved: the client does not repeat a
// DescribeGroups whose connection broke) is logged and repeated with a
// capped backoff — a worker waits for Kafka at start-up as for its other
// dependencies; AdoptOffsets is safe to repeat, a copy that committed
// makes the next attempt find offsets and do nothing. A failure that
// lasts adoptTimeout fails New (the worker exits and is restarted) rather
// than letting the new group start from the beginning of the topic.
func (c *Consumer) adoptBeforeJoin() error {
	o := c.cfg
	if o.AdoptGroup == "" || o.AdoptGroup == o.Group {
		return nil
	}
	cl, err := kafka.NewClient(o.Kafka, c.hooks.kafkaOpts...)
	if err != nil {
		return fmt.Errorf("consumer: adopt offsets of group %s: %w", o.AdoptGroup, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), adoptTimeout)
	defer cancel()
	adm := kadm.NewClient(cl)
	var res CopyResult
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		res, err = AdoptOffsets(ctx, adm, o.AdoptGroup, o.Group, o.Topic)
		if err == nil || ctx.Err() != nil {
			break
		}
		c.deps.Logger.Warn("consumer: adopting the offsets of the earlier group id failed; retrying", "from", o.AdoptGroup, "group", o.Group,
			"topic", o.Topic, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if err != nil {
		return fmt.Errorf("consumer: adopt the offsets of group %s for group %s on %s: %w (or copy them by hand: sluice consumer copy-offsets)", o.AdoptGroup, o.Group, o.Topic, err)
	}
	if res.Committed {
		c.deps.Logger.Warn("consumer: adopted the committed offsets of the earlier group id", "from", o.AdoptGroup, "group", o.Group,
			"topic", o.Topic, "partitions", len(res.Partitions), "live_members_of_old_group", len(res.FromMembers))
	}
	return nil
}
