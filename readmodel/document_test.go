package readmodel_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
)

// v1Document and v1Split are Document and SplitDocument as they were
// written with encoding/json maps (two decodings and two encodings per
// document): the reference the one-pass DocBuilder is checked against.
func v1Document(m readmodel.Meta, state json.RawMessage) ([]byte, error) {
	doc := map[string]json.RawMessage{}
	if !m.Deleted && len(state) > 0 {
		if err := json.Unmarshal(state, &doc); err != nil {
			return nil, err
		}
		if doc == nil {
			doc = map[string]json.RawMessage{}
		}
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(mb, &meta); err != nil {
		return nil, err
	}
	for k, v := range meta {
		doc[k] = v
	}
	return json.Marshal(doc)
}

func v1Split(source []byte) (readmodel.Meta, json.RawMessage, error) {
	var m readmodel.Meta
	if err := json.Unmarshal(source, &m); err != nil {
		return m, nil, err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(source, &doc); err != nil {
		return m, nil, err
	}
	for _, f := range readmodel.ReservedFields() {
		delete(doc, f)
	}
	state, err := json.Marshal(doc)
	return m, state, err
}

// sameJSON reports whether a and b decode (encoding/json, numbers as
// written) to equal values.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	dec := func(p []byte) any {
		d := json.NewDecoder(bytes.NewReader(p))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("decode %q: %v", p, err)
		}
		return v
	}
	return reflect.DeepEqual(dec(a), dec(b))
}

// checkDocument checks Document against v1Document for one input, and
// SplitDocument against v1Split on its document.
func checkDocument(t *testing.T, m readmodel.Meta, state string) {
	t.Helper()
	want, wantErr := v1Document(m, json.RawMessage(state))
	got, err := readmodel.Document(m, json.RawMessage(state))
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("Document(%q): error %v, encoding/json's %v", state, err, wantErr)
	}
	if err != nil {
		return
	}
	if !json.Valid(got) || !sameJSON(t, got, want) {
		t.Fatalf("Document(%q) = %s, encoding/json's %s", state, got, want)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, got); err != nil || !bytes.Equal(compact.Bytes(), got) {
		t.Fatalf("Document(%q) = %s: not compact", state, got)
	}
	gm, gs, err := readmodel.SplitDocument(got)
	if err != nil {
		t.Fatalf("SplitDocument(%s): %v", got, err)
	}
	// The inverse of Document: the meta given and the state without the
	// reserved names.
	wantState := []byte(`{}`)
	if !m.Deleted && len(bytes.TrimSpace([]byte(state))) > 0 {
		var st map[string]json.RawMessage
		if err := json.Unmarshal([]byte(state), &st); err != nil {
			t.Fatal(err)
		}
		for _, f := range readmodel.ReservedFields() {
			delete(st, f)
		}
		if wantState, err = json.Marshal(st); err != nil || st == nil {
			wantState = []byte(`{}`)
		}
	}
	if gm != m || !sameJSON(t, gs, wantState) {
		t.Fatalf("SplitDocument(%s) = %+v %s, want %+v %s", got, gm, gs, m, wantState)
	}
	// And what encoding/json read, where it could: it failed on a state
	// name that is a reserved one in other case, such as "Deleted":"yes"
	// (its case-insensitive match), which made the document unreadable.
	if wm, ws, err := v1Split(got); err == nil && (gm != wm || !sameJSON(t, gs, ws)) {
		t.Fatalf("SplitDocument(%s) = %+v %s, encoding/json's %+v %s", got, gm, gs, wm, ws)
	}
}

