package api

import (
	"testing"
)

// TestRefusedDataKeyNotation: a refused key the dotted path cannot show
// (empty, blank, with an empty dot segment) is named as a JSON string in
// brackets after its parent's path, in every API that checks data keys.
func TestRefusedDataKeyNotation(t *testing.T) {
	a := eventAPI(t, false)
	for _, c := range []struct {
		name, data, field string
	}{
		{"empty key", `{"":1}`, `data[""]`},
		{"nested empty key", `{"a":{"":1}}`, `data.a[""]`},
		{"empty key in an array", `{"a":[{"ok":1},{"":2}]}`, `data.a[1][""]`},
		{"blank key", `{"  ":1}`, `data["  "]`},
		{"dot", `{".":1}`, `data["."]`},
		{"trailing dot", `{"x":{"y.":1}}`, `data.x["y."]`},
		{"quote in key", `{"a\"":{"b..c":1}}`, `data.a"["b..c"]`},
		{"metadata field stays dotted", `{"_id":1}`, `data._id`},
		{"reserved dotted key stays dotted", `{"db.name":1}`, `data.db.name`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := a.do("POST", base, `{"instance_id":"k","data":`+c.data+`}`).expect(t, 422, CodeInvalidDataKey)
			if r.str("field") != c.field {
				t.Fatalf("create: field %q, want %q: %s", r.str("field"), c.field, r.body)
			}
			r = a.do("POST", devicePath, `{"events":[{"event_type":"x.y","data":`+c.data+`}]}`).expect(t, 422, CodeInvalidDataKey)
			if r.str("field") != "events[0]."+c.field {
				t.Fatalf("append: field %q, want %q: %s", r.str("field"), "events[0]."+c.field, r.body)
			}
		})
	}
}
