package api

import (
	"net/http"
	"strings"
	"testing"
)

// TestDataKeysRefusedAtTheDoor: data keys Elasticsearch cannot store, or
// that collide with the instance document's own fields, are refused with
// 422 invalid_data_key naming the key's path — in creates, merge patches
// and batch items — instead of a 202 and a command that goes DEAD (issue
// 26.3). Nothing is appended.
func TestDataKeysRefusedAtTheDoor(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	bad := []struct{ data, field string }{
		{`{"_id":"x"}`, "data._id"},
		{`{"_index":"i"}`, "data._index"},
		{`{"_source":{}}`, "data._source"},
		{`{"_routing":"r"}`, "data._routing"},
		{`{"_version":1}`, "data._version"},
		{`{"_seq_no":1}`, "data._seq_no"},
		{`{"_type":"t"}`, "data._type"},
		{`{"_id.x":1}`, "data._id.x"},
		{`{"":1}`, `data[""]`},
		{`{"  ":1}`, `data["  "]`},
		{`{"a":{"":1}}`, `data.a[""]`},
		{`{"a":[{"ok":1},{" ":2}]}`, `data.a[1][" "]`},
		{`{".":1}`, `data["."]`},
		{`{"..":1}`, `data[".."]`},
		{`{".a":1}`, `data[".a"]`},
		{`{"a.":1}`, `data["a."]`},
		{`{"a..b":1}`, `data["a..b"]`},
		{`{"x":{"y.":1}}`, `data.x["y."]`},
		{`{"db":"other"}`, "data.db"},
		{`{"class":"c"}`, "data.class"},
		{`{"instance_id":"i"}`, "data.instance_id"},
		{`{"sequence_number":9}`, "data.sequence_number"},
		{`{"event_id":"e"}`, "data.event_id"},
		{`{"created_at":"t"}`, "data.created_at"},
		{`{"updated_at":"t"}`, "data.updated_at"},
		{`{"deleted":true}`, "data.deleted"},
		{`{"db.name":"x"}`, "data.db.name"},
	}
	patchCT := "Content-Type: application/merge-patch+json"
	for _, b := range bad {
		for _, c := range []struct {
			op, method, target, body string
			headers                  []string
		}{
			{"create", "POST", base, `{"instance_id":"o-1","data":` + b.data + `}`, nil},
			{"patch", "PATCH", base + "/o-1", b.data, []string{patchCT}},
		} {
			t.Run(c.op+" "+b.data, func(t *testing.T) {
				r := a.do(c.method, c.target, c.body, c.headers...).expect(t, http.StatusUnprocessableEntity, CodeInvalidDataKey)
				if r.str("field") != b.field || r.str("limit") == "" || r.str("detail") == "" ||
					r.header.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("field %q, want %q: %s", r.str("field"), b.field, r.body)
				}
			})
		}
		t.Run("batch "+b.data, func(t *testing.T) {
			body := `{"items":[{"op":"create","instance_id":"b","data":` + b.data + `},{"op":"update","instance_id":"b","data":` + b.data + `}]}`
			r := a.do("POST", base+":batch", body).expect(t, http.StatusMultiStatus, "")
			if strings.Count(string(r.body), `"code":"`+CodeInvalidDataKey+`"`) != 2 || !strings.Contains(string(r.body), `"field":`+string(mustJSON(t, b.field))) {
				t.Fatalf("batch: %s", r.body)
			}
		})
	}
	if n := a.appendsCount(); n != 0 {
		t.Fatalf("refused data wrote %d appends", n)
	}
	// Keys that are fine stay fine; a patch may remove any key (null).
	a.do("POST", base, `{"instance_id":"ok","data":{"a.b":1,"_private":2,"n":{"_id":3,"db":4}}}`).expect(t, 202, "")
	a.do("PATCH", base+"/ok", `{"_id":null,"db":null,"":null,"x":{"_source":1}}`, patchCT).expect(t, 202, "")
}
