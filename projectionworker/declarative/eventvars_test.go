package declarative

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shared/celexpr"
	"github.com/sluicehq/sluice/shared/envelope"
)

// sameEventVars checks that eventVars (data decoded by decodeDoc) gives
// the values and the error celexpr.EventVars (json.Unmarshal) gives.
func sameEventVars(t *testing.T, data []byte, metadata map[string]json.RawMessage) {
	t.Helper()
	e := envelope.Envelope{EventID: "00000000-0000-4000-8000-000000000001", EventType: "T", Kind: envelope.KindDomain,
		AggregateType: "A", AggregateID: "a", SequenceNumber: 3, Position: 9, SchemaVersion: 2,
		OccurredAt: envelope.NewTimestamp(time.Unix(1_700_000_000, 0).UTC()), Data: data, Metadata: metadata}
	got, gerr := eventVars(e)
	want, werr := celexpr.EventVars(e)
	if fmt.Sprint(gerr) != fmt.Sprint(werr) {
		t.Fatalf("%q: error %v, want %v", data, gerr, werr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %#v\nwant %#v", data, got, want)
	}
}

// The expressions see the same event variables whether the data is
// decoded directly or with encoding/json: the same values (numbers as
// doubles, escapes, invalid UTF-8 as U+FFFD, null data) and the same
// errors.
func TestEventVarsEqualCelexpr(t *testing.T) {
	for _, c := range []string{
		``, `{}`, `null`, `[1]`, `"x"`, `1`, `{"customer_id":"c-1","amount":12.5}`,
		`{"a":{"b":[1,2.5e3,-0,true,false,null,"s"]}}`, `{"a":"\u00e9\ud83d\ude00\n"}`, "{\"a\":\"\xff\"}",
		`{"a":1,"a":2}`, `{"a":01}`, `{"a":1e400}`, `{"a":1}x`, ` {"a" : 1 } `, `{"a":"<&>\u2028"}`,
	} {
		t.Run(c, func(t *testing.T) { sameEventVars(t, []byte(c), nil) })
	}
	t.Run("metadata", func(t *testing.T) {
		sameEventVars(t, []byte(`{"a":1}`), map[string]json.RawMessage{"trace": json.RawMessage(`{"id":"x"}`), "n": json.RawMessage(`1`)})
	})
}

// FuzzEventVars: any data gives the event variables celexpr.EventVars
// gives.
func FuzzEventVars(f *testing.F) {
	for _, s := range []string{`{"customer_id":"c-1","amount":12.5}`, `{"a":[{},[]]}`, "{\"a\":\"\xff\"}", `null`, `{"a":"\u00e9"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameEventVars(t, b, nil) })
}
