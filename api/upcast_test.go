package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/schema/schematest"
)

// rawEvent is one event of an append body, with its schema_version (0:
// not named, the latest is checked).
func rawEvent(typ string, version int, data string) string {
	v := ""
	if version > 0 {
		v = fmt.Sprintf(`,"schema_version":%d`, version)
	}
	return fmt.Sprintf(`{"event_id":%q,"event_type":%q,"data":%s%s}`, uuid.NewString(), typ, data, v)
}

// upcastAPI is the event API with the OrderPlaced example registered
// (v1, v2, v3 and the upcasters v1→v2, v2→v3: examples/schemas) and one
// stream holding an event of each version and one of a type without a
// schema.
func upcastAPI(t *testing.T) (*testAPI, *schema.Registry) {
	t.Helper()
	a, reg := schemaAPI(t, schema.ModeOpen)
	schematest.RegisterOrderPlaced(t, reg)
	body := `{"events":[` + strings.Join([]string{
		rawEvent("OrderPlaced", 1, `{"order_id":"o-1","total":12.5}`),
		rawEvent("OrderPlaced", 2, `{"order_id":"o-1","total":3}`),
		rawEvent("OrderPlaced", 0, `{"order_id":"o-1","amount":4,"currency":"GBP"}`),
		rawEvent("order.noted", 0, `{"note":"as it was"}`),
	}, ",") + `]}`
	a.do("POST", "/v1/streams/Order/o-1/events", body).expect(t, 201, "")
	return a, reg
}

// dataOf returns "v<schema_version> <data>" of each envelope of a page.
func dataOf(t *testing.T, body []byte) []string {
	t.Helper()
	var page struct{ Events []json.RawMessage }
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, b := range page.Events {
		var env struct {
			SchemaVersion int             `json:"schema_version"`
			Data          json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("v%d %s", env.SchemaVersion, env.Data))
	}
	return out
}

// The stream's events as upcast to v3 (the v1 event through both steps:
// EUR from v1→v2, amount from v2→v3; the v2 event without currency: USD).
var latestForms = []string{
	`v3 {"amount":12.5,"currency":"EUR","order_id":"o-1"}`,
	`v3 {"amount":3,"currency":"USD","order_id":"o-1"}`,
	`v3 {"order_id":"o-1","amount":4,"currency":"GBP"}`,
	`v1 {"note":"as it was"}`,
}

var storedForms = []string{
	`v1 {"order_id":"o-1","total":12.5}`,
	`v2 {"order_id":"o-1","total":3}`,
	`v3 {"order_id":"o-1","amount":4,"currency":"GBP"}`,
	`v1 {"note":"as it was"}`,
}

