package worker

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSelectionScanAllocatesNothing: the loop scans every unfinished and
// uncommitted record up to three times a turn (pollWait, lingerUntil,
// selectRunnable); once its key sets have grown the scan allocates nothing
// (it used to build two maps and a sorted partition slice per call, a
// tenth of the instance worker's loop at a paced load), and it still
// selects exactly what the rules say: per aggregate up to the first record
// that is not waiting, nothing of an aggregate a round in flight holds,
// nothing finished.
func TestSelectionScanAllocatesNothing(t *testing.T) {
	c := &Consumer{parts: map[string]map[int32]*partState{}}
	add := func(p int32, key string, st state, busy bool) {
		ps := c.part("t", p)
		ps.queue = append(ps.queue, &item{rec: &kgo.Record{Partition: p, Offset: int64(len(ps.queue))}, key: key, st: st, busy: busy})
	}
	add(0, "done", stDone, false)
	add(0, "a", stClaim, false)
	add(0, "a", stClaim, false)        // behind a: not selectable
	add(0, "inflight", stHandle, true) // its round is in flight
	add(0, "inflight", stClaim, false) // same aggregate: not selectable
	add(1, "w", stWait, false)         // a WAIT does not block its successors
	add(1, "w", stClaim, false)
	add(1, "w", stClaim, false) // behind the claim: not selectable
	for i := range 50 {
		add(2, fmt.Sprintf("k%d", i), stClaim, false)
	}
	var got []string
	c.mu.Lock()
	c.eachSelectable(func(it *item) bool {
		got = append(got, fmt.Sprintf("%d/%d", it.rec.Partition, it.rec.Offset))
		return true
	})
	n := testing.AllocsPerRun(100, func() {
		c.eachSelectable(func(*item) bool { return true })
	})
	c.mu.Unlock()
	want := []string{"0/1", "1/0", "1/1"}
	for i := range 50 {
		want = append(want, fmt.Sprintf("2/%d", i))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("selected %v, want %v", got, want)
	}
	if n != 0 {
		t.Errorf("a warm selection scan allocates %v times, want 0", n)
	}
}
