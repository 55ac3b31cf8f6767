package acceptance

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/worker"
)

// TestRetryBackoffDLQThenRedrive is scenario 6: Elasticsearch fails every
// history write of one db (500 per bulk item: a failure that says nothing
// about an outage, so it is retried within the budget; a 429 would be an
// outage and pause the worker instead, docs/failures.md). The projection worker
// retries with backoff, dead-letters each event after
// PROJECTION_WORKER_MAX_RETRIES attempts (registry row dead, one DLQ
// record each, nothing committed past them without the DLQ ack), while
// other dbs keep flowing. After the fault is removed, `sluice dlq redrive`
// applies each event exactly once, and a second redrive does nothing.
func TestRetryBackoffDLQThenRedrive(t *testing.T) {
	t.Parallel()
	const maxRetries, base = 3, 200 * time.Millisecond
	p := newPipeline(t, setup{env: map[string]string{
		"PROJECTION_WORKER_MAX_RETRIES": fmt.Sprint(maxRetries),
		"WORKER_RETRY_BACKOFF_BASE":     base.String(), "WORKER_RETRY_BACKOFF_CAP": "2s",
	}})
	p.startDefault()
	badIndex := indexPrefix + "retry_history"
	removeFault := p.es.InjectFault(esserver.Fault{BulkItemStatus: 500, RejectBulkItems: func(it esserver.BulkItem) bool {
		return strings.HasPrefix(it.Index, badIndex)
	}})
	bad := expectation{db: "retry", class: "jobs", dlqEvents: 4}
	good := expectation{db: "fine", class: "jobs", dlqEvents: 4}
	for _, e := range []*expectation{&bad, &good} {
		for _, id := range []string{"j1", "j2"} {
			p.create(e.db, e.class, id, map[string]any{"state": "new"})
			p.patch(e.db, e.class, id, map[string]any{"state": "running"})
			e.instances++
			e.applied += 2
		}
	}

	t.Run("retries with backoff then dead letters", func(t *testing.T) {
		waitFor(t, 90*time.Second, "4 dead letters", func() bool { return p.records(eventsDLQ) == 4 })
		waitFor(t, 30*time.Second, "the other db projected", func() bool { return len(p.historyDocs(good.db)) == good.applied })
		rows := p.registry(historyHandler, bad.db+":")
		if len(rows) != bad.applied {
			t.Fatalf("%d history registry rows, want %d", len(rows), bad.applied)
		}
		for _, r := range rows {
			if r.Status != "dead" || r.Attempts != maxRetries {
				t.Errorf("%s #%d: %s after %d attempts, want dead after %d", r.AggregateID, r.Seq, r.Status, r.Attempts, maxRetries)
			}
		}
		fails := p.writes.failuresOf(badIndex)
		if len(fails) != bad.applied {
			t.Errorf("failed writes for %d documents, want %d", len(fails), bad.applied)
		}
		// Each registry attempt is one bulk call, which itself retries a
		// rejected item a few times with a short backoff (50 ms base): at
		// least maxRetries tries per document, never back to back.
		for doc, ts := range fails {
			if len(ts) < maxRetries {
				t.Errorf("%s: %d write attempts, want at least %d", doc, len(ts), maxRetries)
			}
			for i := 1; i < len(ts); i++ {
				if gap := ts[i].Sub(ts[i-1]); gap < 20*time.Millisecond {
					t.Errorf("%s: attempt %d came %s after the previous one: no backoff", doc, i+1, gap)
				}
			}
		}
		for _, r := range p.readTopic(eventsDLQ) {
			var d worker.DLQRecord
			if err := json.Unmarshal(r.Value, &d); err != nil {
				t.Fatalf("DLQ record: %v: %s", err, r.Value)
			}
			if d.Handler != historyHandler || d.OriginalTopic != eventsTopic || d.AttemptCount != maxRetries ||
				d.ErrorClass != "retryable" || !strings.HasPrefix(string(r.Key), "Instance:"+bad.db+":") || d.Error == "" {
				t.Errorf("DLQ record %+v key %s", d, r.Key)
			}
			// The registry's backoff between attempts: at least half of
			// base·2^n each (jitter in [0.5, 1)).
			if span := d.FailedAt.Sub(d.FirstFailedAt); span < time.Duration(maxRetries-1)*base/2 {
				t.Errorf("DLQ record: %d attempts within %s (first %s, last %s): no backoff", d.AttemptCount, span, d.FirstFailedAt, d.FailedAt)
			}
		}
		if hist := p.historyDocs(bad.db); len(hist) != 0 {
			t.Errorf("%d history documents written despite the fault", len(hist))
		}
		out, errOut, code := p.cli("dlq", "list", "--topic", eventsDLQ)
		if code != 0 || !strings.Contains(out, "4 letters, 4 shown") {
			t.Errorf("dlq list: exit %d %s %s", code, out, errOut)
		}
	})

	t.Run("redrive applies once", func(t *testing.T) {
		removeFault()
		events := p.records(eventsTopic)
		out, errOut, code := p.cli("dlq", "redrive", "--topic", eventsDLQ, "--all")
		if code != 0 {
			t.Fatalf("dlq redrive: exit %d %s %s", code, out, errOut)
		}
		if n := p.records(eventsTopic); n != events+4 {
			t.Errorf("redrive produced %d records, want 4", n-events)
		}
		p.waitDrained(90 * time.Second)
		for _, e := range []expectation{bad, good} {
			p.checkEndState(e)
		}
		for _, r := range p.registry(historyHandler, bad.db+":") {
			if r.Attempts != 1 {
				t.Errorf("%s #%d: %d attempts after the redrive, want 1", r.AggregateID, r.Seq, r.Attempts)
			}
		}
		acks := p.writes.acknowledged(indexPrefix)
		events = p.records(eventsTopic)
		out, errOut, code = p.cli("dlq", "redrive", "--topic", eventsDLQ, "--all")
		if code != 0 {
			t.Fatalf("second dlq redrive: exit %d %s %s", code, out, errOut)
		}
		if n := p.records(eventsTopic); n != events {
			t.Errorf("second redrive produced %d records", n-events)
		}
		p.waitDrained(60 * time.Second)
		if n := p.writes.acknowledged(indexPrefix); n != acks {
			t.Errorf("second redrive made %d writes", n-acks)
		}
		out, _, _ = p.cli("dlq", "list", "--topic", eventsDLQ)
		if !strings.Contains(out, "0 shown, 4 handled") {
			t.Errorf("dlq list after redrive: %s", out)
		}
	})
}
