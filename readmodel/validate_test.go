package readmodel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/elastic/go-elasticsearch/v8"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/readmodel"
)

// badData are states an instance document cannot hold, with the rule and
// the field path ValidateData must report.
var badData = []struct {
	name, data, rule, field string
}{
	{"_id", `{"_id":"x"}`, readmodel.RuleMetadataField, "data._id"},
	{"_index", `{"a":1,"_index":"other"}`, readmodel.RuleMetadataField, "data._index"},
	{"_source", `{"_source":{}}`, readmodel.RuleMetadataField, "data._source"},
	{"_routing", `{"_routing":"r"}`, readmodel.RuleMetadataField, "data._routing"},
	{"_version", `{"_version":3}`, readmodel.RuleMetadataField, "data._version"},
	{"_seq_no", `{"_seq_no":3}`, readmodel.RuleMetadataField, "data._seq_no"},
	{"_primary_term", `{"_primary_term":1}`, readmodel.RuleMetadataField, "data._primary_term"},
	{"_field_names", `{"_field_names":[]}`, readmodel.RuleMetadataField, "data._field_names"},
	{"_ignored", `{"_ignored":"x"}`, readmodel.RuleMetadataField, "data._ignored"},
	{"_doc_count", `{"_doc_count":1}`, readmodel.RuleMetadataField, "data._doc_count"},
	{"_tier", `{"_tier":"hot"}`, readmodel.RuleMetadataField, "data._tier"},
	{"_type", `{"_type":"doc"}`, readmodel.RuleMetadataField, "data._type"},
	{"_tsid", `{"_tsid":"x"}`, readmodel.RuleMetadataField, "data._tsid"},
	{"_id as dotted prefix", `{"_id.x":1}`, readmodel.RuleMetadataField, "data._id.x"},
	{"empty key", `{"":1}`, readmodel.RuleEmptyKey, "data."},
	{"nested empty key", `{"a":{"b":{"":1}}}`, readmodel.RuleEmptyKey, "data.a.b."},
	{"empty key in array element", `{"a":[1,{"ok":1},{"":2}]}`, readmodel.RuleEmptyKey, "data.a[2]."},
	{"blank key", `{" ":1}`, readmodel.RuleBlankKey, "data. "},
	{"tab key", `{"\t\n":1}`, readmodel.RuleBlankKey, "data.\t\n"},
	{"nested blank key", `{"a":[[{"  ":1}]]}`, readmodel.RuleBlankKey, "data.a[0][0].  "},
	{"blank segment", `{"a. .b":1}`, readmodel.RuleBlankKey, "data.a. .b"},
	{"only dot", `{".":1}`, readmodel.RuleEmptySegment, "data.."},
	{"only dots", `{"...":1}`, readmodel.RuleEmptySegment, "data...."},
	{"leading dot", `{".a":1}`, readmodel.RuleEmptySegment, "data..a"},
	{"trailing dot", `{"a.":1}`, readmodel.RuleEmptySegment, "data.a."},
	{"double dot", `{"a..b":1}`, readmodel.RuleEmptySegment, "data.a..b"},
	{"nested trailing dot", `{"x":{"y.":1}}`, readmodel.RuleEmptySegment, "data.x.y."},
	{"db", `{"db":"other"}`, readmodel.RuleReservedField, "data.db"},
	{"class", `{"class":"c"}`, readmodel.RuleReservedField, "data.class"},
	{"instance_id", `{"instance_id":"i"}`, readmodel.RuleReservedField, "data.instance_id"},
	{"sequence_number", `{"sequence_number":9}`, readmodel.RuleReservedField, "data.sequence_number"},
	{"event_id", `{"event_id":"e"}`, readmodel.RuleReservedField, "data.event_id"},
	{"created_at", `{"created_at":"x"}`, readmodel.RuleReservedField, "data.created_at"},
	{"updated_at", `{"updated_at":"x"}`, readmodel.RuleReservedField, "data.updated_at"},
	{"deleted", `{"deleted":true}`, readmodel.RuleReservedField, "data.deleted"},
	{"reserved as dotted prefix", `{"db.name":"x"}`, readmodel.RuleReservedField, "data.db.name"},
	{"deleted as dotted prefix", `{"deleted.at":1}`, readmodel.RuleReservedField, "data.deleted.at"},
	{"first in document order", `{"ok":1,"a..b":1,"_id":1}`, readmodel.RuleEmptySegment, "data.a..b"},
	{"not an object", `[1]`, readmodel.RuleNotObject, "data"},
	{"string", `"x"`, readmodel.RuleNotObject, "data"},
}

// goodData are states that must stay accepted.
var goodData = []string{
	`{}`, `{"a":1}`, `{"a.b":1}`, `{"a":{"_id":1,"db":2,"deleted":false}}`, `{"_private":1}`, `{"_":1}`, `{"__id":1}`,
	`{"id":1,"database":"x","class_name":"c","dbx":1}`, `{"x":[{"_source":1},{"_id":2}]}`, `{"é":1,"🚀.x":{"y":[1,2]}}`,
	`{"a":{"b.c":{"d":null}}}`, `{"a b":1}`, `{" a ":1}`, `{"a":[[],[{}]],"b":null}`,
}

