package envelope

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// diffLimits are the limits FuzzParseDifferential parses each input with:
// the defaults, and small ones that its inputs reach (depth, metadata and
// envelope size).
var diffLimits = []Limits{
	{},
	{MaxEnvelopeBytes: 2 << 10, MaxDataDepth: 3, MaxMetadataBytes: 64},
}

// diffSeeds are awkward envelopes for FuzzParseDifferential: escaped and
// duplicate names at every level, nesting around the limits, metadata of
// every shape, every field of the wrong type, invalid text in keys and
// values, truncation and trailing data.
var diffSeeds = []string{
	minimalValid,
	`{"event_id":"0B4F2A3C-9D1E-4C8A-B7E2-5F6A7B8C9D0E","event_type":"CREATE_INSTANCE","kind":"command",` +
		`"aggregate_type":"Instance","aggregate_id":" shop:orders:cafe\u0301/1 ","sequence_number":7,"position":9,` +
		`"expected_seq":0,"occurred_at":"2026-11-21T11:00:00.123456+01:00","actor":"u",` +
		`"data":{"b":[1,2,{"c":null}],"a":12345678901234567890123,"s":"<\u2028>"},` +
		`"metadata":{"command_id":"cmd-1","traceparent":"00-x","x":{"n":1e400}},"schema_version":3}`,
	`{"\u0065vent_id":"0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e","event_type":"T","kind":"\u0064omain","aggregate_type":"A","aggregate_id":"x"}`,
	`{"event_id":"0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e","\u0065vent_id":"0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0f"}`,
	`{"data":{"a":1,"\u0061":2}}`,
	`{"data":{"a":{"b":1,"b":2}}}`,
	`{"data":{"a":[{"b":1},{"b":1,"c":{"b":2,"b":3}}]}}`,
	`{"metadata":{"a":1,"\u0061":2}}`,
	`{"metadata":{"k":"v"},"metadata":{}}`,
	`{"EVENT_ID":"x"}`,
	`{"unknown":1,"unknown":2}`,
	`{"event_id":1,"unknown":2}`,
	`{"data":{"a":{"b":{"c":{}}}}}`,
	`{"data":{"a":{"b":{"c":[]}}},"metadata":{"a":[[[1]]]}}`,
	`{"data":[[[[[]]]]]}`,
	`{"metadata":{"a":{"b":{"c":{"d":1}}}}}`,
	`{"data":"x"}`, `{"data":[]}`, `{"data":null,"metadata":null}`, `{"metadata":[]}`, `{"metadata":"x"}`,
	`{"sequence_number":0}`, `{"position":-1}`, `{"sequence_number":1.0}`, `{"position":1e3}`, `{"expected_seq":-0}`,
	`{"sequence_number":9223372036854775808}`, `{"schema_version":2147483648}`, `{"schema_version":"1"}`,
	`{"occurred_at":"2026-11-21t10:00:00z"}`, `{"occurred_at":1}`, `{"occurred_at":"0000-01-01T00:00:00Z"}`,
	`{"kind":"Domain"}`, `{"kind":7}`, `{"actor":"a\u0000b"}`, `{"actor":null,"kind":null}`,
	` { "data" : { "a" : [ 1 , "x" ] } , "position":7 ,"actor":null, "schema_version" :1e0 }`,
	"{\"data\":{}\n,\"metadata\":\t{\"k\":\"\\u00e9\"}}",
	"{\"aggregate_id\":\"\xff\"}",
	"{\"data\":{\"k\xff\":1}}",
	`{"data":{"a":"\ud800"}}`, `{"metadata":{"\udc00":1}}`, `{"data":{"k\ud83d\ude80":"\ud83d\ude80"}}`,
	`{"data":{"a":1}} {}`, `{} x`, `{"data":{"a":`, `{"data":{"a":1}`, `{`, `[`, `[{}]`, `"x"`, `null`, ``, ` `, `{}`,
	`{"data":{"a":1},}`, `{"data":{"a":01}}`, `{"data":{"a":1 "b":2}}`, `{"a" "b"}`, `{,}`, `{"metadata":{"a":tru}}`,
	`{"metadata":{"command_id":"a:b"}}`, `{"metadata":{"kafka_topic":".."}}`, `{"metadata":{"traceparent":1}}`,
	`{"metadata":{"ordering_key":"\u006b"}}`,
	`{"metadata":{"command_id":"c-1","correlation_id":"k","traceparent":"00-x","free":"` + strings.Repeat("x", 80) + `"}}`,
	`{"data":{"s":"` + strings.Repeat("y", 3000) + `"}}`,
}

