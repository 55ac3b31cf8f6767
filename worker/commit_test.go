package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/claim"
)

// TestCommitInterval: records finished one round at a time are committed
// at most once per WORKER_COMMIT_INTERVAL while the worker runs — counted
// as the OffsetCommit requests its Kafka client writes — and every finished
// record at the drain; with no interval, a record finished in a turn of its
// own is committed in that turn. Nothing is committed before it is marked
// done either way: every mark_done lets the loop turn twice first and then
// finds the group's offset not past the records marked before it
// (markAfterTurns).
func TestCommitInterval(t *testing.T) {
	const n = 3
	for _, tc := range []struct {
		name     string
		interval time.Duration
		running  int // OffsetCommit requests before the drain
		drain    int // at the drain
	}{
		// The first commit is due at once; the next ones wait an hour,
		// so only the drain commits them.
		{"an interval puts the commits off", time.Hour, 1, 1},
		{"no interval commits each record's turn", 0, n, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			brokers, topic, produce := oneTopic(t, "commit-")
			logs := newMsgCounter()
			reg := newMarkAfterTurns(t, brokers, topic, logs)
			h := HandlerFunc(func(context.Context, *Record) (claim.Outcome, error) { return claim.Applied(), nil })
			c, stop := startConsumer(t, brokers, topic, Config{Settings: Settings{CommitInterval: tc.interval}},
				Deps{Registry: reg, Handler: h, Logger: slog.New(logs)})
			commits := func() int {
				return int(testutil.ToFloat64(c.m.kafkaReqs.WithLabelValues("h", "OffsetCommit")))
			}
			marked := func(want int) func() bool {
				return func() bool {
					reg.mu.Lock()
					defer reg.mu.Unlock()
					got := 0
					for _, m := range reg.marks {
						got += len(m)
					}
					return got >= want
				}
			}
			for i := range n {
				produce(thingRecord(t, "", fmt.Sprintf("a%d", i), 1, int64(i+1)))
				testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("record %d marked done", i), marked(i+1))
				if tc.interval == 0 || i == 0 { // the first commit is due at once
					testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("record %d committed", i), func() bool { return committedOffset(c, topic) == int64(i+1) })
				}
			}
			if tc.interval > 0 {
				// Evidence that the loop had its chance to commit the last
				// records: two more turns ("poll" is logged once a turn)
				// after the last one was marked done.
				turns := logs.count("poll")
				testenv.WaitFor(t, 20*time.Second, "two more turns of the loop", func() bool { return logs.count("poll") >= turns+2 })
				if got := committedOffset(c, topic); got != 1 {
					t.Errorf("committed offset %d while running, want 1 (the first commit only)", got)
				}
			}
			if got := commits(); got != tc.running {
				t.Errorf("%d offset commits while running, want %d", got, tc.running)
			}
			stop()
			if got := commits() - tc.running; got != tc.drain {
				t.Errorf("%d offset commits at the drain, want %d", got, tc.drain)
			}
			if got := groupOffset(t, brokers, topic+"-g", topic); got != n {
				t.Errorf("group offset %d after the drain, want %d", got, n)
			}
			for _, e := range reg.errors() {
				t.Error(e)
			}
		})
	}
}

// markAfterTurns is the fake registry of TestCommitInterval with a check
// at every MarkDoneBatch: it lets the consumer's loop turn twice ("poll" is
// logged once a turn, and every turn commits what it may), then reads the
// group's committed offset from Kafka, which must not pass the records
// marked done before this call (one partition, offsets 0, 1, …): an offset
// committed before its record is marked done is caught there.
type markAfterTurns struct {
	*fakeRegistry
	logs      *msgCounter
	committed func(context.Context) (int64, error)
	errMu     sync.Mutex
	errs      []string
}

func newMarkAfterTurns(t *testing.T, brokers []string, topic string, logs *msgCounter) *markAfterTurns {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	return &markAfterTurns{fakeRegistry: &fakeRegistry{attempts: map[string]int{}}, logs: logs,
		committed: func(ctx context.Context) (int64, error) {
			r, err := adm.FetchOffsets(ctx, topic+"-g")
			if err != nil {
				return 0, err
			}
			if o, ok := r.Lookup(topic, 0); ok {
				return o.At, nil
			}
			return -1, nil
		}}
}

func (m *markAfterTurns) MarkDoneBatch(ctx context.Context, items []claim.Done) ([]error, error) {
	m.fakeRegistry.mu.Lock()
	marked := 0
	for _, b := range m.fakeRegistry.marks {
		marked += len(b)
	}
	m.fakeRegistry.mu.Unlock()
	turns := m.logs.count("poll")
	for deadline := time.Now().Add(10 * time.Second); m.logs.count("poll") < turns+2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	got, err := m.committed(ctx)
	switch {
	case m.logs.count("poll") < turns+2:
		m.fail(fmt.Sprintf("the loop did not turn twice in 10 s during mark_done of records %d..", marked))
	case err != nil:
		m.fail(fmt.Sprintf("group offset at mark_done of %d records: %v", len(items), err))
	case got > int64(marked):
		m.fail(fmt.Sprintf("group offset %d committed before mark_done of records %d.. (only %d marked done)", got, marked, marked))
	}
	return m.fakeRegistry.MarkDoneBatch(ctx, items)
}

func (m *markAfterTurns) fail(e string) {
	m.errMu.Lock()
	defer m.errMu.Unlock()
	m.errs = append(m.errs, e)
}

func (m *markAfterTurns) errors() []string {
	m.errMu.Lock()
	defer m.errMu.Unlock()
	return slices.Clone(m.errs)
}

// groupOffset is group's committed offset on partition 0 of topic.
func groupOffset(t *testing.T, brokers []string, group, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r, err := kadm.NewClient(cl).FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := r.Lookup(topic, 0)
	if !ok {
		return -1
	}
	return o.At
}
