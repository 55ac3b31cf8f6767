package api

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/schema"
)

// schemaAPI is the event API with a schema registry at the door.
func schemaAPI(t testing.TB, mode string) (*testAPI, *schema.Registry) {
	t.Helper()
	var reg *schema.Registry
	a := newTestAPI(t, apiConfig{deps: func(d *Deps) {
		d.Events = d.Store.(EventLog)
	}})
	reg = schema.New(a.pool, schema.Config{Mode: mode}, nil)
	h, err := New(Config{}, Deps{Store: a.store, Registry: a.reg, Sequences: a.store, Events: a.store, Schemas: reg})
	if err != nil {
		t.Fatal(err)
	}
	a.h = h
	return a, reg
}

const orderSchema = `{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number","minimum":0},
	"lines":{"type":"array","items":{"type":"object","properties":{"qty":{"type":"integer","minimum":1}},"required":["qty"]}}},
	"required":["id","total"]}`

// TestSchemaAtTheDoor: events of a registered type are checked against its
// latest version through every input (JSON batch, CloudEvent, CloudEvents
// batch); a failure is a 422 problem naming the pointer, the keyword and
// the version, and nothing of the batch is stored; a valid event records
// the version in schema_version.
func TestSchemaAtTheDoor(t *testing.T) {
	ctx := context.Background()
	a, reg := schemaAPI(t, schema.ModeOpen)
	if _, err := reg.Register(ctx, "OrderPlaced", []byte(orderSchema), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	ok := map[string]any{"id": "o-1", "total": 3}
	cases := []struct {
		name, path, body, ct     string
		status                   int
		code, field, pointer, kw string
	}{
		{"valid event", "/v1/streams/Order/o-1/events", appendBody(nil, evIn{uuid.NewString(), "OrderPlaced", ok}), "", 201, "", "", "", ""},
		{"missing required", "/v1/streams/Order/o-2/events", appendBody(nil, evIn{uuid.NewString(), "OrderPlaced", map[string]any{"id": "x"}}), "",
			422, CodeSchemaInvalid, "events[0].data", "", "required"},
		{"second of a batch invalid deep down", "/v1/streams/Order/o-3/events", appendBody(nil,
			evIn{uuid.NewString(), "OrderPlaced", ok},
			evIn{uuid.NewString(), "OrderPlaced", map[string]any{"id": "x", "total": 1, "lines": []any{map[string]any{"qty": 1}, map[string]any{"qty": 0}}}}), "",
			422, CodeSchemaInvalid, "events[1].data", "/lines/1/qty", "minimum"},
		{"CloudEvent invalid", "/v1/streams/Order/o-4/events",
			`{"specversion":"1.0","id":"c1","source":"/shop","type":"OrderPlaced","data":{"id":"x","total":"3"}}`, mediaCloudEvent,
			422, CodeSchemaInvalid, "data", "/total", "type"},
		{"CloudEvents batch, one invalid", "/v1/streams/Order/o-5/events",
			`[{"specversion":"1.0","id":"c2","source":"/shop","type":"OrderPlaced","data":{"id":"x","total":1}},
			  {"specversion":"1.0","id":"c3","source":"/shop","type":"OrderPlaced","data":{"total":1}}]`, mediaCloudEventBatch,
			422, CodeSchemaInvalid, "[1].data", "", "required"},
		{"unregistered type, open mode", "/v1/streams/Order/o-6/events", appendBody(nil, evIn{uuid.NewString(), "order.shipped", map[string]any{"any": 1}}), "", 201, "", "", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := a.appendsCount()
			var headers []string
			if tc.ct != "" {
				headers = append(headers, "Content-Type: "+tc.ct)
			}
			r := a.do("POST", tc.path, tc.body, headers...).expect(t, tc.status, tc.code)
			if tc.status != http.StatusCreated {
				if r.str("field") != tc.field || r.str("keyword") != tc.kw || r.num("schema_version") != 1 || r.header.Get("Content-Type") != mediaProblem {
					t.Fatalf("problem %s, want field %q keyword %q schema_version 1", r.body, tc.field, tc.kw)
				}
				if p, present := r.json["pointer"]; !present || p != tc.pointer {
					t.Fatalf("pointer %v, want %q: %s", p, tc.pointer, r.body)
				}
				if n := a.appendsCount() - before; n != 0 {
					t.Fatalf("a refused batch stored %d events", n)
				}
				return
			}
			page := a.do("GET", tc.path, "").expect(t, 200, "")
			ev := page.json["events"].([]any)[0].(map[string]any)
			want := 1.0 // v1 of OrderPlaced; 1 is also the default of an unchecked type
			if ev["schema_version"] != want {
				t.Fatalf("schema_version %v: %v", ev["schema_version"], ev)
			}
		})
	}
	// A second version: new events record it.
	v2 := `{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number"}},"required":["id"]}`
	if _, err := reg.Register(ctx, "OrderPlaced", []byte(v2), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	a.do("POST", "/v1/streams/Order/o-7/events", appendBody(nil, evIn{uuid.NewString(), "OrderPlaced", map[string]any{"id": "x"}})).expect(t, 201, "")
	page := a.do("GET", "/v1/streams/Order/o-7/events", "").expect(t, 200, "")
	if v := page.json["events"].([]any)[0].(map[string]any)["schema_version"]; v != 2.0 {
		t.Fatalf("schema_version %v, want 2", v)
	}
}

// TestSchemaStrictMode: in strict mode an unregistered type is refused
// with 422 schema_not_registered naming the field the request gave the
// type in: event_type of the JSON body, type of a CloudEvent, the ce-type
// header of a binary one; nothing is stored.
func TestSchemaStrictMode(t *testing.T) {
	a, _ := schemaAPI(t, schema.ModeStrict)
	binary := []string{"Content-Type: application/json", "ce-specversion: 1.0", "ce-id: b1", "ce-source: /s", "ce-type: com.example.unknown"}
	for _, tc := range []struct {
		name, body, field string
		headers           []string
	}{
		{"JSON event", appendBody(nil, evIn{uuid.NewString(), "Unknown", map[string]any{}}), "events[0].event_type", nil},
		{"CloudEvent", `{"specversion":"1.0","id":"c1","source":"/s","type":"com.example.unknown","data":{}}`, "type", []string{"Content-Type: " + mediaCloudEvent}},
		{"CloudEvents batch", `[{"specversion":"1.0","id":"c2","source":"/s","type":"com.example.unknown"}]`, "[0].type", []string{"Content-Type: " + mediaCloudEventBatch}},
		{"binary CloudEvent", `{}`, "ce-type", binary},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.appendsCount()
			r := a.do("POST", "/v1/streams/Order/s-1/events", tc.body, tc.headers...).expect(t, 422, CodeSchemaNotRegistered)
			if r.str("field") != tc.field {
				t.Fatalf("field %q, want %q: %s", r.str("field"), tc.field, r.body)
			}
			if n := a.appendsCount() - before; n != 0 {
				t.Fatalf("a refused event stored %d events", n)
			}
		})
	}
}

