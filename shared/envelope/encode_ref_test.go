package envelope

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// The reference implementations: the encoding and the canonical input as
// they were computed before appendEnvelope (encoding/json's reflection
// Encoder over the Envelope struct, a metadata copy without the transport
// keys). Stored lines and stored hashes were written by them, so the fast
// path must agree with them byte for byte, errors included.

// referenceMarshal is Marshal as it was: EncodeJSON(e), with the
// Timestamp's MarshalJSON as it was.
func referenceMarshal(e Envelope) ([]byte, error) {
	return EncodeJSON(e)
}

// referenceTimestampJSON is Timestamp.MarshalJSON as it was.
func referenceTimestampJSON(ts Timestamp) ([]byte, error) {
	if ts.t.IsZero() {
		return []byte("null"), nil
	}
	if y := ts.t.Year(); y < 1 || y > 9999 {
		return nil, fmt.Errorf("envelope: timestamp year %d out of range", y)
	}
	return []byte(`"` + ts.String() + `"`), nil
}

// referenceCanonicalInput is canonicalInput as it was.
func referenceCanonicalInput(e Envelope) ([]byte, error) {
	e, err := Normalize(e)
	if err != nil {
		return nil, err
	}
	e.SequenceNumber = 0
	e.Position = 0
	if len(e.Metadata) > 0 {
		m := make(Metadata, len(e.Metadata))
		for k, v := range e.Metadata {
			if !IsTransportMetadataKey(k) {
				m[k] = v
			}
		}
		if len(m) == 0 {
			m = nil
		}
		e.Metadata = m
	}
	enc, err := referenceMarshal(e)
	if err != nil {
		return nil, fmt.Errorf("envelope: canonical form: %w", err)
	}
	return enc, nil
}

// referenceOldCanonicalJSON is CanonicalJSON as it was: the byte
// canonicaliser over referenceCanonicalInput.
func referenceOldCanonicalJSON(e Envelope) ([]byte, error) {
	enc, err := referenceCanonicalInput(e)
	if err != nil {
		return nil, err
	}
	return canonicalBytes(nil, enc)
}

// sameResult fails t unless the two results are equal bytes or equal
// errors (same text).
func sameResult(t *testing.T, what string, got []byte, err error, want []byte, werr error) {
	t.Helper()
	if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
		t.Fatalf("%s: error %v, reference error %v", what, err, werr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s:\n%q\nreference\n%q", what, got, want)
	}
}

// checkEncodings compares Marshal, CanonicalJSON, CanonicalHash,
// MarshalHash and Timestamp.MarshalJSON with the references on e.
func checkEncodings(t *testing.T, e Envelope) {
	t.Helper()
	got, err := Marshal(e)
	want, werr := referenceMarshal(e)
	sameResult(t, "Marshal", got, err, want, werr)

	canon, cerr := CanonicalJSON(e)
	wcanon, wcerr := referenceOldCanonicalJSON(e)
	sameResult(t, "CanonicalJSON", canon, cerr, wcanon, wcerr)

	enc, hash, herr := MarshalHash(e)
	switch {
	case wcerr != nil:
		sameResult(t, "MarshalHash (canonical error)", enc, herr, nil, wcerr)
	case werr != nil:
		sameResult(t, "MarshalHash (encoding error)", enc, herr, nil, werr)
	default:
		sameResult(t, "MarshalHash encoding", enc, herr, want, nil)
		if hash != sha256.Sum256(wcanon) {
			t.Fatalf("MarshalHash hash differs from the reference's")
		}
	}
	if h, err := CanonicalHash(e); (err == nil) != (wcerr == nil) || err == nil && h != sha256.Sum256(wcanon) {
		t.Fatalf("CanonicalHash %x (%v) differs from the reference's", h, err)
	}

	ts, tserr := e.OccurredAt.MarshalJSON()
	wts, wtserr := referenceTimestampJSON(e.OccurredAt)
	sameResult(t, "Timestamp.MarshalJSON", ts, tserr, wts, wtserr)
}

