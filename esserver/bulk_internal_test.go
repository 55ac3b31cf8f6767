package esserver

import (
	"reflect"
	"testing"
)

// TestScanBulkAction checks that an action line scanBulkAction takes gives
// the writeOp (or the error) the general parser gives, and which lines it
// leaves to the general parser.
func TestScanBulkAction(t *testing.T) {
	cases := []struct {
		name, line string
		fast       bool
	}{
		{"projection worker", `{"index":{"_index":"a_write","_id":"order:o-1","version":7,"version_type":"external","require_alias":true}}`, true},
		{"projector create", `{"create":{"_index":"a","_id":"1"}}`, true},
		{"no id", `{"index":{"_index":"a"}}`, true},
		{"empty id", `{"index":{"_index":"a","_id":""}}`, true},
		{"no index", `{"index":{"_id":"1"}}`, true},
		{"delete cas", `{"delete":{"_index":"a","_id":"1","if_seq_no":3,"if_primary_term":1}}`, true},
		{"update routing", `{"update":{"_index":"a","_id":"1","routing":"r"}}`, true},
		{"require alias false", `{"index":{"_index":"a","require_alias":false}}`, true},
		{"external_gt", `{"index":{"_index":"a","_id":"1","version":2,"version_type":"external_gt"}}`, true},
		{"bad version type", `{"index":{"_index":"a","_id":"1","version":2,"version_type":"nope"}}`, true},
		{"force", `{"index":{"_index":"a","_id":"1","version":2,"version_type":"force"}}`, true},
		{"zero version", `{"index":{"_index":"a","_id":"1","version":0}}`, true},
		{"empty meta", `{"index":{}}`, false},
		{"spaces", `{ "index" : {"_index":"a"} }`, false},
		{"escape", `{"index":{"_index":"a","_id":"x\"y"}}`, false},
		{"duplicate", `{"index":{"_index":"a","_index":"b"}}`, false},
		{"unknown key", `{"index":{"_index":"a","op_type":"create"}}`, false},
		{"unknown action", `{"upsert":{"_index":"a"}}`, false},
		{"negative version", `{"index":{"_index":"a","_id":"1","version":-1}}`, false},
		{"float version", `{"index":{"_index":"a","_id":"1","version":1.0}}`, false},
		{"leading zero", `{"index":{"_index":"a","_id":"1","version":01}}`, false},
		{"string version", `{"index":{"_index":"a","_id":"1","version":"1"}}`, false},
		{"trailing", `{"index":{"_index":"a"}} `, false},
		{"two actions", `{"index":{"_index":"a"},"delete":{}}`, false},
		{"truncated", `{"index":{"_index":"a"`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := scanBulkAction([]byte(tc.line))
			if ok != tc.fast {
				t.Fatalf("scanned %v, want %v", ok, tc.fast)
			}
			if !ok {
				return
			}
			fast := &writeOp{index: "def", versionType: vtInternal, detectNoop: true, action: m.action}
			ferr := m.apply(fast)
			action, meta, err := parseBulkAction([]byte(tc.line), 1)
			if err != nil {
				t.Fatalf("general parser: %v", err.object())
			}
			slow := &writeOp{index: "def", versionType: vtInternal, detectNoop: true, action: action}
			serr := applyBulkMeta(slow, meta, 1)
			if (ferr == nil) != (serr == nil) || (ferr != nil && !reflect.DeepEqual(ferr.body(), serr.body())) {
				t.Fatalf("error %v, general parser %v", ferr, serr)
			}
			if ferr == nil && !reflect.DeepEqual(fast, slow) {
				t.Fatalf("op %+v, general parser %+v", *fast, *slow)
			}
		})
	}
}
