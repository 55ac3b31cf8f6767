package api

import (
	"strings"
	"testing"
)

// TestEventIDRefusalSaysWhatIsWrong: the detail of a refused event_id says
// what is wrong with the value given (not a UUID, or the nil UUID), not
// both at once.
func TestEventIDRefusalSaysWhatIsWrong(t *testing.T) {
	a := eventAPI(t, false)
	for _, c := range []struct {
		name, id, want, not string
	}{
		{"not a UUID", "abc", `got "abc"`, "nil UUID"},
		{"braced UUID", "{5f0c8a52-9d1e-4b7a-8c3f-1e2d3c4b5a69}", "must be a UUID", "nil UUID"},
		{"nil UUID", "00000000-0000-0000-0000-000000000000", "must not be the nil UUID", "got"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := a.do("POST", devicePath, `{"events":[{"event_id":"`+c.id+`","event_type":"x.y"}]}`).expect(t, 422, CodeValidationFailed)
			d := r.str("detail")
			if r.str("field") != "events[0].event_id" || !strings.Contains(d, c.want) || strings.Contains(d, c.not) {
				t.Fatalf("want a detail with %q and without %q: %s", c.want, c.not, r.body)
			}
		})
	}
}
