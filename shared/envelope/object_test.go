package envelope

import (
	"errors"
	"reflect"
	"testing"
)

// ScanObject names each fault with the member it lies in, and reports the
// top-level members of an object it accepts.
func TestScanObject(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     string
		offset int
		fault  ObjectFault
		member string
		key    string
	}{
		{"empty", "  ", 0, ObjectEmpty, "", ""},
		{"array", `[1]`, 0, ObjectNotAnObject, "", ""},
		{"string", `"x"`, 0, ObjectNotAnObject, "", ""},
		{"garbage", `x`, 0, ObjectSyntax, "", ""},
		{"syntax in a member", `{"a":{"b":tru}}`, 0, ObjectSyntax, "a", ""},
		{"truncated", `{"a":[1,`, 0, ObjectTruncated, "a", ""},
		{"top-level duplicate", `{"a":1,"a":2}`, 0, ObjectDuplicateKey, "", "a"},
		{"duplicate by escape", `{"a":{"b":1,"\u0062":2}}`, 0, ObjectDuplicateKey, "a", "b"},
		{"trailing", `{} {}`, 0, ObjectTrailingData, "", ""},
		{"too deep", `{"a":{"b":{"c":{}}}}`, 0, ObjectTooDeep, "a", ""},
		{"deep enough with an offset", `{"a":{"b":{"c":{}}}}`, 1, 0, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var keys []string
			vals := map[string]string{}
			err := ScanObject([]byte(tc.in), ObjectRule{Offset: tc.offset, MaxDepth: 3,
				OnKey:   func(k string) error { keys = append(keys, k); return nil },
				OnValue: func(k string, v []byte) { vals[k] = string(v) }})
			if tc.fault == 0 {
				if err != nil || !reflect.DeepEqual(keys, []string{"a"}) || vals["a"] != `{"b":{"c":{}}}` {
					t.Fatalf("err %v, keys %q, values %q", err, keys, vals)
				}
				return
			}
			var oe *ObjectError
			if !errors.As(err, &oe) {
				t.Fatalf("error %v (%T), want an *ObjectError", err, err)
			}
			if oe.Fault != tc.fault || oe.Member != tc.member || oe.Key != tc.key {
				t.Fatalf("fault %d member %q key %q, want %d %q %q (%v)", oe.Fault, oe.Member, oe.Key, tc.fault, tc.member, tc.key, oe)
			}
		})
	}
	t.Run("invalid text is a ValidationError naming the path", func(t *testing.T) {
		err := ScanObject([]byte(`{"a":{"b":"\ud800"}}`), ObjectRule{Field: "data", MaxDepth: 3})
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Code != CodeInvalidText || ve.Field != "data.a.b" {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("OnKey's error ends the scan", func(t *testing.T) {
		stop := errors.New("stop")
		if err := ScanObject([]byte(`{"a":1}`), ObjectRule{MaxDepth: 3, OnKey: func(string) error { return stop }}); err != stop {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("a value cannot be appended into the input", func(t *testing.T) {
		b := []byte(`{"a":[1],"b":2}`)
		var a []byte
		_ = ScanObject(b, ObjectRule{MaxDepth: 3, OnValue: func(k string, v []byte) {
			if k == "a" {
				a = v
			}
		}})
		_ = append(a, 'X')
		if string(b) != `{"a":[1],"b":2}` {
			t.Fatalf("input changed: %s", b)
		}
	})
}
