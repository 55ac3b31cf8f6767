package readmodel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
)

func TestNames(t *testing.T) {
	got := readmodel.InstanceNames("sluice_", "shop", 0)
	want := readmodel.Names{Index: "sluice_shop_instances_v1", ReadAlias: "sluice_shop_instances", WriteAlias: "sluice_shop_instances_write"}
	if got != want {
		t.Errorf("names %+v, want %+v", got, want)
	}
}

func TestDocumentRoundTrip(t *testing.T) {
	ts := envelope.NewTimestamp(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	tests := []struct {
		name      string
		meta      readmodel.Meta
		state     string
		wantState string
	}{
		{"live", readmodel.Meta{DB: "shop", Class: "orders", InstanceID: "1", SequenceNumber: 3, EventID: "e", CreatedAt: ts, UpdatedAt: ts}, `{"a":1,"b":{"c":[1,2]}}`, `{"a":1,"b":{"c":[1,2]}}`},
		{"tombstone drops data", readmodel.Meta{DB: "shop", Class: "orders", InstanceID: "1", SequenceNumber: 4, Deleted: true}, `{"a":1}`, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := readmodel.Document(tt.meta, json.RawMessage(tt.state))
			if err != nil {
				t.Fatal(err)
			}
			m, st, err := readmodel.SplitDocument(b)
			if err != nil {
				t.Fatal(err)
			}
			if m != tt.meta || string(st) != tt.wantState {
				t.Errorf("got %+v %s, want %+v %s", m, st, tt.meta, tt.wantState)
			}
		})
	}
}

func TestEnsureWriteGet(t *testing.T) {
	srv := httptest.NewServer(esserver.New())
	defer srv.Close()
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n, err := readmodel.EnsureIndex(ctx, es, "sluice_", "shop", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readmodel.EnsureIndex(ctx, es, "sluice_", "shop", 1); err != nil {
		t.Fatalf("second EnsureIndex: %v", err)
	}
	m := readmodel.Meta{DB: "shop", Class: "orders", InstanceID: "1", SequenceNumber: 2, EventID: "e2"}
	steps := []struct {
		seq  int64
		want readmodel.WriteResult
	}{{2, readmodel.Written}, {2, readmodel.AlreadyApplied}, {1, readmodel.AlreadyApplied}, {3, readmodel.Written}}
	for _, s := range steps {
		m.SequenceNumber = s.seq
		got, err := readmodel.WriteInstance(ctx, es, n, m, json.RawMessage(`{"v":1}`))
		if err != nil || got != s.want {
			t.Errorf("write seq %d: %v %v, want %v", s.seq, got, err, s.want)
		}
	}
	gm, st, err := readmodel.GetInstance(ctx, es, n, "orders", "1")
	if err != nil || gm.SequenceNumber != 3 || !reflect.DeepEqual(string(st), `{"v":1}`) {
		t.Errorf("get: %+v %s %v", gm, st, err)
	}
	if _, _, err := readmodel.GetInstance(ctx, es, n, "customers", "1"); err != readmodel.ErrNotFound {
		t.Errorf("other class: %v, want ErrNotFound", err)
	}
}

// Instance ids may contain '/', '%', '?', '#', spaces and non-ASCII (docs/architecture.md#aggregate-identity);
// each must reach Elasticsearch as one _id and come back unchanged.
func TestWriteGetIDsWithSpecialCharacters(t *testing.T) {
	srv := httptest.NewServer(esserver.New())
	defer srv.Close()
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n, err := readmodel.EnsureIndex(ctx, es, "sluice_", "shop", 1)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a/b", "../x", "50%", "q?x=1", "h#1", "with space", "é", "a:b:c", "a/b/"}
	for i, id := range ids {
		m := readmodel.Meta{DB: "shop", Class: "orders", InstanceID: id, SequenceNumber: 1, EventID: fmt.Sprint("e", i)}
		if got, err := readmodel.WriteInstance(ctx, es, n, m, json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))); err != nil || got != readmodel.Written {
			t.Fatalf("write %q: %v %v", id, got, err)
		}
	}
	for i, id := range ids {
		gm, st, err := readmodel.GetInstance(ctx, es, n, "orders", id)
		if err != nil || gm.InstanceID != id || string(st) != fmt.Sprintf(`{"i":%d}`, i) {
			t.Errorf("get %q: %+v %s %v", id, gm, st, err)
		}
	}
}

