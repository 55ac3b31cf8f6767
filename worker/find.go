package worker

import (
	"context"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluicehq/sluice/shared/suggest"
)

// ListGroups returns the ids of the consumer groups the cluster lists,
// sorted.
func ListGroups(ctx context.Context, adm *kadm.Client) ([]string, error) {
	lg, err := adm.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	gs := lg.Groups()
	sort.Strings(gs)
	return gs, nil
}

// FindGroup returns nil when group exists — the cluster lists it (it has
// or had members) or it has committed offsets — and otherwise a
// *suggest.NotFoundError naming the nearest listed group: operators who
// type the unprefixed id of earlier versions (instance-worker) are pointed
// to the prefixed one (sluice.instance-worker, KAFKA_GROUP_PREFIX). A lag
// or reset of a group that does not exist would otherwise count everything
// retained as its lag.
func FindGroup(ctx context.Context, adm *kadm.Client, group string) error {
	committed, err := fetchCommitted(ctx, adm, group)
	if err != nil {
		return err
	}
	if len(committed) > 0 {
		return nil
	}
	gs, err := ListGroups(ctx, adm)
	if err != nil {
		return err
	}
	if i := sort.SearchStrings(gs, group); i < len(gs) && gs[i] == group {
		return nil
	}
	nf := suggest.NotFound("consumer group", group, gs)
	nf.Note = "no worker has joined it and it has no committed offsets"
	return nf
}

// FindTopic returns nil when topic exists, else a *suggest.NotFoundError
// naming the nearest topic of the cluster.
func FindTopic(ctx context.Context, adm *kadm.Client, topic string) error {
	td, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	td.FilterInternal()
	if td.Has(topic) {
		return nil
	}
	return suggest.NotFound("topic", topic, td.Names())
}