// TestReadAsLatest: stream and log reads with as=latest return every
// event upcast to its type's latest version (v1→v2→v3 through both
// upcasters); without as (or as=stored) they return the stored envelopes
// byte for byte, which upcasting never changes; a bad as is a 422 naming
// the parameter.
func TestReadAsLatest(t *testing.T) {
	a, _ := upcastAPI(t)
	const stream = "/v1/streams/Order/o-1/events"
	rawStored := func() []string {
		var out []string
		evs, err := a.store.Stream(context.Background(), "Order", "o-1", 1, 0, "")
		if err != nil || len(evs) != 4 {
			t.Fatalf("the stream: %d events, %v", len(evs), err)
		}
		for _, ev := range evs {
			out = append(out, string(ev.Raw))
		}
		return out
	}
	before := rawStored()
	reverse := func(s []string) []string {
		out := make([]string, len(s))
		for i := range s {
			out[i] = s[len(s)-1-i]
		}
		return out
	}
	cases := []struct {
		name, target string
		want         []string
	}{
		{"stream read, as=latest", stream + "?as=latest", latestForms},
		{"stream read backward, as=latest", stream + "?direction=backward&as=latest", reverse(latestForms)},
		{"stream read, as absent", stream, storedForms},
		{"stream read, as=stored", stream + "?as=stored", storedForms},
		{"log read, as=latest", "/v1/log?from_position=1&as=latest", latestForms},
		{"log read, as absent", "/v1/log?from_position=1", storedForms},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := a.do("GET", tc.target, "").expect(t, http.StatusOK, "")
			if got := dataOf(t, r.body); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
			if !strings.Contains(tc.target, "as=latest") {
				var raws []string
				var page struct{ Events []json.RawMessage }
				_ = json.Unmarshal(r.body, &page)
				for _, e := range page.Events {
					raws = append(raws, string(e))
				}
				if fmt.Sprint(raws) != fmt.Sprint(before) {
					t.Fatalf("without as=latest the envelopes are not the stored bytes:\n%q\n%q", raws, before)
				}
			}
		})
	}
	t.Run("stored events are never rewritten", func(t *testing.T) {
		if after := rawStored(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("the store changed:\n%q\n%q", after, before)
		}
	})
	for _, tc := range []struct{ name, target string }{
		{"bad as on a stream read", stream + "?as=v3"},
		{"bad as on a log read", "/v1/log?as=Latest"},
		{"as given twice", stream + "?as=latest&as=stored"},
		{"bad as on a subscription", "/v1/log/subscribe?as=newest"},
		{"bad as on a type subscription", "/v1/streams/Order/subscribe?as="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := a.do("GET", tc.target, "").expect(t, http.StatusBadRequest, CodeInvalidParameter)
			if r.str("field") != "as" || !strings.Contains(r.str("detail"), "as must be") {
				t.Fatalf("the problem does not name as: %s", r.body)
			}
		})
	}
}

// sseLines reads an event stream until the server ends it (or the guard
// expires) and returns its events, an error event as "error: <data>".
func sseLines(t *testing.T, br *bufio.Reader, until func([]string) bool) []string {
	t.Helper()
	var out []string
	var kind string
	for !until(out) {
		line, err := br.ReadString('\n')
		if err != nil {
			return out
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			kind = line[7:]
		case strings.HasPrefix(line, "data: ") && kind == "error":
			out = append(out, "error: "+line[6:])
		case strings.HasPrefix(line, "data: "):
			var env struct {
				SchemaVersion int             `json:"schema_version"`
				Data          json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal([]byte(line[6:]), &env); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("v%d %s", env.SchemaVersion, env.Data))
		case line == "":
			kind = ""
		}
	}
	return out
}

