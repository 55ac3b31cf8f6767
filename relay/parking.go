package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// topicRefusalTTL is how long a topic the broker refused to create stays
// refused: its records are parked at once meanwhile, then creation is
// tried again (an operator may have removed the colliding topic).
const topicRefusalTTL = time.Minute

// topicRefusal is a topic the broker refused for a reason of its own.
type topicRefusal struct {
	reason   string
	attempts int
	err      error
	until    time.Time
}

// topicRefusedError: the record's topic cannot be created (parkReason);
// the record is to be parked.
type topicRefusedError struct {
	topic    string
	reason   string
	attempts int
	err      error
}

func (e *topicRefusedError) Error() string {
	return fmt.Sprintf("relay: topic %s refused (%s) after %d attempts: %v", e.topic, e.reason, e.attempts, e.err)
}

func (e *topicRefusedError) Unwrap() error { return e.err }

// settle deals with a record Kafka did not acknowledge. A refusal of the
// record's own (parkReason) is retried with the record produced alone (the
// solo client: a broker-side MESSAGE_TOO_LARGE of a batch must not count
// against a small neighbour), until it was attempted
// EVENT_PUBLISHER_PARK_AFTER_ATTEMPTS times and at least once alone; then it
// is parked (durably, before the caller marks its position done). It
// returns published when a retry was acknowledged, published false and nil
// when the record was parked, and an error, which the caller treats as
// today (retried by the next cycle without limit, readiness red) for an
// outage or when the park could not be written.
func (r *Relay) settle(ctx context.Context, ls *leaderState, pr *pendingRec) (published bool, err error) {
	reason, ok := parkReason(ctx, pr.err)
	if !ok || pr.rec == nil {
		return false, pr.err
	}
	last := pr.err
	attempts, solo := 1, 0
	bo := newBackoff(100*time.Millisecond, 2*time.Second)
	for attempts < r.cfg.ParkAfterAttempts || solo == 0 {
		r.hb.Beat()
		if solo > 0 {
			// The first retry alone runs at once: a neighbour of a batch
			// the broker refused as a whole is published without delay.
			sleep(ctx, bo.Next())
		}
		if ctx.Err() != nil {
			return false, context.Cause(ctx)
		}
		attempts++
		solo++
		pctx, cancel := context.WithTimeout(ctx, r.cfg.KafkaFlushTimeout)
		err := r.solo.ProduceSync(pctx, soloCopy(pr.rec)).FirstErr()
		cancel()
		if err == nil {
			r.log.Info("relay: a record Kafka refused was acknowledged when produced alone", "position", pr.pos, "topic", pr.topic, "attempts", attempts, "first_err", pr.err)
			return true, nil
		}
		if ctx.Err() != nil {
			return false, context.Cause(ctx)
		}
		reason, ok = parkReason(ctx, err)
		if !ok {
			return false, err // an outage meanwhile: retried without limit
		}
		last = err
	}
	return false, r.park(ctx, ls, pr.rec, pr.pos, pr.id, pr.seg, reason, last, attempts)
}

// soloCopy is a fresh record with rec's content (a record handed to a
// producer must not be produced again while the first client holds it).
func soloCopy(rec *kgo.Record) *kgo.Record {
	return &kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}
}

// parkRefusedTopic parks a record whose topic topicReady refused; any other
// error of topicReady is returned as it is.
func (r *Relay) parkRefusedTopic(ctx context.Context, ls *leaderState, err error, rec *kgo.Record, pos int64, id, seg string) error {
	var tr *topicRefusedError
	if !errors.As(err, &tr) {
		return err
	}
	return r.park(ctx, ls, rec, pos, id, seg, tr.reason, tr.err, tr.attempts)
}

// park writes the record to sluice.relay_parked and only then marks its
// position done, so the checkpoint never passes a record that is neither
// acknowledged nor parked. It is idempotent by position (ParkedStore.Park).
func (r *Relay) park(ctx context.Context, ls *leaderState, rec *kgo.Record, pos int64, id, seg, reason string, cause error, attempts int) error {
	p := ParkedRecord{Relay: r.cfg.Name, Shard: r.shard, Position: pos, EventID: id, Topic: rec.Topic, Key: rec.Key, Headers: rec.Headers,
		Envelope: rec.Value, SegmentKey: seg, Reason: reason, Error: cause.Error(), Attempts: attempts}
	inserted, err := r.parked.Park(ctx, p)
	if err != nil {
		return err
	}
	r.crasher.Hit("relay", "after_park")
	ls.markDone(pos)
	if inserted {
		r.m.parkedTotal.WithLabelValues(reason).Inc()
		r.m.parked.Inc()
	}
	r.log.Error("relay: record parked: Kafka refuses it; publishing goes on after it (see `sluice relay parked show`)",
		"position", pos, "event_id", id, "topic", rec.Topic, "reason", reason, "attempts", attempts,
		"value_bytes", len(rec.Value), "segment", seg, "err", cause)
	return nil
}

// refreshParkedGauge sets sluice_relay_parked_records from the table (rows an
// operator resolved meanwhile leave it), at most once per ten poll
// intervals.
func (r *Relay) refreshParkedGauge(ctx context.Context, ls *leaderState) {
	if !ls.lastParkedCount.IsZero() && time.Since(ls.lastParkedCount) < 10*r.cfg.PollInterval {
		return
	}
	ls.lastParkedCount = time.Now()
	n, err := r.parked.CountShard(ctx, r.cfg.Name, r.shard)
	if err != nil {
		r.log.Debug("relay: parked records not counted", "err", err)
		return
	}
	r.m.parked.Set(float64(n))
}
