package dlq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/kafka"
)

// ProgressFunc is told, record by record or letter by letter, how far a
// long operation is: done of total.
type ProgressFunc func(done, total int64)

// readTopicRange calls fn for every record of topic present when it starts
// (from each partition's start offset to its end offset), in offset order
// per partition. onlyPartition >= 0 restricts it to one partition, and
// from >= 0 starts there. A missing topic is an error unless missingOK. fn
// returns true to stop early.
func readTopicRange(ctx context.Context, kc kafka.Config, adm *kadm.Client, topic string, onlyPartition int32, from int64, missingOK bool,
	prog ProgressFunc, fn func(*kgo.Record) (bool, error)) error {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		if missingOK && errors.Is(err, kerr.UnknownTopicOrPartition) {
			return nil
		}
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	parts := map[int32]kgo.Offset{}
	endAt := map[int32]int64{}
	var total, done int64
	ends.Each(func(e kadm.ListedOffset) {
		if onlyPartition >= 0 && e.Partition != onlyPartition {
			return
		}
		s, _ := starts.Lookup(topic, e.Partition)
		first := max(s.Offset, from)
		if first < e.Offset {
			parts[e.Partition] = kgo.NewOffset().At(first)
			endAt[e.Partition] = e.Offset
			total += e.Offset - first
		}
	})
	if len(parts) == 0 {
		return nil
	}
	cc, err := kafka.NewClient(kc,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return err
	}
	defer cc.Close()
	for len(endAt) > 0 {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		fs := cc.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("read %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			if errors.Is(ferr, context.DeadlineExceeded) {
				return fmt.Errorf("read %s: no progress for 30s with %d partitions unfinished", topic, len(endAt))
			}
			return ferr
		}
		var stop bool
		var cbErr error
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := endAt[r.Partition]
			if stop || cbErr != nil || !ok || r.Offset >= end {
				return
			}
			done++
			if prog != nil {
				prog(done, total)
			}
			stop, cbErr = fn(r)
			if r.Offset >= end-1 {
				delete(endAt, r.Partition)
			}
		})
		if cbErr != nil {
			return cbErr
		}
		if stop {
			return nil
		}
	}
	return nil
}