// TestBatchWriteGet: WriteInstances and GetInstances do per item what
// WriteInstance and GetInstance do for one document (versioned writes, 409 =
// AlreadyApplied, missing document or index = ErrNotFound), in one request
// each, with every answer at the index of its request.
func TestBatchWriteGet(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(esserver.New())
	defer srv.Close()
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	shop, err := readmodel.EnsureIndex(ctx, es, "sluice_", "shop", 1)
	if err != nil {
		t.Fatal(err)
	}
	other := readmodel.InstanceNames("sluice_", "nowhere", 1) // no index, no alias
	ts := envelope.NewTimestamp(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	meta := func(class, id string, seq int64, deleted bool) readmodel.Meta {
		return readmodel.Meta{DB: "shop", Class: class, InstanceID: id, SequenceNumber: seq, EventID: fmt.Sprintf("e%d", seq), CreatedAt: ts, UpdatedAt: ts, Deleted: deleted}
	}
	if _, err := readmodel.WriteInstances(ctx, es, []readmodel.Write{{Names: shop, Meta: meta("orders", "1", 2, false), State: json.RawMessage(`{"n":2}`)}}); err != nil {
		t.Fatal(err)
	}

	writes := []struct {
		name  string
		w     readmodel.Write
		want  readmodel.WriteResult
		isErr bool
	}{
		{"newer version", readmodel.Write{Names: shop, Meta: meta("orders", "1", 3, false), State: json.RawMessage(`{"n":3}`)}, readmodel.Written, false},
		{"same id other class", readmodel.Write{Names: shop, Meta: meta("customers", "1", 1, false), State: json.RawMessage(`{"c":1}`)}, readmodel.Written, false},
		{"stale version", readmodel.Write{Names: shop, Meta: meta("orders", "1", 1, false), State: json.RawMessage(`{"n":1}`)}, readmodel.AlreadyApplied, false},
		{"tombstone", readmodel.Write{Names: shop, Meta: meta("orders", "gone", 2, true), State: json.RawMessage(`{"x":1}`)}, readmodel.Written, false},
		{"state not an object", readmodel.Write{Names: shop, Meta: meta("orders", "bad", 1, false), State: json.RawMessage(`[1]`)}, 0, true},
		{"missing write alias", readmodel.Write{Names: other, Meta: meta("orders", "1", 1, false), State: json.RawMessage(`{}`)}, 0, true},
	}
	ws := make([]readmodel.Write, len(writes))
	for i, w := range writes {
		ws[i] = w.w
	}
	res, err := readmodel.WriteInstances(ctx, es, ws)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range writes {
		if res[i].Result != w.want || (res[i].Err != nil) != w.isErr {
			t.Errorf("%s: result %v err %v, want %v (error %v)", w.name, res[i].Result, res[i].Err, w.want, w.isErr)
		}
	}
	var se *readmodel.StatusError
	if !errors.As(res[5].Err, &se) || se.Status != 404 {
		t.Errorf("missing write alias: %v, want a 404 StatusError", res[5].Err)
	}

	gets := []struct {
		name    string
		ref     readmodel.Ref
		wantSeq int64
		state   string
		deleted bool
		missing bool
	}{
		{"current", readmodel.Ref{Names: shop, Class: "orders", InstanceID: "1"}, 3, `{"n":3}`, false, false},
		{"other class", readmodel.Ref{Names: shop, Class: "customers", InstanceID: "1"}, 1, `{"c":1}`, false, false},
		{"tombstone", readmodel.Ref{Names: shop, Class: "orders", InstanceID: "gone"}, 2, `{}`, true, false},
		{"no document", readmodel.Ref{Names: shop, Class: "orders", InstanceID: "nope"}, 0, "", false, true},
		{"no index", readmodel.Ref{Names: other, Class: "orders", InstanceID: "1"}, 0, "", false, true},
	}
	refs := make([]readmodel.Ref, len(gets))
	for i, g := range gets {
		refs[i] = g.ref
	}
	got, err := readmodel.GetInstances(ctx, es, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range gets {
		r := got[i]
		if g.missing {
			if !errors.Is(r.Err, readmodel.ErrNotFound) {
				t.Errorf("%s: err %v, want ErrNotFound", g.name, r.Err)
			}
			continue
		}
		if r.Err != nil || r.Meta.SequenceNumber != g.wantSeq || string(r.State) != g.state || r.Meta.Deleted != g.deleted {
			t.Errorf("%s: %+v %s %v", g.name, r.Meta, r.State, r.Err)
		}
	}
	if out, err := readmodel.GetInstances(ctx, es, nil); err != nil || len(out) != 0 {
		t.Errorf("empty batch: %v %v", out, err)
	}
	// Mget, under GetInstances and the stateful projections' round reads,
	// answers each document with its version, or not found, or the item's
	// own error.
	raw, err := readmodel.Mget(ctx, es, []readmodel.DocAddr{
		{Index: shop.WriteAlias, ID: readmodel.DocumentID("orders", "1")},
		{Index: shop.WriteAlias, ID: readmodel.DocumentID("orders", "nope")},
		{Index: other.WriteAlias, ID: "x"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := raw[0]; !d.Found || d.Version != 3 || d.Err != nil || !strings.Contains(string(d.Source), `"n":3`) {
		t.Errorf("mget current: %+v", d)
	}
	if d := raw[1]; d.Found || d.Err != nil {
		t.Errorf("mget no document: %+v", d)
	}
	if d := raw[2]; d.Err == nil || d.Err.Type != "index_not_found_exception" {
		t.Errorf("mget no index: %+v", d)
	}
	if out, err := readmodel.Mget(ctx, es, nil); err != nil || out != nil {
		t.Errorf("empty mget: %v %v", out, err)
	}
}
