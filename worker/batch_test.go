package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/claim"
)

// fakeRegistry claims everything, records mark_done calls and schedules
// retries 250 ms out.
type fakeRegistry struct {
	mu       sync.Mutex
	attempts map[string]int
	claims   int // ClaimBatch calls
	marks    [][]claim.Done
	failed   []string
}

func (f *fakeRegistry) ClaimBatch(_ context.Context, reqs []claim.Request) ([]claim.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims++
	out := make([]claim.Result, len(reqs))
	for i, q := range reqs {
		f.attempts[q.EventID]++
		a := f.attempts[q.EventID]
		out[i] = claim.Result{Kind: claim.Claimed, Attempt: a,
			Lease: claim.Lease{Handler: q.Handler, EventID: q.EventID, Token: fmt.Sprintf("%s/%d", q.EventID, a), Attempt: a}}
	}
	return out, nil
}

func (f *fakeRegistry) Hold(ctx context.Context, _ claim.Lease) (context.Context, func()) {
	hctx, cancel := context.WithCancelCause(ctx)
	return hctx, func() { cancel(errors.New("stopped")) }
}

func (f *fakeRegistry) MarkDoneBatch(_ context.Context, items []claim.Done) ([]error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.marks = append(f.marks, append([]claim.Done(nil), items...))
	return make([]error, len(items)), nil
}

func (f *fakeRegistry) MarkFailed(_ context.Context, l claim.Lease, _ claim.Failure) (claim.FailResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = append(f.failed, l.EventID)
	return claim.FailResult{Status: claim.StatusFailed, Attempt: l.Attempt, RetryIn: 250 * time.Millisecond}, nil
}

func (f *fakeRegistry) Release(context.Context, claim.Lease) error { return nil }
func (f *fakeRegistry) GetRow(context.Context, string, string) (claim.Row, error) {
	return claim.Row{}, errors.New("no row")
}
func (f *fakeRegistry) Check(context.Context) error { return nil }

// batchFunc is a BatchHandler (Handle must not be called).
type batchFunc func(ctx context.Context, recs []*Record) []BatchResult

func (f batchFunc) Handle(context.Context, *Record) (claim.Outcome, error) {
	panic("Handle called on a BatchHandler")
}
func (f batchFunc) HandleBatch(ctx context.Context, recs []*Record) []BatchResult {
	return f(ctx, recs)
}

// TestBatchHandler: one HandleBatch call per round with the claimed records
// in offset order; results go to the right records (one MarkDoneBatch for
// the successes); a retryable failure in the middle is retried through the
// registry and the offset is not committed past it until it is done.
func TestBatchHandler(t *testing.T) {
	brokers, topic, produce := oneTopic(t, "batch-")
	ids := make([]string, 5)
	var recs []*kgo.Record
	for i := range ids {
		ids[i] = uuid.NewString()
		recs = append(recs, thingRecord(t, ids[i], fmt.Sprintf("a%d", i), 1, int64(i+1)))
	}
	produce(recs...)

	reg := &fakeRegistry{attempts: map[string]int{}}
	var (
		c          *Consumer
		mu         sync.Mutex
		calls      [][]int64
		commitSeen = int64(-2)
	)
	committed := func() int64 { return committedOffset(c, topic) }
	h := batchFunc(func(_ context.Context, recs []*Record) []BatchResult {
		mu.Lock()
		defer mu.Unlock()
		var offs []int64
		out := make([]BatchResult, len(recs))
		for i, r := range recs {
			offs = append(offs, r.Offset)
			out[i].Outcome = claim.Conflict(r.Envelope.EventID) // proves the mapping in mark_done
			if r.Offset == 2 {
				if r.Attempt == 1 {
					out[i] = BatchResult{Err: Retryable(errors.New("boom"))}
				} else {
					// The retry waits for evidence that the first round's
					// done prefix (0, 1) was committed — not for the 250 ms
					// backoff to be long enough — and then sees where the
					// commit stopped: at 2, never past it. (A hang guard.)
					for deadline := time.Now().Add(20 * time.Second); committed() < 2 && time.Now().Before(deadline); {
						time.Sleep(5 * time.Millisecond)
					}
					commitSeen = committed()
				}
			}
		}
		calls = append(calls, offs)
		return out
	})
	var stop func()
	c, stop = startConsumer(t, brokers, topic, Config{}, Deps{Registry: reg, Handler: h})
	testenv.WaitFor(t, 20*time.Second, "every record committed", func() bool { return committed() == 5 })
	stop()

	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 || fmt.Sprint(calls[0]) != "[0 1 2 3 4]" || fmt.Sprint(calls[1]) != "[2]" {
		t.Fatalf("HandleBatch calls %v, want [[0 1 2 3 4] [2]]", calls)
	}
	if commitSeen != 2 {
		t.Errorf("committed offset while offset 2 was failing: %d, want 2", commitSeen)
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if fmt.Sprint(reg.failed) != fmt.Sprint([]string{ids[2]}) {
		t.Errorf("MarkFailed for %v, want %s", reg.failed, ids[2])
	}
	if len(reg.marks) != 2 {
		t.Fatalf("MarkDoneBatch calls %d, want 2", len(reg.marks))
	}
	var got []string
	for _, m := range reg.marks[0] {
		got = append(got, m.Lease.EventID)
	}
	if fmt.Sprint(got) != fmt.Sprint([]string{ids[0], ids[1], ids[3], ids[4]}) {
		t.Errorf("first MarkDoneBatch %v, want offsets 0 1 3 4", got)
	}
	for _, ms := range reg.marks {
		for _, m := range ms {
			if m.Outcome != claim.Conflict(m.Lease.EventID) {
				t.Errorf("event %s marked with outcome %+v (another record's result)", m.Lease.EventID, m.Outcome)
			}
		}
	}
	if len(reg.marks[1]) != 1 || reg.marks[1][0].Lease.EventID != ids[2] || reg.marks[1][0].Lease.Attempt != 2 {
		t.Errorf("second MarkDoneBatch %+v, want offset 2, attempt 2", reg.marks[1])
	}
}