func TestDocumentAsEncodingJSON(t *testing.T) {
	ts := envelope.NewTimestamp(time.Date(2026, 11, 21, 10, 0, 0, 123e6, time.UTC))
	m := readmodel.Meta{DB: "shop", Class: "orders", InstanceID: "1", SequenceNumber: 3, EventID: "e", CreatedAt: ts, UpdatedAt: ts}
	states := []string{
		``, `{}`, `null`, ` { "b" : [ 1 , 2 ] , "a" : { "x" : "<&>" } } `,
		`{"a":1,"a":2}`, `{"db":"not the db","sequence_number":"x","deleted":true}`,
		`{"\u0061b":1,"a\"b":2,"ü":3,"z":"\u00fc\n"}`, `{"Db":"x","DELETED":"yes","Sequence_Number":"s"}`,
		`[]`, `1`, `"s"`, `{`, `{"a":1}x`, `{"a":1} {}`, `{"a":}`, `   `,
	}
	for _, del := range []bool{false, true} {
		for _, st := range states {
			t.Run(st, func(t *testing.T) {
				mm := m
				mm.Deleted = del
				checkDocument(t, mm, st)
			})
		}
	}
	t.Run("bytes", func(t *testing.T) {
		got, err := readmodel.Document(m, json.RawMessage(`{ "z": 1, "a": [ 1, {"k": null} ], "db": "x", "z": 2 }`))
		want := `{"a":[1,{"k":null}],"class":"orders","created_at":"2026-11-21T10:00:00.123Z","db":"shop","deleted":false,` +
			`"event_id":"e","instance_id":"1","sequence_number":3,"updated_at":"2026-11-21T10:00:00.123Z","z":2}`
		if err != nil || string(got) != want {
			t.Errorf("Document = %s, %v; want %s", got, err, want)
		}
	})
	t.Run("builder reused", func(t *testing.T) {
		var b readmodel.DocBuilder
		var dst []byte
		for i, st := range []string{`{"a":1,"b":"x"}`, `{"c":true}`, `{"a":1,"b":"x"}`} {
			var err error
			start := len(dst)
			if dst, err = b.Append(dst, m, json.RawMessage(st)); err != nil {
				t.Fatal(err)
			}
			want, _ := readmodel.Document(m, json.RawMessage(st))
			if !bytes.Equal(dst[start:], want) {
				t.Errorf("document %d appended %s, want %s", i, dst[start:], want)
			}
			gm, gs, err := b.Split(want)
			if err != nil || gm != m || !sameJSON(t, gs, []byte(st)) {
				t.Errorf("split %d: %+v %s %v", i, gm, gs, err)
			}
		}
	})
}

func FuzzDocument(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":{"c":[1,2]}}`, `{"db":"x","a":"<>"}`, `null`, `{"\u00e9":1,"é":2}`, `{"a":1,"a":2}`} {
		f.Add("shop", "orders", "1", int64(3), s, false)
	}
	f.Fuzz(func(t *testing.T, db, class, id string, seq int64, state string, deleted bool) {
		// The runtime's parse step refuses invalid text (lone surrogates,
		// invalid UTF-8) before a document is built; encoding/json
		// mangled it in other places than jsontext does.
		for _, s := range []string{db, class, id, state} {
			if !utf8.ValidString(s) || strings.Contains(strings.ToLower(s), `\ud`) {
				return // not an input the runtime builds a document from
			}
		}
		m := readmodel.Meta{DB: db, Class: class, InstanceID: id, SequenceNumber: seq, EventID: "e", Deleted: deleted,
			CreatedAt: envelope.NewTimestamp(time.Unix(seq%1e9, 0))}
		checkDocument(t, m, state)
	})
}

// BenchmarkDocument counts the work of building and splitting one instance
// document of a small state, the one-pass DocBuilder (reused, as a bulk or
// an _mget reuses it; and new for each, as Document) against the
// encoding/json maps it replaced (v1Document, v1Split). Run with
// -benchmem: allocations per document are the figure, not the time.
func BenchmarkDocument(b *testing.B) {
	ts := envelope.NewTimestamp(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	m := readmodel.Meta{DB: "shop", Class: "orders", InstanceID: "o-1", SequenceNumber: 7, EventID: "0193d0c1-7f4e-7000-8000-000000000001", CreatedAt: ts, UpdatedAt: ts}
	state := json.RawMessage(`{"customer_id":"c-17","total":42.5,"items":[{"sku":"a","qty":2},{"sku":"b","qty":1}],"note":"gift"}`)
	doc, err := readmodel.Document(m, state)
	if err != nil {
		b.Fatal(err)
	}
	var db readmodel.DocBuilder
	var dst []byte
	for _, bc := range []struct {
		name string
		f    func() error
	}{
		{"build/encoding-json-maps", func() error { _, err := v1Document(m, state); return err }},
		{"build/Document", func() error { _, err := readmodel.Document(m, state); return err }},
		{"build/DocBuilder", func() error { var err error; dst, err = db.Append(dst[:0], m, state); return err }},
		{"split/encoding-json-maps", func() error { _, _, err := v1Split(doc); return err }},
		{"split/SplitDocument", func() error { _, _, err := readmodel.SplitDocument(doc); return err }},
		{"split/DocBuilder", func() error { _, _, err := db.Split(doc); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
