package acceptance

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/esserver"
)

// TestHistoryReadPagesPastResultWindow checks the harness's history oracle
// itself: a history longer than the server's result window (10,000, the
// size make soak's poison soak reaches with 20,000 events) is read whole,
// and the comparison with the domain events reports missing and extra
// documents both ways.
func TestHistoryReadPagesPastResultWindow(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(esserver.New())
	t.Cleanup(ts.Close)
	c := &http.Client{Timeout: 30 * time.Second}
	const idx, n = "sluice_big_history", 10_050
	if code, b, err := esDo(c, http.MethodPut, ts.URL+"/"+idx, map[string]any{"mappings": map[string]any{"properties": map[string]any{
		"event_id": map[string]any{"type": "keyword"}, "sequence_number": map[string]any{"type": "long"}}}}, nil); err != nil || code != http.StatusOK {
		t.Fatalf("create %s: %d %s %v", idx, code, b, err)
	}
	var doms []storeEvent
	for start := 0; start < n; start += 2000 {
		var bulk bytes.Buffer
		for i := start; i < min(start+2000, n); i++ {
			id := fmt.Sprintf("ev-%05d", i)
			doms = append(doms, storeEvent{EventID: id, AggregateID: "db:c:x", Seq: int64(i + 1)})
			fmt.Fprintf(&bulk, "{\"create\":{\"_index\":%q,\"_id\":%q}}\n{\"event_id\":%q,\"sequence_number\":%d}\n", idx, id, id, i+1)
		}
		resp, err := c.Post(ts.URL+"/_bulk", "application/x-ndjson", &bulk)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("bulk: %v %v", resp, err)
		}
		resp.Body.Close()
	}

	for _, tc := range []struct {
		name  string
		page  int
		edit  func([]storeEvent) []storeEvent
		check func(t *testing.T, d historyDiff)
	}{
		{"every document read in pages of 1000", historyPage, nil, func(t *testing.T, d historyDiff) {
			if !d.empty() {
				t.Errorf("diff %d missing %d extra %d wrong", len(d.Missing), len(d.Extra), len(d.WrongSeq))
			}
		}},
		{"a page size not dividing the total", 777, nil, func(t *testing.T, d historyDiff) {
			if !d.empty() {
				t.Errorf("diff %d missing %d extra %d wrong", len(d.Missing), len(d.Extra), len(d.WrongSeq))
			}
		}},
		{"an extra document past the window is found", historyPage, func(e []storeEvent) []storeEvent { return e[:n-1] }, func(t *testing.T, d historyDiff) {
			if len(d.Extra) != 1 || len(d.Missing) != 0 {
				t.Errorf("extra %v missing %v, want one extra (ev-%05d)", d.Extra, d.Missing, n-1)
			}
		}},
		{"a missing document is found", historyPage, func(e []storeEvent) []storeEvent {
			return append(e, storeEvent{EventID: "ev-zzz", AggregateID: "db:c:y", Seq: 1})
		}, func(t *testing.T, d historyDiff) {
			if len(d.Missing) != 1 || len(d.Extra) != 0 {
				t.Errorf("missing %v extra %v, want one missing (ev-zzz)", d.Missing, d.Extra)
			}
		}},
		{"a wrong sequence number is found", historyPage, func(e []storeEvent) []storeEvent {
			e = append([]storeEvent(nil), e...)
			e[n-1].Seq++
			return e
		}, func(t *testing.T, d historyDiff) {
			if len(d.WrongSeq) != 1 {
				t.Errorf("wrong %v, want one", d.WrongSeq)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hist, err := readHistory(c, ts.URL, idx, tc.page)
			if err != nil {
				t.Fatal(err)
			}
			if len(hist) != n {
				t.Fatalf("read %d history documents, want %d", len(hist), n)
			}
			want := doms
			if tc.edit != nil {
				want = tc.edit(doms)
			}
			tc.check(t, diffHistory(want, hist))
		})
	}
}