// TestSubscribeAsLatest: an SSE subscription with as=latest sends each
// event upcast to its type's latest version; without as, as stored.
func TestSubscribeAsLatest(t *testing.T) {
	a, _ := upcastAPI(t)
	srv := httptest.NewServer(a.h)
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name, path string
		want       []string
	}{
		{"log, as=latest", "/v1/log/subscribe?from_position=1&as=latest", latestForms},
		{"aggregate type, as=latest", "/v1/streams/Order/subscribe?from_position=1&as=latest", latestForms},
		{"log, as absent", "/v1/log/subscribe?from_position=1", storedForms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The guard only keeps a broken build from hanging.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			br := openSSE(t, ctx, srv.URL+tc.path, "")
			got := sseLines(t, br, func(s []string) bool { return len(s) == len(tc.want) })
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestUpcastFailure: an event its upcaster fails on makes a read with
// as=latest a 500 upcast_failed naming the event type, the versions and
// the upcaster, and ends a subscription with an error event after the
// events before it; the same reads without as still serve it as stored.
func TestUpcastFailure(t *testing.T) {
	ctx := context.Background()
	a, reg := upcastAPI(t)
	if _, err := reg.Register(ctx, "Shipped", []byte(`{"type":"object"}`), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	a.do("POST", "/v1/streams/Parcel/p-1/events", `{"events":[`+rawEvent("Shipped", 0, `{"via":"dhl"}`)+","+rawEvent("Shipped", 0, `{"by":"ups"}`)+`]}`).expect(t, 201, "")
	if _, err := reg.Register(ctx, "Shipped", []byte(`{"type":"object","required":["carrier"]}`), schema.RegisterOptions{Compatibility: schema.None,
		Upcaster: []byte("event_type: Shipped\nfrom: 1\nset:\n  carrier: event.data.via\nunset: [via]\nexamples:\n  - data: {via: dhl}\n"), UpcasterSource: "shipped.yaml"}); err != nil {
		t.Fatal(err)
	}
	const why = `of Shipped cannot be upcast from schema v1 to v2: upcaster Shipped v1→v2 (shipped.yaml) failed: set carrier at shipped.yaml:4:12: expression "event.data.via" failed: no such key: via`
	for _, target := range []string{"/v1/streams/Parcel/p-1/events?as=latest", "/v1/log?from_position=1&as=latest"} {
		t.Run("read "+target, func(t *testing.T) {
			r := a.do("GET", target, "").expect(t, http.StatusInternalServerError, CodeUpcastFailed)
			if r.str("field") != "as" || r.str("limit") != "Shipped v1→v2" || r.num("schema_version") != 1 || !strings.Contains(r.str("detail"), why) ||
				r.header.Get("Content-Type") != mediaProblem {
				t.Fatalf("problem %s, want field as, limit Shipped v1→v2, schema_version 1, detail containing %q", r.body, why)
			}
		})
	}
	t.Run("without as the events are served as stored", func(t *testing.T) {
		r := a.do("GET", "/v1/streams/Parcel/p-1/events", "").expect(t, http.StatusOK, "")
		if got := fmt.Sprint(dataOf(t, r.body)); got != `[v1 {"via":"dhl"} v1 {"by":"ups"}]` {
			t.Fatalf("got %s", got)
		}
	})
	t.Run("a subscription sends the events before it, then the error", func(t *testing.T) {
		srv := httptest.NewServer(a.h)
		t.Cleanup(srv.Close)
		gctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		br := openSSE(t, gctx, srv.URL+"/v1/streams/Parcel/subscribe?from_position=1&as=latest", "")
		got := sseLines(t, br, func(s []string) bool { return len(s) > 0 && strings.HasPrefix(s[len(s)-1], "error: ") })
		if len(got) != 2 || got[0] != `v2 {"carrier":"dhl"}` || !strings.Contains(got[1], `"code":"upcast_failed"`) ||
			!strings.Contains(got[1], "upcaster Shipped v1→v2 (shipped.yaml) failed") || !strings.Contains(got[1], "no such key: via") {
			t.Fatalf("got %q; want the first event upcast, then an upcast_failed error", got)
		}
	})
}

// TestUpcastFailureOfTheLatestSchema: when the upcast data does not match
// the latest schema (here a step without an upcaster), the problem's
// limit names the whole upcast, stored version to latest, not a step from
// the latest version to itself.
func TestUpcastFailureOfTheLatestSchema(t *testing.T) {
	ctx := context.Background()
	a, reg := upcastAPI(t)
	if _, err := reg.Register(ctx, "Weighed", []byte(`{"type":"object"}`), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	a.do("POST", "/v1/streams/Parcel/w-1/events", `{"events":[`+rawEvent("Weighed", 0, `{"g":1}`)+`]}`).expect(t, 201, "")
	if _, err := reg.Register(ctx, "Weighed", []byte(`{"type":"object","required":["kg"]}`), schema.RegisterOptions{Compatibility: schema.None}); err != nil {
		t.Fatal(err)
	}
	r := a.do("GET", "/v1/streams/Parcel/w-1/events?as=latest", "").expect(t, http.StatusInternalServerError, CodeUpcastFailed)
	if r.str("limit") != "Weighed v1→v2" || r.num("schema_version") != 1 || !strings.Contains(r.str("detail"), "does not match schema v2") {
		t.Fatalf("problem %s, want limit Weighed v1→v2", r.body)
	}
}
