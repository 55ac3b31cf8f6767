package eventstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shared/suggest"
)

// TestFindStream: a stream that exists is found; a missing one names the
// nearest stream of its type, or the nearest type when the type has none.
func TestFindStream(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	mustAppend(t, s, domainEvent("Order", "o-1", map[string]int{"n": 1}), domainEvent("Order", "o-2", nil), domainEvent("Device", "d-1", nil))
	for _, tc := range []struct {
		name, typ, id string
		want          string // "" found; else in the error
	}{
		{"exists", "Order", "o-1", ""},
		{"exists, named with surrounding space", "Order", " o-1 ", ""},
		{"a near id", "Order", "o-3", `Order stream "o-3" not found (no event of it is stored); did you mean "o-1"?`},
		{"a far id lists neighbours", "Order", "zzzzzzzz", "streams of Order next to it: o-1, o-2"},
		{"a misspelt type", "Ordr", "o-1", `aggregate type "Ordr" not found (the store holds no stream of it); did you mean "Order"?`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.FindStream(ctxT(t), tc.typ, tc.id)
			var nf *suggest.NotFoundError
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("FindStream: %v, want found", err)
			case tc.want != "" && (!errors.As(err, &nf) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("FindStream: %v, want a NotFoundError containing %q", err, tc.want)
			}
		})
	}
}
