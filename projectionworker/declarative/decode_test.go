package declarative

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// sameAsUnmarshal fails unless decodeDoc gives what json.Unmarshal gives
// into a map[string]any: the same value, or the same error.
func sameAsUnmarshal(t *testing.T, b []byte) {
	t.Helper()
	want, got := map[string]any{}, map[string]any{}
	werr := json.Unmarshal(b, &want)
	gerr := decodeDoc(b, &got)
	if fmt.Sprint(werr) != fmt.Sprint(gerr) {
		t.Fatalf("decodeDoc(%q): error %v, json.Unmarshal: %v", b, gerr, werr)
	}
	if werr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeDoc(%q) = %#v, json.Unmarshal: %#v", b, got, want)
	}
}

func TestDecodeDocEqualsUnmarshal(t *testing.T) {
	cases := []string{
		`{}`, ` { } `, `{"a":1}`, "{\n\t\"a\" : [ 1 , 2 ] \r}",
		`{"customer_id":"c-7","deleted":false,"order_ids":["o-1","o-2"],"orders":2,"sluice":{"applied":{"Order:o-1":1},"key":"c-7"},"total":30.5}`,
		`{"n":[0,-0,1.5,-2e3,1E+2,1e-7,12345678901234567890,0.1]}`,
		`{"a":null,"b":true,"c":false,"d":{},"e":[],"f":[[],{}]}`,
		`{"dup":1,"dup":{"x":2}}`,
		`{"u":"héllo 世界 🎉"}`,
		// json.Unmarshal's own path: escapes, replaced bytes, errors.
		`{"e":"a\"b\\c\/d\n\u00e9\ud83c\udf89\ud800"}`, "{\"x\":\"a\xffb\"}", `{"big":1e400}`,
		`null`, `[]`, `"s"`, `1`, ``, `{`, `{"a"}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":.5}`, `{"a":+1}`,
		`{"a":1,}`, `{"a":[1,]}`, `{"a":1} x`, `{"a":tru}`, `{"a":nulll}`, "{\"a\":\"\x01\"}", `{"a":NaN}`,
		`{"deep":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`,
		`{"deep":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	}
	for _, c := range cases {
		t.Run(c[:min(len(c), 40)], func(t *testing.T) { sameAsUnmarshal(t, []byte(c)) })
	}
}

// FuzzDecodeDoc: any bytes decode as json.Unmarshal decodes them.
func FuzzDecodeDoc(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[true,null,"x"],"c":{"d":-1.5e-3}}`, `{"a":"\u00e9"}`, "{\"a\":\"\xff\"}", `{"a":01}`, `{"a":[{},[]]}`, ` {"a" : 1 } `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameAsUnmarshal(t, b) })
}
