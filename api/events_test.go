package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// eventAPI is a test API with the event routes mounted on its own store.
func eventAPI(t testing.TB, commits bool) *testAPI {
	t.Helper()
	a := newTestAPI(t, apiConfig{cfg: func(c *Config) {
		c.SSEPollInterval = 50 * time.Millisecond
		c.SSEHeartbeat = 200 * time.Millisecond
		if !commits {
			c.SSEPollInterval = 20 * time.Millisecond
		}
	}, deps: func(d *Deps) { d.Events = d.Store.(EventLog) }})
	if commits {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		n := StoreCommits(ctx, a.store)
		h, err := New(Config{SSEPollInterval: time.Hour, SSEHeartbeat: 200 * time.Millisecond},
			Deps{Store: a.store, Registry: a.reg, Sequences: a.store, Events: a.store, Commits: n})
		if err != nil {
			t.Fatal(err)
		}
		a.h = h
	}
	return a
}

type evIn struct {
	ID, Type string
	Data     map[string]any
}

func appendBody(expect any, evs ...evIn) string {
	type ev struct {
		EventID   string         `json:"event_id,omitempty"`
		EventType string         `json:"event_type"`
		Data      map[string]any `json:"data,omitempty"`
	}
	body := struct {
		Expected any  `json:"expected_sequence,omitempty"`
		Events   []ev `json:"events"`
	}{Expected: expect}
	for _, e := range evs {
		body.Events = append(body.Events, ev{e.ID, e.Type, e.Data})
	}
	b, _ := json.Marshal(body)
	return string(b)
}

func newEvents(n int, typ string) []evIn {
	out := make([]evIn, n)
	for i := range out {
		out[i] = evIn{ID: uuid.NewString(), Type: typ, Data: map[string]any{"i": i}}
	}
	return out
}

const devicePath = "/v1/streams/Device/dev-1/events"

func TestEventAppendReplayAndConflicts(t *testing.T) {
	a := eventAPI(t, false)
	first := newEvents(3, "READING_TAKEN")
	r := a.do("POST", devicePath, appendBody("no_stream", first...)).expect(t, http.StatusCreated, "")
	if r.num("first_sequence") != 1 || r.num("last_sequence") != 3 || r.json["replayed"] != false {
		t.Fatalf("reply %s", r.body)
	}
	// A retry of the same batch returns the same result.
	r2 := a.do("POST", devicePath, appendBody("no_stream", first...)).expect(t, http.StatusOK, "")
	if r2.json["replayed"] != true || r2.header.Get("Idempotent-Replayed") != "true" || fmt.Sprint(r2.json["events"]) != fmt.Sprint(r.json["events"]) {
		t.Fatalf("replay %s, first %s", r2.body, r.body)
	}
	reused := first[1]
	reused.Data = map[string]any{"other": true}
	bad := newEvents(3, "READING_TAKEN")
	badType := newEvents(3, "READING_TAKEN")
	badType[1].Type = "lower case"
	badKey := newEvents(3, "READING_TAKEN")
	badKey[1].Data = map[string]any{"_id": 1}
	cases := []struct {
		name, path, body string
		status           int
		code, field      string
		actual           int64
	}{
		{"stale sequence", devicePath, appendBody(1, newEvents(2, "X")...), 409, CodeConflict, "expected_sequence", 3},
		{"no_stream on a stream", devicePath, appendBody("no_stream", newEvents(1, "X")...), 409, CodeConflict, "expected_sequence", 3},
		{"exists on no stream", "/v1/streams/Device/dev-new/events", appendBody("exists", newEvents(1, "X")...), 409, CodeConflict, "expected_sequence", 0},
		{"reused event_id in the middle", devicePath, appendBody("any", bad[0], reused, bad[2]), 409, CodeEventIDReused, "events[1].event_id", -1},
		{"stored and new mixed", devicePath, appendBody("any", first[0], bad[1]), 409, CodePartialBatch, "events[0].event_id", -1},
		{"invalid event type in the middle", devicePath, appendBody("any", badType...), 422, CodeValidationFailed, "events[1].event_type", -1},
		{"data key the read model cannot hold", devicePath, appendBody("any", badKey...), 422, CodeInvalidDataKey, "events[1].data._id", -1},
		{"instances go through commands", "/v1/streams/Instance/a:b:c/events", appendBody("any", newEvents(1, "X")...), 422, CodeValidationFailed, "aggregate_type", -1},
		{"bad aggregate type", "/v1/streams/1bad/x/events", appendBody("any", newEvents(1, "X")...), 422, CodeValidationFailed, "aggregate_type", -1},
		{"invalid text in the path", "/v1/streams/Device/%ED%A0%80/events", appendBody("any", newEvents(1, "X")...), 400, CodeInvalidText, "aggregate_id", -1},
		{"bad expectation", devicePath, appendBody("sometimes", newEvents(1, "X")...), 422, CodeValidationFailed, "expected_sequence", -1},
		{"string number expectation", devicePath, appendBody("3", newEvents(1, "X")...), 422, CodeValidationFailed, "expected_sequence", -1},
		{"empty batch", devicePath, `{"events":[]}`, 422, CodeValidationFailed, "events", -1},
		{"unknown field", devicePath, `{"events":[{"event_type":"X","extra":1}]}`, 422, CodeValidationFailed, "events[0].extra", -1},
		{"kafka_topic", devicePath, `{"events":[{"event_type":"X","metadata":{"kafka_topic":"elsewhere"}}]}`, 422, CodeValidationFailed, "events[0].metadata.kafka_topic", -1},
		{"duplicate key", devicePath, `{"events":[{"event_type":"X","data":{"a":1,"a":2}}]}`, 400, CodeMalformedJSON, "", -1},
		{"lone surrogate", devicePath, `{"events":[{"event_type":"X","data":{"a":"\ud800"}}]}`, 400, CodeInvalidText, "", -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := a.appendsCount()
			r := a.do("POST", tc.path, tc.body).expect(t, tc.status, tc.code)
			if tc.field != "" && r.str("field") != tc.field {
				t.Fatalf("field %q, want %q: %s", r.str("field"), tc.field, r.body)
			}
			if tc.actual >= 0 && r.num("actual_seq") != tc.actual {
				t.Fatalf("actual_seq %d, want %d: %s", r.num("actual_seq"), tc.actual, r.body)
			}
			if r.header.Get("Content-Type") != mediaProblem {
				t.Fatalf("Content-Type %q", r.header.Get("Content-Type"))
			}
			if after := a.appendsCount(); after != before {
				t.Fatalf("a refused batch wrote %d rows", after-before)
			}
		})
	}
	// The stream holds the first batch only.
	page := a.do("GET", devicePath+"?limit=10", "").expect(t, 200, "")
	if evs := page.json["events"].([]any); len(evs) != 3 || page.num("last_sequence") != 3 {
		t.Fatalf("stream %s", page.body)
	}
}

