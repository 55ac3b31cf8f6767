package readmodel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8"

	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/esserver"
	"github.com/sluicehq/sluice/shared/readmodel"
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

// Instance ids may contain '/', '%', '?', '#', spaces and non-ASCII (SPEC §4);
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
