// Package topics provides topic bootstrap for every sluice process that
// produces or consumes (relay, workers, operator commands): missing topics
// are created with KAFKA_TOPIC_PARTITIONS and KAFKA_TOPIC_REPLICATION_FACTOR,
// and a topic that already exists counts as success. It keeps SPEC §0.2 (no
// lost work) at start-up: records are never produced to a topic that the
// broker would auto-create with other settings, or reject.
package topics

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Ensure creates the topics that do not exist yet; TOPIC_ALREADY_EXISTS is
// success. The error joins one error per topic that could not be created.
func Ensure(ctx context.Context, cl *kgo.Client, partitions, replication int, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	rs, err := kadm.NewClient(cl).CreateTopics(ctx, int32(partitions), int16(replication), nil, names...)
	if err != nil {
		return fmt.Errorf("topics: create %v: %w", names, err)
	}
	var errs []error
	for _, r := range rs.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			errs = append(errs, fmt.Errorf("topics: create %s: %w", r.Topic, r.Err))
		}
	}
	return errors.Join(errs...)
}