func TestValidateData(t *testing.T) {
	for _, tc := range badData {
		t.Run(tc.name, func(t *testing.T) {
			err := readmodel.ValidateData([]byte(tc.data))
			var de *readmodel.DataError
			if !errors.As(err, &de) {
				t.Fatalf("ValidateData(%s) = %v, want a *DataError", tc.data, err)
			}
			if de.Rule != tc.rule || de.Field != tc.field || de.Reason == "" || de.HTTPStatus() != 422 {
				t.Fatalf("ValidateData(%s): rule %q field %q (%v), want rule %q field %q", tc.data, de.Rule, de.Field, err, tc.rule, tc.field)
			}
		})
	}
	for _, d := range goodData {
		if err := readmodel.ValidateData([]byte(d)); err != nil {
			t.Errorf("ValidateData(%s): %v", d, err)
		}
	}
}

// TestValidateMergePatch: a patch member set to null removes its key and
// is not checked; every other member is held to ValidateData's rules.
func TestValidateMergePatch(t *testing.T) {
	for _, tc := range badData {
		if tc.rule == readmodel.RuleNotObject {
			continue
		}
		if err := readmodel.ValidateMergePatch([]byte(tc.data)); err == nil {
			t.Errorf("ValidateMergePatch(%s) accepted", tc.data)
		}
	}
	for _, p := range []string{`{"_id":null}`, `{"db":null,"a":1}`, `{"":null}`, `{"a":{"..":null}}`} {
		if err := readmodel.ValidateMergePatch([]byte(p)); err != nil {
			t.Errorf("ValidateMergePatch(%s): %v", p, err)
		}
	}
	if err := readmodel.ValidateMergePatch([]byte(`{"a":{"_x":1,"b.":2}}`)); err == nil {
		t.Error("nested trailing dot in a patch accepted")
	}
}

// TestValidateDataAgreesWithElasticsearch writes every state as an
// instance document to the ES test server: what Elasticsearch refuses,
// ValidateData refuses, and what ValidateData accepts is stored.
func TestValidateDataAgreesWithElasticsearch(t *testing.T) {
	srv := httptest.NewServer(esserver.New())
	defer srv.Close()
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var states []string
	for _, tc := range badData {
		if tc.rule != readmodel.RuleNotObject {
			states = append(states, tc.data)
		}
	}
	states = append(states, goodData...)
	for i, st := range states {
		// One index per state: a mapping one state adds must not decide
		// another's fate (that is a mapping conflict, not a key rule).
		db := fmt.Sprint("v", i)
		n, err := readmodel.EnsureIndex(ctx, es, "sluice_", db, 1)
		if err != nil {
			t.Fatal(err)
		}
		m := readmodel.Meta{DB: db, Class: "orders", InstanceID: "1", SequenceNumber: 1, EventID: fmt.Sprint("e", i)}
		_, werr := readmodel.WriteInstance(ctx, es, n, m, json.RawMessage(st))
		verr := readmodel.ValidateData([]byte(st))
		if werr != nil && verr == nil {
			t.Errorf("Elasticsearch refused %s (%v) but ValidateData accepted it", st, werr)
		}
		if verr == nil && werr != nil {
			t.Errorf("valid state %s not stored: %v", st, werr)
		}
		if werr != nil && !strings.Contains(werr.Error(), "400") {
			t.Errorf("state %s: %v, want a 400", st, werr)
		}
	}
}

// TestDataErrorNamesKeyAsAPIDoes: the instance worker's rejection reason
// (ReasonInvalidData + ": " + err.Error()) names a refused key with the
// path the API's 422 field uses: data[""], not "data." — a key the dotted
// path cannot show is a JSON string in brackets after its parent's path.
func TestDataErrorNamesKeyAsAPIDoes(t *testing.T) {
	for _, tc := range []struct {
		name, data, path string
	}{
		{"empty key", `{"":1}`, `data[""]`},
		{"nested empty key", `{"a":{"":1}}`, `data.a[""]`},
		{"empty key in an array", `{"a":[{"ok":1},{"":2}]}`, `data.a[1][""]`},
		{"blank key", `{"  ":1}`, `data["  "]`},
		{"dot", `{".":1}`, `data["."]`},
		{"trailing dot", `{"x":{"y.":1}}`, `data.x["y."]`},
		{"metadata field stays dotted", `{"_id":1}`, `data._id`},
		{"reserved dotted key stays dotted", `{"db.name":1}`, `data.db.name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var de *readmodel.DataError
			if err := readmodel.ValidateData([]byte(tc.data)); !errors.As(err, &de) {
				t.Fatalf("ValidateData(%s) = %v, want a *DataError", tc.data, err)
			}
			if de.Path() != tc.path {
				t.Fatalf("Path() = %q, want %q", de.Path(), tc.path)
			}
			if want := fmt.Sprintf("data key %q at %s: ", de.Key, tc.path); !strings.HasPrefix(de.Error(), want) {
				t.Fatalf("Error() = %q, want it to start %q", de.Error(), want)
			}
		})
	}
}