// FuzzParseDifferential checks Parse against refParse (parse_ref_test.go,
// Parse as it was before the single-pass scanner): for every input and
// limits, the same envelope or the same *ValidationError (code, field,
// limit, reason, fault). It also checks Validate against refValidate, of
// envelopes whose data or metadata the input is, and ScanObject against refScanObject:
// the same callbacks in the same order, then the same error.
func FuzzParseDifferential(f *testing.F) {
	for _, s := range diffSeeds {
		f.Add([]byte(s))
	}
	for _, n := range []int{0, 100} {
		f.Add(benchEnvelope(n))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, l := range diffLimits {
			got, err := Parse(b, l)
			want, werr := refParse(b, l)
			if d := diffErr(err, werr); d != "" {
				t.Fatalf("Parse(%q, %+v): %s", b, l, d)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Parse(%q, %+v):\n got %#v\nwant %#v", b, l, got, want)
			}
		}
		// Validate, of envelopes built in Go: b as data, and as metadata.
		base, err := Parse([]byte(minimalValid), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		// validateMetadata reports the first bad key in map order, which
		// is random: one key at a time, and all keys only for whether
		// they are refused.
		var m Metadata
		_ = json.Unmarshal(b, &m)
		es := []Envelope{func(e Envelope) Envelope { e.Data = b; return e }(base)}
		for _, k := range []string{"k", MetaCommandID, MetaKafkaTopic, MetaTraceparent} {
			es = append(es, func(e Envelope) Envelope { e.Metadata = Metadata{k: b}; return e }(base))
		}
		for k, v := range m {
			es = append(es, func(e Envelope) Envelope { e.Metadata = Metadata{k: v}; return e }(base))
		}
		for _, e := range es {
			for _, l := range diffLimits {
				err, werr := Validate(e, l), refValidate(e, l.WithDefaults(), 0, false)
				if d := diffErr(err, werr); d != "" {
					t.Fatalf("Validate(%+v, %+v): %s", e, l, d)
				}
			}
		}
		all := base
		all.Metadata = m
		for _, l := range diffLimits {
			if err, werr := Validate(all, l), refValidate(all, l.WithDefaults(), 0, false); (err == nil) != (werr == nil) {
				t.Fatalf("Validate(%+v, %+v) = %v, want %v", all, l, err, werr)
			}
		}
		for _, rule := range []ObjectRule{
			{Field: "body", Offset: 1, MaxDepth: 2},
			{Field: "data", MaxDepth: 3},
		} {
			gotLog, err := scanLog(b, rule, ScanObject)
			wantLog, werr := scanLog(b, rule, refScanObject)
			if !reflect.DeepEqual(gotLog, wantLog) {
				t.Fatalf("ScanObject(%q, %+v) callbacks:\n got %q\nwant %q", b, rule, gotLog, wantLog)
			}
			if d := diffErr(err, werr); d != "" {
				t.Fatalf("ScanObject(%q, %+v): %s", b, rule, d)
			}
		}
	})
}

// scanLog runs scan with callbacks that log every key and value; the
// rule's OnKey refuses a key "stop".
func scanLog(b []byte, rule ObjectRule, scan func([]byte, ObjectRule) error) ([]string, error) {
	var log []string
	rule.OnKey = func(k string) error {
		log = append(log, "key "+k)
		if k == "stop" {
			return errors.New("stop")
		}
		return nil
	}
	rule.OnValue = func(k string, v []byte) {
		log = append(log, fmt.Sprintf("value %s=%s cap=%v", k, v, cap(v) == len(v)))
	}
	err := scan(b, rule)
	return log, err
}

// diffErr describes how err differs from want ("" when they agree): both
// nil, or the same *ValidationError or *ObjectError field for field (an
// ObjectError's Err by its text), or the same text.
func diffErr(err, want error) string {
	var ve, wve *ValidationError
	var oe, woe *ObjectError
	switch {
	case err == nil && want == nil:
		return ""
	case err == nil || want == nil:
		return fmt.Sprintf("error %v, want %v", err, want)
	case errors.As(want, &wve):
		if !errors.As(err, &ve) || *ve != *wve {
			return fmt.Sprintf("error %#v, want %#v", err, wve)
		}
	case errors.As(want, &woe):
		if !errors.As(err, &oe) || oe.Fault != woe.Fault || oe.Member != woe.Member || oe.Key != woe.Key ||
			oe.MaxDepth != woe.MaxDepth || fmt.Sprint(oe.Err) != fmt.Sprint(woe.Err) || oe.Error() != woe.Error() {
			return fmt.Sprintf("error %#v, want %#v", err, woe)
		}
	case err.Error() != want.Error():
		return fmt.Sprintf("error %v, want %v", err, want)
	}
	return ""
}

// TestParseConcurrent parses the differential seeds from several
// goroutines at once (the worker parses a batch on all cores): the pooled
// scanners are never shared, so each result is the reference's (run with
// -race, as make test does).
func TestParseConcurrent(t *testing.T) {
	for _, l := range diffLimits {
		t.Run(fmt.Sprintf("%+v", l), func(t *testing.T) {
			t.Parallel()
			for g := 0; g < 4; g++ {
				t.Run(fmt.Sprint("goroutine", g), func(t *testing.T) {
					t.Parallel()
					for i := 0; i < 20; i++ {
						for _, s := range diffSeeds {
							got, err := Parse([]byte(s), l)
							want, werr := refParse([]byte(s), l)
							if d := diffErr(err, werr); d != "" || !reflect.DeepEqual(got, want) {
								t.Errorf("Parse(%q): %v %s", s, got, d)
							}
						}
					}
				})
			}
		})
	}
}