// 50 writers append batches of two with the expected sequence they know
// (learned from their conflicts): every expected sequence has exactly one
// winner, and the stream has no gap.
func TestEventAppendConcurrentWriters(t *testing.T) {
	a := eventAPI(t, false)
	const writers = 50
	var mu sync.Mutex
	wins := map[int64]int{}
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var known int64
			for attempt := 0; attempt < 500; attempt++ {
				r := doHandler(t, a.h, "POST", "/v1/streams/Counter/c-1/events", appendBody(known, newEvents(2, "INCREMENTED")...))
				switch r.code {
				case http.StatusCreated:
					if r.num("first_sequence") != known+1 || r.num("last_sequence") != known+2 {
						t.Errorf("won at %d with %s", known, r.body)
					}
					mu.Lock()
					wins[known]++
					mu.Unlock()
					return
				case http.StatusConflict:
					if r.num("actual_seq") == known {
						t.Errorf("conflict at %d naming the same sequence: %s", known, r.body)
						return
					}
					known = r.num("actual_seq")
				default:
					t.Errorf("status %d: %s", r.code, r.body)
					return
				}
			}
			t.Error("a writer never won")
		}()
	}
	wg.Wait()
	if len(wins) != writers {
		t.Fatalf("%d winning sequences, want %d", len(wins), writers)
	}
	for seq, n := range wins {
		if n != 1 || seq%2 != 0 {
			t.Fatalf("expected_sequence %d won %d times", seq, n)
		}
	}
	seen := int64(0)
	for from := int64(1); ; {
		p := a.do("GET", "/v1/streams/Counter/c-1/events?limit=37&from_sequence="+strconv.FormatInt(from, 10), "").expect(t, 200, "")
		for _, raw := range p.json["events"].([]any) {
			seen++
			if seq := int64(raw.(map[string]any)["sequence_number"].(float64)); seq != seen {
				t.Fatalf("event %d has sequence %d", seen, seq)
			}
		}
		next, ok := p.json["next_from_sequence"].(float64)
		if !ok {
			break
		}
		from = int64(next)
	}
	if seen != 2*writers {
		t.Fatalf("%d events, want %d", seen, 2*writers)
	}
}

func seqsOf(t *testing.T, r reply) []int64 {
	t.Helper()
	var out []int64
	for _, raw := range r.json["events"].([]any) {
		out = append(out, int64(raw.(map[string]any)["sequence_number"].(float64)))
	}
	return out
}

func TestEventStreamPaging(t *testing.T) {
	a := eventAPI(t, false)
	a.do("POST", devicePath, appendBody("no_stream", newEvents(7, "READING_TAKEN")...)).expect(t, 201, "")
	walk := func(dir, from string) [][]int64 {
		var pages [][]int64
		q := "?limit=3&direction=" + dir + from
		for {
			r := a.do("GET", devicePath+q, "").expect(t, 200, "")
			pages = append(pages, seqsOf(t, r))
			next, ok := r.json["next_from_sequence"].(float64)
			if !ok {
				return pages
			}
			q = "?limit=3&direction=" + dir + "&from_sequence=" + strconv.Itoa(int(next))
		}
	}
	cases := []struct{ dir, from, want string }{
		{"forward", "", "[[1 2 3] [4 5 6] [7]]"},
		{"forward", "&from_sequence=6", "[[6 7]]"},
		// Past the end: one empty page, no next_from_sequence (it was
		// from+limit overflowed to a negative number at the int64 end).
		{"forward", "&from_sequence=99", "[[]]"},
		{"forward", "&from_sequence=9223372036854775807", "[[]]"},
		{"backward", "&from_sequence=9223372036854775807", "[[7 6 5] [4 3 2] [1]]"},
		{"backward", "", "[[7 6 5] [4 3 2] [1]]"},
		{"backward", "&from_sequence=4", "[[4 3 2] [1]]"},
		{"backward", "&from_sequence=99", "[[7 6 5] [4 3 2] [1]]"},
	}
	for _, tc := range cases {
		if got := fmt.Sprint(walk(tc.dir, tc.from)); got != tc.want {
			t.Errorf("%s%s: %s, want %s", tc.dir, tc.from, got, tc.want)
		}
	}
	a.do("GET", "/v1/streams/Device/none/events", "").expect(t, 404, CodeStreamNotFound)
	// The Location of an append names its stream whatever the id holds;
	// "." and ".." are percent-encoded, or the router would clean them
	// away.
	for _, id := range []string{".", "..", "a/b c", ".x"} {
		t.Run("location of "+id, func(t *testing.T) {
			r := a.do("POST", streamURL("Device", id), appendBody("no_stream", newEvents(2, "READING_TAKEN")...)).expect(t, 201, "")
			loc := r.header.Get("Location")
			got := seqsOf(t, a.do("GET", loc, "").expect(t, 200, ""))
			if fmt.Sprint(got) != "[1 2]" {
				t.Fatalf("GET %s: sequences %v, want [1 2]", loc, got)
			}
		})
	}
	a.do("GET", devicePath+"?direction=sideways", "").expect(t, 400, CodeInvalidParameter)
	a.do("GET", devicePath+"?limit=0", "").expect(t, 400, CodeInvalidParameter)
}

