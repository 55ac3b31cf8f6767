package api

import (
	"strings"
	"testing"
)

// TestInstanceEventsPastTheEnd: from_seq past the last sequence reads an
// empty page whose range is empty (to_seq = from_seq - 1), without
// next_from_seq, as a stream read past its end does; it answered to_seq =
// the last sequence, which could be far below from_seq.
func TestInstanceEventsPastTheEnd(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	a.do("POST", base, `{"instance_id":"p","data":{"n":1}}`).expect(t, 202, "")
	for _, c := range []struct {
		from, to string
		count    int
	}{
		{"1", "1", 1},
		{"2", "1", 0},
		{"3", "2", 0},
		{"9223372036854775807", "9223372036854775806", 0},
	} {
		t.Run("from_seq="+c.from, func(t *testing.T) {
			r := a.do("GET", base+"/p/events?from_seq="+c.from, "").expect(t, 200, "")
			evs, _ := r.json["events"].([]any)
			b := string(r.body)
			if !strings.Contains(b, `"from_seq":`+c.from+`,`) || !strings.Contains(b, `"to_seq":`+c.to+`,`) || len(evs) != c.count ||
				r.json["next_from_seq"] != nil || r.num("last_sequence") != 1 {
				t.Fatalf("want to_seq %s and %d events: %s", c.to, c.count, r.body)
			}
		})
	}
}
