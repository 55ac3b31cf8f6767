package api

import "testing"

// A /v1 query string the handlers would misread is refused naming the
// parameter: a pair url.Values drops (a bad %-escape, a ';': the filter
// of ?aggregate_type=Order;x was dropped and the whole log answered) and
// a parameter given twice (the first was read). Nothing else changes.
func TestQueryStringRefusals(t *testing.T) {
	a := eventAPI(t, false)
	a.do("POST", devicePath, appendBody("no_stream", newEvents(2, "READING_TAKEN")...)).expect(t, 201, "")
	cases := []struct {
		name, target string
		status       int
		field        string
	}{
		{"a ';' in a filter", "/v1/log?aggregate_type=Device;x", 400, "aggregate_type"},
		{"a bad escape", "/v1/log?limit=%ZZ", 400, "limit"},
		{"a bad escape in a name", "/v1/log?li%ZZmit=2", 400, "query"},
		{"limit twice", "/v1/log?limit=1&limit=2", 400, "limit"},
		{"cursor twice", "/v1/log?cursor=1&cursor=0", 400, "cursor"},
		{"from_sequence twice", devicePath + "?from_sequence=1&from_sequence=2", 400, "from_sequence"},
		{"direction twice", devicePath + "?direction=forward&direction=backward", 400, "direction"},
		{"the same value twice", devicePath + "?limit=1&limit=1", 400, "limit"},
		{"any route, any parameter", "/v1/commands/c-1?x=1&x=2", 400, "x"},
		{"instance events kind twice", "/v1/dbs/shop/classes/orders/instances/1/events?kind=domain&kind=command", 400, "kind"},
		{"a good filter", "/v1/log?aggregate_type=Device&limit=1", 200, ""},
		{"an unknown parameter", devicePath + "?limit=1&x=1", 200, ""},
		{"an escaped ';'", "/v1/log?aggregate_type=Device%3Bx", 400, "aggregate_type"},
		// A pair without a name has no name to report: field is "query".
		{"a nameless pair twice", "/v1/log?=1&=2", 400, "query"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.status == 200 {
				a.do("GET", c.target, "").expect(t, 200, "")
				return
			}
			r := a.do("GET", c.target, "").expect(t, c.status, CodeInvalidParameter)
			if r.str("field") != c.field {
				t.Errorf("field %q, want %q\n%s", r.str("field"), c.field, r.body)
			}
		})
	}
}

// A CloudEvents append takes expected_sequence as a query parameter; a
// value that does not parse is 400 invalid_parameter on it, as for every
// other malformed query parameter (docs/api.md#errors). It was 422
// validation_failed, the code of a body field, while the same parameter
// given twice was already 400. Nothing is stored.
func TestQueryExpectedSequenceRefusals(t *testing.T) {
	a := eventAPI(t, false)
	const path = "/v1/streams/Device/q-1/events"
	binary := []string{"Content-Type: application/json", "ce-specversion: 1.0", "ce-id: q-1", "ce-source: /s", "ce-type: x.y"}
	structured := []string{"Content-Type: " + mediaCloudEvent}
	batch := []string{"Content-Type: " + mediaCloudEventBatch}
	const ce = `{"specversion":"1.0","id":"q-2","source":"/s","type":"x.y","data":{}}`
	cases := []struct {
		name, query, body string
		headers           []string
	}{
		{"binary, a word", "bogus", `{}`, binary},
		{"binary, negative", "-1", `{}`, binary},
		{"binary, upper case", "NO_STREAM", `{}`, binary},
		{"binary, overflowing", "99999999999999999999", `{}`, binary},
		{"structured, a fraction", "1.5", ce, structured},
		{"batch, an exponent", "1e2", "[" + ce + "]", batch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := a.appendsCount()
			r := a.do("POST", path+"?expected_sequence="+c.query, c.body, c.headers...).expect(t, 400, CodeInvalidParameter)
			if r.str("field") != "expected_sequence" {
				t.Errorf("field %q, want expected_sequence\n%s", r.str("field"), r.body)
			}
			if n := a.appendsCount() - before; n != 0 {
				t.Fatalf("a refused append stored %d events", n)
			}
		})
	}
}
