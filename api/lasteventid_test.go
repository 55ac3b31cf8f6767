package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestLastEventIDGivenTwice: two Last-Event-ID headers are refused naming
// the header, as a query parameter given twice is; the first one was used.
func TestLastEventIDGivenTwice(t *testing.T) {
	a := eventAPI(t, false)
	a.do("POST", devicePath, appendBody(nil, newEvents(1, "x.y")...)).expect(t, 201, "")
	for _, c := range []struct {
		name, path string
		ids        []string
	}{
		{"log subscription", "/v1/log/subscribe", []string{"1", "0"}},
		{"type subscription", "/v1/streams/Device/subscribe", []string{"0", "0"}},
		{"second one malformed", "/v1/log/subscribe", []string{"1", "junk"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A subscription that is not refused streams until its
			// context ends.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			req := httptest.NewRequest("GET", c.path, nil).WithContext(ctx)
			for _, id := range c.ids {
				req.Header.Add("Last-Event-ID", id)
			}
			rec := httptest.NewRecorder()
			a.h.ServeHTTP(rec, req)
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"field":"Last-Event-ID"`) ||
				!strings.Contains(rec.Body.String(), `"error":"`+CodeInvalidParameter+`"`) {
				t.Fatalf("got %d: %s", rec.Code, rec.Body)
			}
		})
	}
}