func TestEventLogPaging(t *testing.T) {
	a := eventAPI(t, false)
	a.do("POST", devicePath, appendBody("any", newEvents(3, "READING_TAKEN")...)).expect(t, 201, "")
	a.do("POST", "/v1/streams/Order/o-1/events", appendBody("any", newEvents(2, "ORDER_PLACED")...)).expect(t, 201, "")
	a.do("POST", devicePath, appendBody("any", newEvents(2, "READING_TAKEN")...)).expect(t, 201, "")
	read := func(filter string) (positions []int64, types []string) {
		for from := int64(1); ; {
			r := a.do("GET", "/v1/log?limit=2&from_position="+strconv.FormatInt(from, 10)+filter, "").expect(t, 200, "")
			evs := r.json["events"].([]any)
			for _, raw := range evs {
				m := raw.(map[string]any)
				positions = append(positions, int64(m["position"].(float64)))
				types = append(types, m["aggregate_type"].(string))
			}
			next := r.num("next_from_position")
			if len(evs) == 0 && next == from {
				return
			}
			from = next
		}
	}
	pos, _ := read("")
	if fmt.Sprint(pos) != "[1 2 3 4 5 6 7]" {
		t.Fatalf("log positions %v", pos)
	}
	pos, types := read("&aggregate_type=Order")
	if fmt.Sprint(pos) != "[4 5]" || fmt.Sprint(types) != "[Order Order]" {
		t.Fatalf("Order positions %v %v", pos, types)
	}
	a.do("GET", "/v1/log?aggregate_type=no:colon", "").expect(t, 400, CodeInvalidParameter)
	// The int64 end of positions: a cursor no position follows is
	// refused (next_from_position, cursor + 1, overflowed to a negative
	// number); the one before it reads an empty page.
	for _, c := range []struct {
		name, query, next string
		status            int
	}{
		{"cursor before the last position", "cursor=9223372036854775806", "9223372036854775807", 200},
		{"from the last position", "from_position=9223372036854775807", "9223372036854775807", 200},
		{"cursor at the last position", "cursor=9223372036854775807", "", 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.status != 200 {
				r := a.do("GET", "/v1/log?"+c.query, "").expect(t, c.status, CodeInvalidParameter)
				if r.json["field"] != "cursor" {
					t.Errorf("field %v, want cursor", r.json["field"])
				}
				return
			}
			r := a.do("GET", "/v1/log?"+c.query, "").expect(t, 200, "")
			var page struct {
				Events           []json.RawMessage `json:"events"`
				NextFromPosition json.Number       `json:"next_from_position"`
			}
			if err := json.Unmarshal(r.body, &page); err != nil {
				t.Fatal(err)
			}
			if len(page.Events) != 0 || page.NextFromPosition.String() != c.next {
				t.Errorf("%d events, next_from_position %s, want none and %s", len(page.Events), page.NextFromPosition, c.next)
			}
		})
	}
}

