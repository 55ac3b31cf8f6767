package dlq

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/shared/suggest"
)

// Find returns nil when the queue's topic exists in the cluster, else a
// *suggest.NotFoundError naming the nearest of the cluster's topics and the
// configured dead-letter topics; a configured one that does not exist yet
// says so (its worker creates it when it starts).
func (q *Queue) Find(ctx context.Context, configured ...string) error {
	td, err := q.adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("dlq: list topics: %w", err)
	}
	td.FilterInternal()
	if td.Has(q.cfg.Topic) {
		return nil
	}
	nf := suggest.NotFound("topic", q.cfg.Topic, append(configured, td.Names()...))
	if slices.Contains(configured, q.cfg.Topic) {
		nf.Nearest = ""
		nf.Note = "a configured dead-letter topic, created when its worker starts: it has no letters"
	}
	return nf
}
