package envelope

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func mustParse(t testing.TB, s string) Envelope {
	t.Helper()
	e, err := Parse([]byte(s), DefaultLimits())
	if err != nil {
		t.Fatalf("Parse(%s): %v", s, err)
	}
	return e
}

func mustHash(t testing.TB, e Envelope) string {
	t.Helper()
	h, err := CanonicalHashHex(e)
	if err != nil {
		t.Fatalf("CanonicalHashHex: %v", err)
	}
	return h
}

func TestCanonicalJSONGolden(t *testing.T) {
	e := mustParse(t, `{
	  "schema_version": 2,
	  "metadata": {"traceparent": "00-x", "z": 1, "command_id": "c-1", "a": {"y": 2, "x": [3, 1.50]}, "kafka_topic": "t"},
	  "data": {"b": "<tag> & \u00e9 \n \u2028", "a": 12345678901234567890123, "c": -0.0, "d": 1E+2},
	  "occurred_at": "2026-11-21T10:00:00.123Z",
	  "aggregate_id": "Order-1", "aggregate_type": "Order", "kind": "command",
	  "event_type": "PLACE_ORDER", "event_id": "0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e",
	  "sequence_number": 4, "position": 99, "expected_seq": 3, "actor": "u"
	}`)
	got, err := CanonicalJSON(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"actor":"u","aggregate_id":"Order-1","aggregate_type":"Order",` +
		`"data":{"a":12345678901234567890123,"b":"<tag> & é \n ` + "\u2028" + `","c":-0.0,"d":1E+2},` +
		`"event_id":"0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e","event_type":"PLACE_ORDER","expected_seq":3,"kind":"command",` +
		`"metadata":{"a":{"x":[3,1.50],"y":2},"command_id":"c-1","z":1},` +
		`"occurred_at":"2026-11-21T10:00:00.123Z","schema_version":2}`
	if string(got) != want {
		t.Fatalf("CanonicalJSON =\n%s\nwant\n%s", got, want)
	}
	if h := mustHash(t, e); len(h) != 64 {
		t.Fatalf("hash %q", h)
	}
}

func TestCanonicalHashEqual(t *testing.T) {
	base := mustParse(t, `{"event_id":"0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e","event_type":"ORDER_PLACED","kind":"domain",`+
		`"aggregate_type":"Order","aggregate_id":"Order-1","occurred_at":"2026-11-21T10:00:00.123Z",`+
		`"data":{"a":1,"b":{"c":[1,2,{"d":"x","e":null}]}},"metadata":{"command_id":"c-1","free":true}}`)
	want := mustHash(t, base)
	variants := map[string]string{
		"key order and whitespace": `{
		  "metadata" : { "free" : true , "command_id" : "c-1" },
		  "data" : { "b" : { "c" : [ 1 , 2 , { "e" : null , "d" : "x" } ] } , "a" : 1 },
		  "occurred_at" : "2026-11-21T10:00:00.123Z", "aggregate_id" : "Order-1",
		  "aggregate_type" : "Order", "kind" : "domain", "event_type" : "ORDER_PLACED",
		  "event_id" : "0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e"
		}`,
		"store-assigned and transport fields": `{"event_id":"0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e","event_type":"ORDER_PLACED","kind":"domain",` +
			`"aggregate_type":"Order","aggregate_id":"Order-1","occurred_at":"2026-11-21T10:00:00.123Z","sequence_number":12,"position":345,` +
			`"data":{"a":1,"b":{"c":[1,2,{"d":"x","e":null}]}},"metadata":{"command_id":"c-1","free":true,"kafka_topic":"other",` +
			`"traceparent":"00-a-b-01","tracestate":"x=y","baggage":"k=v","trace_id":"t","span_id":"s","request_id":"r"}}`,
		"escapes, upper-case id, other offset, NFD id, defaults explicit": `{"event_id":"0B4F2A3C-9D1E-4C8A-B7E2-5F6A7B8C9D0E","event_type":"ORDER_PLACED","kind":"domain",` +
			`"aggregate_type":"Order","aggregate_id":" Order-1\t","occurred_at":"2026-11-21T11:00:00.123999+01:00","schema_version":1,` +
			`"data":{"\u0061":1,"b":{"c":[1,2,{"d":"\u0078","e":null}]}},"metadata":{"command_id":"c-1","free":true}}`,
	}
	for name, v := range variants {
		t.Run(name, func(t *testing.T) {
			if got := mustHash(t, mustParse(t, v)); got != want {
				t.Fatalf("hash %s, want %s", got, want)
			}
		})
	}
	// Transport-only metadata disappears entirely; absent and empty metadata
	// are the same.
	a := mustParse(t, minimalValid)
	b := mustParse(t, withField(t, "metadata", `{"traceparent":"00-x"}`))
	c := mustParse(t, withField(t, "metadata", `{}`))
	if mustHash(t, a) != mustHash(t, b) || mustHash(t, a) != mustHash(t, c) {
		t.Fatal("transport-only or empty metadata changed the hash")
	}
	// Absent data and {} are the same.
	if mustHash(t, a) != mustHash(t, mustParse(t, withField(t, "data", `{}`))) {
		t.Fatal("absent data and {} differ")
	}
	// CanonicalHash normalises programmatic envelopes too.
	p := a
	p.AggregateID = " Order-1 "
	p.Data = nil
	p.SchemaVersion = 0
	if mustHash(t, p) != mustHash(t, a) {
		t.Fatal("un-normalised envelope hashes differently")
	}
	p.AggregateID = "a\x00"
	if _, err := CanonicalHash(p); fieldOf(err) != "aggregate_id" {
		t.Fatalf("CanonicalHash of an invalid id: %v", err)
	}
}

func TestCanonicalHashDiffers(t *testing.T) {
	base := withField(t, "data", `{"n":12345678901234567890123,"s":"x"}`)
	want := mustHash(t, mustParse(t, base))
	variants := map[string]string{
		"data value":            withField(t, "data", `{"n":12345678901234567890123,"s":"y"}`),
		"large int last digit":  withField(t, "data", `{"n":12345678901234567890124,"s":"x"}`),
		"number spelling":       withField(t, "data", `{"n":1.2345678901234567890123e22,"s":"x"}`),
		"extra data key":        withField(t, "data", `{"n":12345678901234567890123,"s":"x","t":null}`),
		"type of value":         withField(t, "data", `{"n":"12345678901234567890123","s":"x"}`),
		"event_type":            strings.Replace(base, "ORDER_PLACED", "ORDER_PLACED2", 1),
		"aggregate_id case":     strings.Replace(base, "Order-1", "order-1", 1),
		"kind":                  strings.Replace(base, `"domain"`, `"command"`, 1),
		"schema_version":        strings.Replace(base, `}`, `,"schema_version":2}`, 1),
		"actor":                 strings.Replace(base, `}`, `,"actor":"a"}`, 1),
		"occurred_at":           strings.Replace(base, `}`, `,"occurred_at":"2026-11-21T10:00:00.124Z"}`, 1),
		"non-transport meta":    strings.Replace(base, `}`, `,"metadata":{"correlation_id":"c"}}`, 1),
		"ordering_key is kept":  strings.Replace(base, `}`, `,"metadata":{"ordering_key":"k"}}`, 1),
		"free metadata number":  strings.Replace(base, `}`, `,"metadata":{"n":18446744073709551617}}`, 1),
		"metadata key escaping": strings.Replace(base, `}`, `,"metadata":{"a\"b":1}}`, 1),
	}
	seen := map[string]string{want: "base"}
	for name, v := range variants {
		h := mustHash(t, mustParse(t, v))
		if prev, dup := seen[h]; dup {
			t.Errorf("%s hashes like %s", name, prev)
		}
		seen[h] = name
	}
	// Large integers survive exactly in the canonical form.
	cj, _ := CanonicalJSON(mustParse(t, base))
	if !bytes.Contains(cj, []byte(`"n":12345678901234567890123`)) {
		t.Fatalf("large integer not preserved: %s", cj)
	}
}

func TestCanonicalStringEscaping(t *testing.T) {
	got := appendCanonicalString(nil, "a\"\\\x00\x1f\b\f\n\r\t<>&\u2028é\xff")
	want := `"a\"\\\u0000\u001f\b\f\n\r\t<>&` + "\u2028é" + `\ufffd"`
	if string(got) != want {
		t.Fatalf("got %s want %s", got, want)
	}
	var back string
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
}

func TestNamespace(t *testing.T) {
	derived := uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://sluice.dev/ns/events"))
	if derived.String() != EventNamespace || Namespace() != derived {
		t.Fatalf("EventNamespace %s, derivation gives %s", EventNamespace, derived)
	}
}

func TestDomainEventIDGolden(t *testing.T) {
	tests := []struct {
		cmd, typ, aggType, aggID, want string
	}{
		// Values computed once and cross-checked with Python's uuid.uuid5;
		// they must never change.
		{"cmd-1", "INSTANCE_CREATED", "Instance", "shop:orders:o-1", "ab15076d-c425-5e92-95d3-520f36815f5c"},
		{"0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e", "ORDER_PLACED", "Order", "Order-1", "fcae727f-9e11-5fe3-887c-8159bb4e9715"},
	}
	for _, tc := range tests {
		got := DomainEventID(tc.cmd, tc.typ, tc.aggType, tc.aggID)
		if got.String() != tc.want {
			t.Errorf("DomainEventID(%q,%q,%q,%q) = %s, want %s", tc.cmd, tc.typ, tc.aggType, tc.aggID, got, tc.want)
		}
		if got.Version() != 5 || got.Variant() != uuid.RFC4122 {
			t.Errorf("%s is not an RFC 4122 version-5 UUID", got)
		}
		if again := DomainEventID(tc.cmd, tc.typ, tc.aggType, tc.aggID); again != got {
			t.Errorf("not deterministic")
		}
		// A derived id is a valid event_id.
		e := Envelope{EventID: got.String(), EventType: tc.typ, Kind: KindDomain, AggregateType: tc.aggType, AggregateID: tc.aggID}
		if _, err := Prepare(e, Limits{}, nil); err != nil {
			t.Errorf("derived id rejected: %v", err)
		}
	}
	if got := InstanceIDFromCommand("cmd-1").String(); got != "2a3fc5bf-daa4-5d60-8123-f0af9461b528" {
		t.Errorf("InstanceIDFromCommand = %s", got)
	}
	// Every input takes part.
	ids := map[uuid.UUID]bool{}
	for _, args := range [][4]string{
		{"c", "E", "T", "a"}, {"d", "E", "T", "a"}, {"c", "F", "T", "a"}, {"c", "E", "U", "a"}, {"c", "E", "T", "b"},
		{"c", "E", "T", "A"},
	} {
		ids[DomainEventID(args[0], args[1], args[2], args[3])] = true
	}
	ids[InstanceIDFromCommand("c")] = true
	if len(ids) != 7 {
		t.Fatalf("collision among derived ids: %d distinct of 7", len(ids))
	}
}

func TestValidateCommandID(t *testing.T) {
	for _, ok := range []string{"c", "0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e", strings.Repeat("k", 255), "a/b.c~!"} {
		if err := ValidateCommandID(ok); err != nil {
			t.Errorf("ValidateCommandID(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a:b", "a b", "é", "a\tb", strings.Repeat("k", 256)} {
		if err := ValidateCommandID(bad); fieldOf(err) != "metadata.command_id" {
			t.Errorf("ValidateCommandID(%q) = %v", bad, err)
		}
	}
}