func TestCloudEventsInput(t *testing.T) {
	a := eventAPI(t, false)
	ce := `{"specversion":"1.0","id":"A234-1234-1234","source":"/sensors/dev-1","type":"com.example.reading.taken",
		"time":"2026-11-21T10:00:00.5+01:00","subject":"dev-1","datacontenttype":"application/json",
		"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","comexampleshard":3,"data":{"celsius":21.5}}`
	r := a.do("POST", devicePath, ce, "Content-Type: "+mediaCloudEvent).expect(t, 201, "")
	wantID := CloudEventID("/sensors/dev-1", "A234-1234-1234")
	if ev := r.json["events"].([]any)[0].(map[string]any); ev["event_id"] != wantID {
		t.Fatalf("event_id %v, want %s", ev["event_id"], wantID)
	}
	a.do("POST", devicePath, ce, "Content-Type: "+mediaCloudEvent).expect(t, 200, "") // replay
	page := a.do("GET", devicePath, "").expect(t, 200, "")
	var env struct {
		EventType  string            `json:"event_type"`
		OccurredAt string            `json:"occurred_at"`
		Data       map[string]any    `json:"data"`
		Metadata   map[string]any    `json:"metadata"`
		Kind       string            `json:"kind"`
		Extra      map[string]string `json:"-"`
	}
	b, _ := json.Marshal(page.json["events"].([]any)[0])
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	if env.EventType != "com.example.reading.taken" || env.OccurredAt != "2026-11-21T09:00:00.500Z" || env.Data["celsius"] != 21.5 || env.Kind != "domain" {
		t.Fatalf("envelope %s", b)
	}
	for k, want := range map[string]any{"ce_id": "A234-1234-1234", "ce_source": "/sensors/dev-1", "ce_type": "com.example.reading.taken",
		"ce_subject": "dev-1", "ce_comexampleshard": 3.0, "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"} {
		if env.Metadata[k] != want {
			t.Errorf("metadata %s = %v, want %v", k, env.Metadata[k], want)
		}
	}
	batch := `[{"specversion":"1.0","id":"b-1","source":"s","type":"x.y","data":{"n":1}},{"specversion":"1.0","id":"b-2","source":"s","type":"x.y","data":{"n":2}}]`
	r = a.do("POST", devicePath+"?expected_sequence=1", batch, "Content-Type: "+mediaCloudEventBatch).expect(t, 201, "")
	if r.num("first_sequence") != 2 || r.num("last_sequence") != 3 {
		t.Fatalf("batch %s", r.body)
	}
	a.do("POST", devicePath+"?expected_sequence=1", `[{"specversion":"1.0","id":"b-3","source":"s","type":"x.y"}]`, "Content-Type: "+mediaCloudEventBatch).expect(t, 409, CodeConflict)
	for name, tc := range map[string]struct {
		body, ct string
		status   int
		field    string
	}{
		"no specversion":                   {`{"id":"1","source":"s","type":"t"}`, mediaCloudEvent, 422, "specversion"},
		"old specversion":                  {`{"specversion":"0.3","id":"1","source":"s","type":"t"}`, mediaCloudEvent, 422, "specversion"},
		"binary data":                      {`{"specversion":"1.0","id":"1","source":"s","type":"t","data_base64":"AA=="}`, mediaCloudEvent, 415, "data_base64"},
		"xml data":                         {`{"specversion":"1.0","id":"1","source":"s","type":"t","datacontenttype":"text/xml"}`, mediaCloudEvent, 415, "datacontenttype"},
		"data in latin-1":                  {`{"specversion":"1.0","id":"1","source":"s","type":"t","datacontenttype":"application/json; charset=iso-8859-1","data":{}}`, mediaCloudEvent, 415, "datacontenttype"},
		"datacontenttype not a media type": {`{"specversion":"1.0","id":"1","source":"s","type":"t","datacontenttype":"json;;","data":{}}`, mediaCloudEvent, 415, "datacontenttype"},
		"bad in batch":                     {`[{"specversion":"1.0","id":"1","source":"s","type":"t","data":[1]}]`, mediaCloudEventBatch, 422, "[0].data"},
		"type outside the set":             {`{"specversion":"1.0","id":"1","source":"s","type":"com.example/x"}`, mediaCloudEvent, 422, "type"},
		"type in batch":                    {`[{"specversion":"1.0","id":"1","source":"s","type":"a b"}]`, mediaCloudEventBatch, 422, "[0].type"},
		// Each empty required attribute is named as itself (all three were "id").
		"empty id":                  {`{"specversion":"1.0","id":"","source":"s","type":"t"}`, mediaCloudEvent, 422, "id"},
		"empty source":              {`{"specversion":"1.0","id":"1","source":"","type":"t"}`, mediaCloudEvent, 422, "source"},
		"empty type in batch":       {`[{"specversion":"1.0","id":"1","source":"s","type":""}]`, mediaCloudEventBatch, 422, "[0].type"},
		"source with a space":       {`{"specversion":"1.0","id":"1","source":"a b","type":"t"}`, mediaCloudEvent, 422, "source"},
		"source with a bad escape":  {`{"specversion":"1.0","id":"1","source":"/a%zz","type":"t"}`, mediaCloudEvent, 422, "source"},
		"source not parseable":      {`{"specversion":"1.0","id":"1","source":":x","type":"t"}`, mediaCloudEvent, 422, "source"},
		"source non-ASCII":          {`{"specversion":"1.0","id":"1","source":"/café","type":"t"}`, mediaCloudEvent, 422, "source"},
		"empty subject":             {`{"specversion":"1.0","id":"1","source":"s","type":"t","subject":""}`, mediaCloudEvent, 422, "subject"},
		"dataschema relative":       {`{"specversion":"1.0","id":"1","source":"s","type":"t","dataschema":"schemas/x"}`, mediaCloudEvent, 422, "dataschema"},
		"dataschema not a URI":      {`{"specversion":"1.0","id":"1","source":"s","type":"t","dataschema":"not a uri"}`, mediaCloudEvent, 422, "dataschema"},
		"empty dataschema in batch": {`[{"specversion":"1.0","id":"1","source":"s","type":"t","dataschema":""}]`, mediaCloudEventBatch, 422, "[0].dataschema"},
		"extension object":          {`{"specversion":"1.0","id":"1","source":"s","type":"t","myext":{"a":1}}`, mediaCloudEvent, 422, "myext"},
		"extension array in batch":  {`[{"specversion":"1.0","id":"1","source":"s","type":"t","myext":[1]}]`, mediaCloudEventBatch, 422, "[0].myext"},
		"extension fraction":        {`{"specversion":"1.0","id":"1","source":"s","type":"t","myext":1.5}`, mediaCloudEvent, 422, "myext"},
		"extension beyond int32":    {`{"specversion":"1.0","id":"1","source":"s","type":"t","myext":2147483648}`, mediaCloudEvent, 422, "myext"},
		"null under a bad name":     {`{"specversion":"1.0","id":"1","source":"s","type":"t","my_ext":null}`, mediaCloudEvent, 422, "my_ext"},
	} {
		r := a.do("POST", devicePath, tc.body, "Content-Type: "+tc.ct)
		if r.code != tc.status || r.str("field") != tc.field {
			t.Errorf("%s: %d field %q, want %d %q: %s", name, r.code, r.str("field"), tc.status, tc.field, r.body)
		}
	}
}