// encodeSeedEnvelopes are the envelopes of the other tests' corpora
// (Parse's fuzz seeds, the canonical-form cases) and awkward values.
func encodeSeedEnvelopes() []Envelope {
	var out []Envelope
	for _, data := range canonicalDataCases {
		out = append(out, canonicalEnvelope(data))
	}
	for _, raw := range []string{
		minimalValid,
		`{"event_id":"0B4F2A3C-9D1E-4C8A-B7E2-5F6A7B8C9D0E","event_type":"CREATE_INSTANCE","kind":"command",` +
			`"aggregate_type":"Instance","aggregate_id":" shop:orders:cafe\u0301/1 ","sequence_number":7,"position":9,` +
			`"expected_seq":0,"occurred_at":"2026-11-21T11:00:00.123456+01:00","actor":"u",` +
			`"data":{"b":[1,2,{"c":null}],"a":12345678901234567890123,"s":"<\u2028>"},` +
			`"metadata":{"command_id":"cmd-1","traceparent":"00-x","x":{"n":1e400}},"schema_version":3}`,
		`{"event_id":"0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e","data":{"a":{"a":{"a":[[[]]]}}}}`,
		` { "data" : { "a" : [ 1 , "x" ] } , "position":7 ,"actor":null, "schema_version" :1 }`,
		"{\"data\":{}\n,\"metadata\":\t{\"k\":\"\\u00e9\"}}",
		string(benchEnvelope(64)),
	} {
		var e Envelope
		if err := json.Unmarshal([]byte(raw), &e); err == nil {
			out = append(out, e)
		}
	}
	exp := int64(0)
	big := int64(math.MaxInt64)
	awkward := "a\x00\x01\x1f\x7f\"\\/<>&\u2028\u2029\xff\xed\xa0\x80é😀\t\n\r\b\f"
	out = append(out,
		Envelope{},
		Envelope{EventID: awkward, EventType: awkward, Kind: Kind(awkward), AggregateType: awkward, AggregateID: awkward,
			SequenceNumber: math.MinInt64, Position: -1, ExpectedSeq: &big, Actor: awkward,
			OccurredAt: NewTimestamp(time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)),
			Data:       json.RawMessage(" {\"s\":\"" + awkward[8:] + "\", \"n\": 123456789012345678901234567890 } "),
			Metadata: Metadata{awkward: json.RawMessage(`"<&>"`), "": json.RawMessage(`[ 1, 2 ]`), "nil": nil,
				MetaTraceparent: json.RawMessage(`"00-x"`), MetaKafkaTopic: json.RawMessage(`"t"`)}},
		Envelope{EventID: "x", ExpectedSeq: &exp, Data: json.RawMessage{}, Metadata: Metadata{}},
		Envelope{EventID: "x", Data: json.RawMessage(`{`)},
		Envelope{EventID: "x", Data: json.RawMessage(`{} {}`)},
		Envelope{EventID: "x", Data: json.RawMessage(`{"a":"ctl` + "\x01" + `"}`)},
		Envelope{EventID: "x", Data: json.RawMessage(`{}`), Metadata: Metadata{"k": json.RawMessage(`tru`)}},
		Envelope{EventID: "x", Data: json.RawMessage(`{}`), Metadata: Metadata{"k": json.RawMessage{}}},
		Envelope{EventID: "x", Data: json.RawMessage(`{}`), Metadata: Metadata{MetaRequestID: json.RawMessage(`"r"`), MetaSpanID: nil}},
		Envelope{EventID: "x", OccurredAt: NewTimestamp(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))},
		Envelope{EventID: "x", OccurredAt: NewTimestamp(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC))},
	)
	// Nesting at encoding/json's limit and one beyond, compact and not.
	for _, d := range []int{maxCanonicalDepth - 1, maxCanonicalDepth, maxCanonicalDepth + 1} {
		arrays := strings.Repeat("[", d) + strings.Repeat("]", d)
		out = append(out, Envelope{EventID: "x", Data: json.RawMessage(arrays)},
			Envelope{EventID: "x", Data: json.RawMessage(" " + arrays)},
			Envelope{EventID: "x", Data: json.RawMessage(`{"a":` + arrays[2:] + `}`)})
	}
	// Valid for encoding/json, not for jsontext: escaped lone surrogates,
	// invalid UTF-8, duplicate names; compact and not.
	for _, data := range []string{`["\ud800"]`, `{"a":"\udc00\ud800"}`, "[\"\xff\"]", `{"a":1,"a":2}`, `{"a":1, "a":2}`, "[\"\xed\xa0\x80\"]"} {
		out = append(out, Envelope{EventID: "x", Data: json.RawMessage(data), Metadata: Metadata{"m": json.RawMessage(data)}})
	}
	// One awkward character in an otherwise plain string, in each
	// place a string is written.
	for _, c := range []string{"\\", `"`, "\x00", "\x1f", "\n", "\x7f", "<", "&", "\u2028", "\u2029", "\xff", "\xed\xa0\x80", "é", "\ufffd"} {
		s := "a" + c + "b"
		out = append(out,
			Envelope{EventID: s, Data: json.RawMessage(`{"k":"` + s + `"}`)},
			Envelope{EventType: s, Kind: Kind(s), AggregateType: s},
			Envelope{AggregateID: s, Actor: s},
			Envelope{Metadata: Metadata{s: json.RawMessage(`"` + s + `"`), "b": json.RawMessage(`"x"`), "a": json.RawMessage(`1`)}})
	}
	return out
}