// TestSchemaAtTheDoorBinaryCloudEvent: a CloudEvent in the HTTP binding's
// binary content mode is checked like the structured one: 422 naming
// data, the pointer, the keyword and the version; a valid one records the
// version.
func TestSchemaAtTheDoorBinaryCloudEvent(t *testing.T) {
	ctx := context.Background()
	a, reg := schemaAPI(t, schema.ModeOpen)
	if _, err := reg.Register(ctx, "com.example.order.placed", []byte(orderSchema), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	h := []string{"Content-Type: application/json", "ce-specversion: 1.0", "ce-id: o1", "ce-source: /shop", "ce-type: com.example.order.placed"}
	r := a.do("POST", "/v1/streams/Order/b-1/events", `{"id":"x","total":1,"lines":[{"qty":0}]}`, h...).expect(t, 422, CodeSchemaInvalid)
	if r.str("field") != "data" || r.str("pointer") != "/lines/0/qty" || r.str("keyword") != "minimum" || r.num("schema_version") != 1 {
		t.Fatalf("problem %s", r.body)
	}
	a.do("POST", "/v1/streams/Order/b-1/events", `{"id":"x","total":1}`, h...).expect(t, 201, "")
	page := a.do("GET", "/v1/streams/Order/b-1/events", "").expect(t, 200, "")
	if ev := page.json["events"].([]any)[0].(map[string]any); ev["schema_version"] != 1.0 || ev["event_type"] != "com.example.order.placed" {
		t.Fatalf("stored %v", ev)
	}
}

// TestSchemaVersionNamedByTheProducer: an event that names schema_version
// is checked against that version and records it, so that its retry after
// a new version was registered is a replay, not an event_id_reused; a
// version the type does not have is refused.
func TestSchemaVersionNamedByTheProducer(t *testing.T) {
	ctx := context.Background()
	a, reg := schemaAPI(t, schema.ModeOpen)
	v1 := `{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`
	v2 := `{"type":"object","properties":{"id":{"type":"string"}}}` // id optional: BACKWARD
	if _, err := reg.Register(ctx, "OrderPlaced", []byte(v1), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	pinned := `{"events":[{"event_id":"` + id + `","event_type":"OrderPlaced","schema_version":1,"data":{"id":"a"}}]}`
	latest := `{"events":[{"event_id":"` + uuid.NewString() + `","event_type":"OrderPlaced","data":{"id":"a"}}]}`
	a.do("POST", "/v1/streams/Order/p-1/events", pinned).expect(t, 201, "")
	a.do("POST", "/v1/streams/Order/p-2/events", latest).expect(t, 201, "")
	if _, err := reg.Register(ctx, "OrderPlaced", []byte(v2), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name, path, body string
		status           int
		code, field      string
	}{
		{"pinned retry replays", "/v1/streams/Order/p-1/events", pinned, 200, "", ""},
		{"v1 still checks a pinned event", "/v1/streams/Order/p-3/events", `{"events":[{"event_type":"OrderPlaced","schema_version":1,"data":{}}]}`, 422, CodeSchemaInvalid, "events[0].data"},
		{"the latest (v2) accepts it", "/v1/streams/Order/p-3/events", `{"events":[{"event_type":"OrderPlaced","data":{}}]}`, 201, "", ""},
		{"unknown version", "/v1/streams/Order/p-4/events", `{"events":[{"event_type":"OrderPlaced","schema_version":9,"data":{}}]}`, 422, CodeSchemaNotRegistered, "events[0].schema_version"},
		{"not a version", "/v1/streams/Order/p-4/events", `{"events":[{"event_type":"OrderPlaced","schema_version":0,"data":{}}]}`, 422, CodeValidationFailed, "events[0].schema_version"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			r := a.do("POST", st.path, st.body).expect(t, st.status, st.code)
			if st.field != "" && r.str("field") != st.field {
				t.Fatalf("field %q: %s", r.str("field"), r.body)
			}
		})
	}
	page := a.do("GET", "/v1/streams/Order/p-3/events", "").expect(t, 200, "")
	if v := page.json["events"].([]any)[0].(map[string]any)["schema_version"]; v != 2.0 {
		t.Fatalf("schema_version %v, want 2", v)
	}
}