// TestCloudEventNullIsAbsent: in the JSON format an attribute whose value
// is null is absent — it is not kept in metadata (a null subject was kept
// as "ce_subject": ""), and the event equals the one without it, so a
// re-send without the null attributes replays. Extension values of the
// CloudEvents types (string, boolean, int32) are kept as given.
func TestCloudEventNullIsAbsent(t *testing.T) {
	a := eventAPI(t, false)
	const path = "/v1/streams/Device/null-1/events"
	withNulls := `{"specversion":"1.0","id":"n-1","source":"/s","type":"x.y","subject":null,"dataschema":null,"time":null,"data_base64":null,
		"myext":null,"flag":true,"count":-2147483648,"label":"v","data":{"n":1}}`
	without := `{"specversion":"1.0","id":"n-1","source":"/s","type":"x.y","flag":true,"count":-2147483648,"label":"v","data":{"n":1}}`
	a.do("POST", path, withNulls, "Content-Type: "+mediaCloudEvent).expect(t, http.StatusCreated, "")
	a.do("POST", path, without, "Content-Type: "+mediaCloudEvent).expect(t, http.StatusOK, "") // the same event
	ev := a.do("GET", path, "").expect(t, http.StatusOK, "").json["events"].([]any)[0].(map[string]any)
	md := ev["metadata"].(map[string]any)
	for _, k := range []string{"ce_subject", "ce_dataschema", "ce_myext"} {
		if v, ok := md[k]; ok {
			t.Errorf("metadata %s = %#v, want absent (null is absent)", k, v)
		}
	}
	for k, want := range map[string]any{"ce_flag": true, "ce_count": -2147483648.0, "ce_label": "v"} {
		if md[k] != want {
			t.Errorf("metadata %s = %#v, want %#v", k, md[k], want)
		}
	}
}

// TestEventIDRefusalsNameTheAttribute: an event id repeated inside one
// request, or reused with other content, is refused naming where the
// request gave it — a CloudEvent's id ("id", "[1].id", the header "ce-id"),
// an event's event_id ("events[1].event_id") — and an empty CloudEvents
// batch names the body, which is the array; nothing is stored.
func TestEventIDRefusalsNameTheAttribute(t *testing.T) {
	a := eventAPI(t, false)
	const path = "/v1/streams/Device/ids-1/events"
	ce := func(id string, n int) string {
		return `{"specversion":"1.0","id":"` + id + `","source":"/s","type":"x.y","data":{"n":` + strconv.Itoa(n) + `}}`
	}
	a.do("POST", path, ce("stored", 1), "Content-Type: "+mediaCloudEvent).expect(t, http.StatusCreated, "")
	const uuid1 = "5f0c8a52-9d1e-4b7a-8c3f-1e2d3c4b5a69"
	for _, tc := range []struct {
		name    string
		body    string
		headers []string
		status  int
		code    string
		field   string
	}{
		{"CloudEvents batch repeats an id", "[" + ce("a", 1) + "," + ce("b", 1) + "," + ce("a", 1) + "]",
			[]string{"Content-Type: " + mediaCloudEventBatch}, 422, CodeValidationFailed, "[2].id"},
		{"event batch repeats an event_id", `{"events":[{"event_id":"` + uuid1 + `","event_type":"x.y","data":{}},{"event_id":"` + uuid1 + `","event_type":"x.y","data":{}}]}`,
			nil, 422, CodeValidationFailed, "events[1].event_id"},
		{"empty CloudEvents batch", `[]`, []string{"Content-Type: " + mediaCloudEventBatch}, 422, CodeValidationFailed, "body"},
		{"CloudEvent id reused", ce("stored", 2), []string{"Content-Type: " + mediaCloudEvent}, 409, CodeEventIDReused, "id"},
		{"CloudEvent id reused in a batch", "[" + ce("new", 1) + "," + ce("stored", 2) + "]",
			[]string{"Content-Type: " + mediaCloudEventBatch}, 409, CodeEventIDReused, "[1].id"},
		{"binary CloudEvent id reused", `{"n":2}`, []string{"Content-Type: application/json", "ce-specversion: 1.0", "ce-id: stored",
			"ce-source: /s", "ce-type: x.y"}, 409, CodeEventIDReused, "ce-id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.appendsCount()
			r := a.do("POST", path, tc.body, tc.headers...).expect(t, tc.status, tc.code)
			if r.str("field") != tc.field {
				t.Fatalf("field %q, want %q: %s", r.str("field"), tc.field, r.body)
			}
			if n := a.appendsCount() - before; n != 0 {
				t.Fatalf("a refused request stored %d events", n)
			}
		})
	}
}

