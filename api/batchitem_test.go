package api

import (
	"testing"
)

// TestBatchItemNotAnObjectNamesTheItem: a batch item (or an appended
// event) that is not a JSON object is refused naming the item, items[i] or
// events[i]: it was refused with no field at all.
func TestBatchItemNotAnObjectNamesTheItem(t *testing.T) {
	a := eventAPI(t, false)
	for _, c := range []struct {
		name, path, body string
		status           int
		field            string
	}{
		{"batch item a string", base + ":batch", `{"items":["str"]}`, 207, "items[0]"},
		{"batch item a number", base + ":batch", `{"items":[{"op":"create","data":{}},1]}`, 207, "items[1]"},
		{"batch item an array", base + ":batch", `{"items":[[]]}`, 207, "items[0]"},
		{"batch item null", base + ":batch", `{"items":[null]}`, 207, "items[0]"},
		{"event a string", devicePath, `{"events":["str"]}`, 422, "events[0]"},
		{"event a number", devicePath, `{"events":[{"event_type":"x.y"},2]}`, 422, "events[1]"},
		{"event null", devicePath, `{"events":[null]}`, 422, "events[0]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := a.do("POST", c.path, c.body).expect(t, c.status, "")
			got := r.str("field")
			if c.status == 207 {
				res, _ := r.json["results"].([]any)
				last, _ := res[len(res)-1].(map[string]any)
				got, _ = last["field"].(string)
			}
			if got != c.field {
				t.Fatalf("field %q, want %q: %s", got, c.field, r.body)
			}
		})
	}
}