// TestEncodingsMatchReference: the encodings agree with the references on
// every seed envelope.
func TestEncodingsMatchReference(t *testing.T) {
	for i, e := range encodeSeedEnvelopes() {
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkEncodings(t, e) })
	}
}

// metaSep separates the metadata members in FuzzMarshalMatchesReflection's
// meta argument: key, value, key, value...; a value "<nil>" is a nil
// json.RawMessage.
const metaSep = "\n|"

// addEnvelope adds e to f's corpus as FuzzMarshalMatchesReflection's
// arguments.
func addEnvelope(f *testing.F, e Envelope) {
	var exp int64
	hasExp := e.ExpectedSeq != nil
	if hasExp {
		exp = *e.ExpectedSeq
	}
	var ms int64
	if !e.OccurredAt.IsZero() {
		ms = e.OccurredAt.Time().UnixMilli()
	}
	var meta []string
	for k, v := range e.Metadata {
		val := string(v)
		if v == nil {
			val = "<nil>"
		}
		meta = append(meta, k, val)
	}
	f.Add(e.EventID, e.EventType, string(e.Kind), e.AggregateType, e.AggregateID, e.SequenceNumber, e.Position,
		hasExp, exp, ms, e.Actor, e.Data == nil, []byte(e.Data), strings.Join(meta, metaSep), e.Metadata != nil, e.SchemaVersion)
}

// FuzzMarshalMatchesReflection: Marshal, CanonicalJSON, CanonicalHash and
// MarshalHash agree with the reflection-based references (errors
// included) on arbitrary envelopes: any strings (control bytes, invalid
// UTF-8, U+2028, '<>&'), any numbers, data and metadata values that are
// not valid or not compact JSON, transport metadata keys.
func FuzzMarshalMatchesReflection(f *testing.F) {
	for _, e := range encodeSeedEnvelopes() {
		addEnvelope(f, e)
	}
	f.Fuzz(func(t *testing.T, eventID, eventType, kind, aggType, aggID string, seq, pos int64,
		hasExp bool, exp, ms int64, actor string, nilData bool, data []byte, meta string, hasMeta bool, schema int) {
		e := Envelope{EventID: eventID, EventType: eventType, Kind: Kind(kind), AggregateType: aggType, AggregateID: aggID,
			SequenceNumber: seq, Position: pos, Actor: actor, Data: json.RawMessage(data), SchemaVersion: schema}
		if hasExp {
			e.ExpectedSeq = &exp
		}
		if ms != 0 {
			e.OccurredAt = NewTimestamp(time.UnixMilli(ms))
		}
		if nilData {
			e.Data = nil
		} else if e.Data == nil {
			e.Data = json.RawMessage{}
		}
		if hasMeta {
			e.Metadata = Metadata{}
			parts := strings.Split(meta, metaSep)
			for i := 0; i+1 < len(parts); i += 2 {
				var v json.RawMessage
				if parts[i+1] != "<nil>" {
					v = json.RawMessage(parts[i+1])
				}
				e.Metadata[parts[i]] = v
			}
		}
		checkEncodings(t, e)
	})
}

// TestMarshalErrorIsMarshalerError: data that is not JSON fails with the
// *json.MarshalerError the reflection encoder returned.
func TestMarshalErrorIsMarshalerError(t *testing.T) {
	_, err := Marshal(Envelope{Data: json.RawMessage(`{`)})
	var me *json.MarshalerError
	if !errors.As(err, &me) || me.Type != rawMessageType {
		t.Fatalf("error %v (%T), want a *json.MarshalerError for json.RawMessage", err, err)
	}
}

// TestHashScratchConcurrent: the hashes share pooled scratch buffers;
// concurrent hashes of different envelopes still get their own results
// (run with -race, as make test does).
func TestHashScratchConcurrent(t *testing.T) {
	envs := encodeSeedEnvelopes()
	want := make([][32]byte, len(envs))
	for i, e := range envs {
		want[i], _ = CanonicalHash(e)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for n := range 50 {
				i := (g*7 + n) % len(envs)
				h, _ := CanonicalHash(envs[i])
				_, mh, err := MarshalHash(envs[i])
				if h != want[i] || err == nil && mh != want[i] {
					t.Errorf("envelope %d: hash %x, MarshalHash %x, want %x", i, h, mh, want[i])
				}
			}
		})
	}
	wg.Wait()
}