// TestCloudEventsBinaryInput: a CloudEvent in the binary content mode of
// the HTTP binding (attributes as ce- headers, percent-encoded; the body is
// the data; Content-Type its datacontenttype) is appended like the same
// event in the structured mode: same event_id, event_type exactly, the
// attributes in metadata; and a re-send replays. A refusal names the
// header at fault.
func TestCloudEventsBinaryInput(t *testing.T) {
	a := eventAPI(t, false)
	const path = "/v1/streams/Device/bin-1/events"
	headers := []string{"Content-Type: application/json", "ce-specversion: 1.0", "ce-id: B-1", "ce-source: /sensors/bin-1",
		"ce-type: com.example.reading.taken", "ce-time: 2026-11-21T10:00:00.5+01:00", "ce-subject: bin%201",
		"ce-dataschema: urn:x:reading", "ce-comexampleshard: 3"}
	r := a.do("POST", path+"?expected_sequence=no_stream", `{"celsius":21.5}`, headers...).expect(t, http.StatusCreated, "")
	if ev := r.json["events"].([]any)[0].(map[string]any); ev["event_id"] != CloudEventID("/sensors/bin-1", "B-1") {
		t.Fatalf("event_id %v, want CloudEventID(source, id)", ev["event_id"])
	}
	a.do("POST", path+"?expected_sequence=no_stream", `{"celsius":21.5}`, headers...).expect(t, http.StatusOK, "") // replay
	page := a.do("GET", path, "").expect(t, http.StatusOK, "")
	ev := page.json["events"].([]any)[0].(map[string]any)
	if ev["event_type"] != "com.example.reading.taken" || ev["occurred_at"] != "2026-11-21T09:00:00.500Z" || ev["kind"] != "domain" ||
		ev["data"].(map[string]any)["celsius"] != 21.5 {
		t.Fatalf("envelope %v", ev)
	}
	md := ev["metadata"].(map[string]any)
	for k, want := range map[string]any{"ce_id": "B-1", "ce_source": "/sensors/bin-1", "ce_type": "com.example.reading.taken",
		"ce_subject": "bin 1", "ce_dataschema": "urn:x:reading", "ce_comexampleshard": "3"} {
		if md[k] != want {
			t.Errorf("metadata %s = %v, want %v", k, md[k], want)
		}
	}
	if _, ok := md["ce_time"]; ok {
		t.Errorf("time is occurred_at, not metadata: %v", md)
	}
	// An event without data, as CloudEvents SDKs send it in the binary
	// mode: no body and no Content-Type (it is the datacontenttype); it
	// was refused with 415. With a body the Content-Type is required.
	nodata := []string{"ce-specversion: 1.0", "ce-id: B-0", "ce-source: /sensors/bin-1", "ce-type: com.example.ping"}
	a.do("POST", "/v1/streams/Device/bin-0/events", "", nodata...).expect(t, http.StatusCreated, "")
	a.do("POST", "/v1/streams/Device/bin-0/events", "", nodata...).expect(t, http.StatusOK, "") // replay
	if ev := a.do("GET", "/v1/streams/Device/bin-0/events", "").expect(t, http.StatusOK, "").json["events"].([]any)[0].(map[string]any); ev["event_type"] != "com.example.ping" {
		t.Fatalf("event without data: %v", ev)
	}
	if r := a.do("POST", "/v1/streams/Device/bin-0/events", `{"a":1}`, append([]string{"Content-Type:"}, nodata...)...); r.code != http.StatusUnsupportedMediaType || r.str("field") != "Content-Type" {
		t.Fatalf("data without Content-Type: %d %s", r.code, r.body)
	}
	base := []string{"Content-Type: application/json", "ce-specversion: 1.0", "ce-id: B-2", "ce-source: /s", "ce-type: x.y"}
	for _, tc := range []struct {
		name   string
		extra  []string
		body   string
		status int
		field  string
	}{
		{"no specversion", []string{"ce-specversion:"}, `{}`, 422, "ce-specversion"},
		{"old specversion", []string{"ce-specversion: 0.3"}, `{}`, 422, "ce-specversion"},
		{"no type", []string{"ce-type:"}, `{}`, 422, "ce-type"},
		{"empty source", []string{"ce-source: "}, `{}`, 422, "ce-source"},
		{"empty id", []string{"ce-id: "}, `{}`, 422, "ce-id"},
		{"source not a URI-reference", []string{"ce-source: /a%20b"}, `{}`, 422, "ce-source"},
		{"empty subject", []string{"ce-subject: "}, `{}`, 422, "ce-subject"},
		{"dataschema not absolute", []string{"ce-dataschema: x.json"}, `{}`, 422, "ce-dataschema"},
		{"type outside the set", []string{"ce-type: com.example/x"}, `{}`, 422, "ce-type"},
		{"time not RFC 3339", []string{"ce-time: yesterday"}, `{}`, 422, "ce-time"},
		{"bad percent-encoding", []string{"ce-subject: 100%"}, `{}`, 422, "ce-subject"},
		{"attribute name outside the rule", []string{"ce-my_ext: 1"}, `{}`, 422, "ce-my_ext"},
		{"datacontenttype as a header", []string{"ce-datacontenttype: application/json"}, `{}`, 422, "ce-datacontenttype"},
		{"data not an object", nil, `[1]`, 422, "data"},
		{"data not JSON", nil, `{"a":`, 400, "data"},
		{"data not JSON at all", []string{"Content-Type: text/plain"}, `a`, 415, "Content-Type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.appendsCount()
			r := a.do("POST", "/v1/streams/Device/bin-2/events", tc.body, append(append([]string(nil), base...), tc.extra...)...)
			if r.code != tc.status || r.str("field") != tc.field || r.header.Get("Content-Type") != mediaProblem {
				t.Fatalf("%d field %q, want %d %q: %s", r.code, r.str("field"), tc.status, tc.field, r.body)
			}
			if n := a.appendsCount() - before; n != 0 {
				t.Fatalf("a refused event stored %d events", n)
			}
		})
	}
}

