package api

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A body in a content coding the API does not decode is 415 naming
// Content-Encoding, with Accept-Encoding: identity, and nothing is
// stored: a gzipped body was refused as invalid text, and a plain body
// labelled gzip (or br) was stored. Two Content-Type headers are 415 too:
// the first was read and the other ignored.
func TestBodyEncodingAndContentTypeRefusals(t *testing.T) {
	a := eventAPI(t, false)
	const events = `{"events":[{"event_type":"X","data":{}}]}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(events))
	_ = zw.Close()
	const inst = "/v1/dbs/shop/classes/orders/instances"
	cases := []struct {
		name, method, target, body string
		headers                    [][2]string
		status                     int
		field                      string
	}{
		{"gzipped append", "POST", devicePath, gz.String(), [][2]string{{"Content-Type", "application/json"}, {"Content-Encoding", "gzip"}}, 415, "Content-Encoding"},
		{"plain append labelled gzip", "POST", devicePath, events, [][2]string{{"Content-Type", "application/json"}, {"Content-Encoding", "gzip"}}, 415, "Content-Encoding"},
		{"create labelled br", "POST", inst, `{"instance_id":"e-1"}`, [][2]string{{"Content-Type", "application/json"}, {"Content-Encoding", "br"}}, 415, "Content-Encoding"},
		{"patch with a list of codings", "PATCH", inst + "/e-1", `{"a":1}`, [][2]string{{"Content-Type", "application/json"}, {"Content-Encoding", "identity, gzip"}}, 415, "Content-Encoding"},
		{"batch labelled deflate", "POST", inst + ":batch", `{"items":[{"op":"create"}]}`, [][2]string{{"Content-Type", "application/json"}, {"Content-Encoding", "deflate"}}, 415, "Content-Encoding"},
		{"binary CloudEvent labelled gzip", "POST", devicePath, `{}`, [][2]string{{"Content-Type", "application/json"}, {"Content-Encoding", "gzip"},
			{"ce-specversion", "1.0"}, {"ce-id", "enc-1"}, {"ce-source", "/s"}, {"ce-type", "x.y"}}, 415, "Content-Encoding"},
		{"two Content-Types on an append", "POST", devicePath, events, [][2]string{{"Content-Type", "application/json"}, {"Content-Type", "text/plain"}}, 415, "Content-Type"},
		{"two Content-Types on a create", "POST", inst, `{"instance_id":"e-2"}`, [][2]string{{"Content-Type", "application/json"}, {"Content-Type", "application/json"}}, 415, "Content-Type"},
		{"identity is the body as sent", "POST", devicePath, events, [][2]string{{"Content-Type", "application/json"}, {"Content-Encoding", "identity"}}, 201, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := a.appendsCount()
			req := httptest.NewRequest(c.method, c.target, bytes.NewBufferString(c.body))
			for _, h := range c.headers {
				req.Header.Add(h[0], h[1])
			}
			rec := httptest.NewRecorder()
			openAPIValidator(t).Handler(t, a.h).ServeHTTP(rec, req)
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
			}
			if c.status < 400 {
				return
			}
			var p map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Header().Get("Content-Type") != mediaProblem {
				t.Fatalf("not a problem document (%v): %s %s", err, rec.Header().Get("Content-Type"), rec.Body)
			}
			if p["code"] != CodeUnsupportedMediaType || p["field"] != c.field {
				t.Fatalf("code %v field %v, want %s %s", p["code"], p["field"], CodeUnsupportedMediaType, c.field)
			}
			if c.field == "Content-Encoding" && rec.Header().Get("Accept-Encoding") != "identity" {
				t.Errorf("Accept-Encoding %q, want identity", rec.Header().Get("Accept-Encoding"))
			}
			if n := a.appendsCount() - before; n != 0 {
				t.Fatalf("a refused request stored %d events", n)
			}
		})
	}
	// A DELETE without a body is not refused for its Content-Encoding.
	req := httptest.NewRequest("DELETE", inst+"/e-3", nil)
	req.Header.Set("Content-Encoding", "gzip")
	rec := httptest.NewRecorder()
	openAPIValidator(t).Handler(t, a.h).ServeHTTP(rec, req)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("DELETE without a body: %d %s", rec.Code, rec.Body)
	}
}
