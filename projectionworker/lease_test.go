package projectionworker_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/registry/registrytest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/envelope"
)

// TestLeaseLostMidBatch takes the lease of one record away (another owner
// claims it, as after an expiry) while its batch is in the Elasticsearch
// write: the batch stops, the other records of the batch are released and
// claimed again and finish, nothing is committed past the record whose
// lease was taken while the other owner holds it, and once that lease ends
// the record is claimed again and finished. Every event has exactly one
// history document written once (_version 1: op_type=create never
// overwrites) and nothing is dead-lettered.
func TestLeaseLostMidBatch(t *testing.T) {
	const handler = "projection:history:v1"
	e := newEnv(t, 1)
	warm := e.event(projectionworker.InstanceCreated, "lease", "things", "warm", 1, nil)
	e.publish(warm) // offset 0
	metrics := prometheus.NewRegistry()
	e.startInProcess(map[string]string{
		"PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS":      "3",
		"PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS": "1",
	}, metrics, spec("history"))
	testenv.WaitFor(t, 30*time.Second, "warm-up", e.caughtUp("projection-history-v1"))

	// The next bulk request waits long enough for a heartbeat to notice
	// the stolen lease.
	e.es.InjectFault(esserver.Fault{Match: esserver.MatchPath(http.MethodPost, "/_bulk"), Delay: 10 * time.Second, Times: 1})
	var evs []envelope.Envelope
	for i := range 10 {
		evs = append(evs, e.event(projectionworker.InstanceCreated, "lease", "things", fmt.Sprintf("t%d", i), 1, map[string]any{"v": i}))
	}
	e.publish(evs...) // offsets 1…10, one batch
	const stolenIdx = 4
	stolen := evs[stolenIdx]
	stolenOffset := int64(stolenIdx + 1)

	status := func(eventID string) string {
		row, err := registrytest.Row(ctxT(t), e.pool, handler, eventID)
		if err != nil {
			return ""
		}
		return string(row.Status)
	}
	testenv.WaitFor(t, 30*time.Second, "the batch claimed", func() bool {
		for _, ev := range evs {
			if status(ev.EventID) != "processing" {
				return false
			}
		}
		return true
	})

	// Another owner takes the lease and keeps it alive until released.
	steal := func() {
		if ok, err := registrytest.Steal(ctxT(t), e.pool, handler, stolen.EventID, "thief"); err != nil || !ok {
			t.Fatalf("steal the lease: %v (row found: %v)", err, ok)
		}
	}
	steal()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = registrytest.Beat(ctxT(t), e.pool, handler, stolen.EventID, "thief")
			}
		}
	}()
	release := func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}
	t.Cleanup(release)

	committed := func() int64 {
		offs, err := kadm.NewClient(e.producer()).FetchOffsets(ctxT(t), e.config(nil).Kafka.Group("projection-history-v1"))
		if err != nil {
			t.Fatal(err)
		}
		o, _ := offs.Lookup(e.topic, 0)
		return o.At
	}
	testenv.WaitFor(t, 60*time.Second, "the rest of the batch done", func() bool {
		for i, ev := range evs {
			if i != stolenIdx && status(ev.EventID) != "done" {
				return false
			}
		}
		return true
	})
	// The done prefix (offsets ≤ 4) is committed, never past the stolen
	// record while the other owner holds it.
	testenv.WaitFor(t, 30*time.Second, "done prefix committed", func() bool { return committed() == stolenOffset })
	// Evidence instead of pauses: the worker asked for the stolen record
	// again twice more and was told the other owner holds it; each of
	// those turns ended with a commit, which stopped before the record.
	// (The deadline is a hang guard.)
	asked := retries(t, metrics, "in_progress")
	testenv.WaitFor(t, 60*time.Second, "two more claims of the stolen record refused (in progress)", func() bool {
		return retries(t, metrics, "in_progress") >= asked+2
	})
	if st := status(stolen.EventID); st != "processing" {
		t.Fatalf("stolen record: status %q while the other owner holds it", st)
	}
	if c := committed(); c != stolenOffset {
		t.Fatalf("committed offset %d while offset %d is unfinished", c, stolenOffset)
	}
	if n := retries(t, metrics, "batch_aborted"); n < 1 {
		t.Errorf("batch_aborted retries %v, want ≥ 1 (the batch was not stopped)", n)
	}

	// The other owner goes away: its lease expires, the record is claimed
	// again and finished.
	release()
	testenv.WaitFor(t, 60*time.Second, "caught up", e.caughtUp("projection-history-v1"))
	if st := status(stolen.EventID); st != "done" {
		t.Errorf("stolen record: status %q, want done", st)
	}
	for _, ev := range append(evs, warm) {
		d := e.get("sluice_lease_history_v1", ev.EventID)
		if !d.Found || d.Version != 1 {
			t.Errorf("history document of %s: found %v version %d, want one write", ev.EventID, d.Found, d.Version)
		}
	}
	if n := len(e.dlqRecords()); n != 0 {
		t.Errorf("DLQ holds %d records", n)
	}
}

// retries returns the runtime's retry counter for reason.
func retries(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "sluice_worker_retries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					v += m.GetCounter().GetValue()
				}
			}
		}
	}
	return v
}