// sseEvent is one Server-Sent Event.
type sseEvent struct{ id, data string }

// sseRead reads events from an SSE body until n arrived or the deadline.
func sseRead(t *testing.T, br *bufio.Reader, n int, deadline time.Duration) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	done := make(chan struct{})
	timer := time.AfterFunc(deadline, func() { close(done) })
	defer timer.Stop()
	for len(out) < n {
		select {
		case <-done:
			t.Fatalf("only %d of %d events within %s", len(out), n, deadline)
		default:
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the event stream: %v (after %d events)", err, len(out))
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if cur.data != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
		}
	}
	return out
}

func openSSE(t *testing.T, ctx context.Context, url, lastID string) *bufio.Reader {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Accept", mediaEventStream)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != mediaEventStream {
		t.Fatalf("subscribe: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return bufio.NewReader(resp.Body)
}

// A subscriber that disconnects and resumes with Last-Event-ID gets every
// event once: those appended while it was away (catch-up) and those after
// (live, through the commit notifications).
func TestSubscribeResumeAfterDisconnect(t *testing.T) {
	for _, tc := range []struct {
		name    string
		commits bool
		path    string
		other   bool // events of another type interleave (filtered out)
	}{
		{"log with notifications", true, "/v1/log/subscribe?from_position=1", false},
		{"aggregate type polling", false, "/v1/streams/Device/subscribe?from_position=1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := eventAPI(t, tc.commits)
			srv := httptest.NewServer(a.h)
			t.Cleanup(srv.Close)
			var want []string
			appendN := func(n int) {
				evs := newEvents(n, "READING_TAKEN")
				doHandler(t, a.h, "POST", devicePath, appendBody("any", evs...)).expect(t, 201, "")
				for _, e := range evs {
					want = append(want, e.ID)
				}
				if tc.other {
					doHandler(t, a.h, "POST", "/v1/streams/Order/o-1/events", appendBody("any", newEvents(1, "ORDER_PLACED")...)).expect(t, 201, "")
				}
			}
			appendN(3)
			ctx1, cancel1 := context.WithCancel(context.Background())
			br1 := openSSE(t, ctx1, srv.URL+tc.path, "")
			got := sseRead(t, br1, 3, 10*time.Second) // catch-up
			appendN(2)
			got = append(got, sseRead(t, br1, 2, 10*time.Second)...) // live
			cancel1()                                                // disconnect
			appendN(4)                                               // while away
			ctx2, cancel2 := context.WithCancel(context.Background())
			defer cancel2()
			br := openSSE(t, ctx2, srv.URL+tc.path, got[len(got)-1].id)
			got = append(got, sseRead(t, br, 4, 10*time.Second)...)
			appendN(2) // live again
			got = append(got, sseRead(t, br, 2, 10*time.Second)...)
			var ids []string
			last := int64(0)
			for _, ev := range got {
				var env struct {
					EventID       string `json:"event_id"`
					Position      int64  `json:"position"`
					AggregateType string `json:"aggregate_type"`
				}
				if err := json.Unmarshal([]byte(ev.data), &env); err != nil {
					t.Fatal(err)
				}
				if strconv.FormatInt(env.Position, 10) != ev.id || env.Position <= last || env.AggregateType != "Device" {
					t.Fatalf("event id %s position %d after %d type %s", ev.id, env.Position, last, env.AggregateType)
				}
				last = env.Position
				ids = append(ids, env.EventID)
			}
			if fmt.Sprint(ids) != fmt.Sprint(want) {
				t.Fatalf("received %v\nwant     %v", ids, want)
			}
		})
	}
}

func TestOpenAPIDocumentsEventAPI(t *testing.T) {
	a := eventAPI(t, false)
	r := a.do("GET", "/openapi.json", ``).expect(t, 200, "")
	paths, _ := r.json["paths"].(map[string]any)
	for _, p := range []string{"/v1/streams/{aggregate_type}/{aggregate_id}/events", "/v1/streams/{aggregate_type}/subscribe", "/v1/log", "/v1/log/subscribe"} {
		if _, ok := paths[p]; !ok {
			t.Errorf("openapi.json lacks %s", p)
		}
	}
	for _, code := range []string{CodeEventIDReused, CodePartialBatch, CodeStreamNotFound} {
		if !strings.Contains(string(r.body), `"`+code+`"`) {
			t.Errorf("openapi.json does not list error code %s", code)
		}
	}
}

// TestEventTypeFormsAtTheDoor: the event API stores every accepted form of
// event_type exactly, refuses the others with the rule named, and a
// CloudEvents type comes back out of the store unchanged
// (docs/architecture.md#event-types).
func TestEventTypeFormsAtTheDoor(t *testing.T) {
	a := eventAPI(t, false)
	for i, typ := range []string{"OrderPlaced", "order.placed.v1", "ORDER_PLACED", "com.example.order-placed", "Order_Placed-2"} {
		t.Run("stores "+typ, func(t *testing.T) {
			path := "/v1/streams/Order/o-" + strconv.Itoa(i) + "/events"
			a.do("POST", path, appendBody(nil, evIn{ID: uuid.NewString(), Type: typ})).expect(t, http.StatusCreated, "")
			page := a.do("GET", path, "").expect(t, http.StatusOK, "")
			if got := page.json["events"].([]any)[0].(map[string]any)["event_type"]; got != typ {
				t.Fatalf("stored %v, want %q", got, typ)
			}
		})
	}
	for _, typ := range []string{"order placed", ".order", "order/placed", strings.Repeat("x", 129)} {
		t.Run("refuses "+typ[:min(len(typ), 20)], func(t *testing.T) {
			r := a.do("POST", "/v1/streams/Order/refused/events", appendBody(nil, evIn{ID: uuid.NewString(), Type: typ})).expect(t, http.StatusUnprocessableEntity, CodeValidationFailed)
			if r.str("field") != "events[0].event_type" || !strings.Contains(r.str("detail"), "[A-Za-z0-9][A-Za-z0-9._-]{0,127}") {
				t.Fatalf("error %s does not name the field and the rule", r.body)
			}
		})
	}
	t.Run("CloudEvents type round trip", func(t *testing.T) {
		const typ = "com.example.order.placed"
		ce := `{"specversion":"1.0","id":"rt-1","source":"/shop","type":"` + typ + `","data":{"total":3}}`
		a.do("POST", "/v1/streams/Order/ce-1/events", ce, "Content-Type: "+mediaCloudEvent).expect(t, http.StatusCreated, "")
		page := a.do("GET", "/v1/streams/Order/ce-1/events", "").expect(t, http.StatusOK, "")
		ev := page.json["events"].([]any)[0].(map[string]any)
		if ev["event_type"] != typ || ev["metadata"].(map[string]any)["ce_type"] != typ {
			t.Fatalf("stored %v, want the CloudEvents type %q unchanged", ev, typ)
		}
		// The same CloudEvent again is a replay, not a conflict.
		a.do("POST", "/v1/streams/Order/ce-1/events", ce, "Content-Type: "+mediaCloudEvent).expect(t, http.StatusOK, "")
	})
}

// TestEventAppendTraceHeaders: the event API keeps the caller's trace
// context as the command API does — the traceparent header and, with it,
// the tracestate header — unless the event's own metadata names a
// traceparent, which then wins with its own tracestate (the tracestate
// header was dropped before, so the next hop lost the vendor state).
func TestEventAppendTraceHeaders(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	cases := []struct {
		name, metadata    string
		headers           []string
		wantTP, wantState string
	}{
		{"both headers", ``, []string{"Traceparent: " + tp, "Tracestate: a=b,c=d"}, tp, "a=b,c=d"},
		{"traceparent header only", ``, []string{"Traceparent: " + tp}, tp, ""},
		{"tracestate without traceparent", ``, []string{"Tracestate: a=b"}, "", ""},
		{"the event's own traceparent wins", `,"metadata":{"traceparent":"` + own + `"}`, []string{"Traceparent: " + tp, "Tracestate: a=b"}, own, ""},
		{"the event's own pair wins", `,"metadata":{"traceparent":"` + own + `","tracestate":"x=y"}`, []string{"Traceparent: " + tp, "Tracestate: a=b"}, own, "x=y"},
	}
	a := eventAPI(t, false)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := fmt.Sprintf("/v1/streams/Order/trace-%d/events", i)
			body := `{"events":[{"event_type":"ORDER_PLACED","data":{"n":1}` + tc.metadata + `}]}`
			a.do("POST", path, body, tc.headers...).expect(t, http.StatusCreated, "")
			md, _ := a.do("GET", path, "").expect(t, http.StatusOK, "").json["events"].([]any)[0].(map[string]any)["metadata"].(map[string]any)
			if got, _ := md["traceparent"].(string); got != tc.wantTP {
				t.Errorf("traceparent %q, want %q", got, tc.wantTP)
			}
			if got, _ := md["tracestate"].(string); got != tc.wantState {
				t.Errorf("tracestate %q, want %q", got, tc.wantState)
			}
		})
	}
}

// TestEventAppendOneOrderingKey: metadata.ordering_key is the Kafka record
// key, so the events of one request (one stream) must share it — all the
// same, or all without — else they would land in different partitions;
// such a request is refused naming the first event that differs, and
// nothing is stored.
func TestEventAppendOneOrderingKey(t *testing.T) {
	ev := func(md string) string {
		if md != "" {
			md = `,"metadata":{"ordering_key":` + md + `}`
		}
		return `{"event_type":"ORDER_PLACED","data":{"n":1}` + md + `}`
	}
	cases := []struct {
		name   string
		events []string
		status int
		field  string
	}{
		{"one key for all", []string{ev(`"tenant-7"`), ev(`"tenant-7"`)}, 201, ""},
		{"no key at all", []string{ev(""), ev("")}, 201, ""},
		{"a single event", []string{ev(`"tenant-7"`)}, 201, ""},
		{"two keys", []string{ev(`"tenant-7"`), ev(`"tenant-8"`)}, 422, "events[1].metadata.ordering_key"},
		{"a key, then none", []string{ev(`"tenant-7"`), ev(""), ev(`"tenant-7"`)}, 422, "events[1].metadata.ordering_key"},
		{"none, then a key", []string{ev(""), ev(""), ev(`"tenant-7"`)}, 422, "events[2].metadata.ordering_key"},
	}
	a := eventAPI(t, false)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := fmt.Sprintf("/v1/streams/Order/okey-%d/events", i)
			before := a.appendsCount()
			r := a.do("POST", path, `{"events":[`+strings.Join(tc.events, ",")+`]}`).expect(t, tc.status, "")
			if tc.status == 201 {
				return
			}
			if got := r.str("field"); got != tc.field {
				t.Fatalf("field %q, want %q\n%s", got, tc.field, r.body)
			}
			if n := a.appendsCount(); n != before {
				t.Fatalf("a refused request stored %d events", n-before)
			}
		})
	}
}
