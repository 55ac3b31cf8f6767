package projectionworker

import "testing"

// encodeItem compacts (and so checks) a document unless the projection
// says it encoded it compactly itself (Op.Compact).
func TestEncodeItem(t *testing.T) {
	cases := []struct {
		name    string
		op      Op
		want    string
		wantErr bool
	}{
		{"indented is compacted", Op{ID: "a", Doc: []byte("{\n  \"x\": 1\n}")}, `{"index":{"_index":"ix","_id":"a"}}` + "\n" + `{"x":1}` + "\n", false},
		{"invalid is refused", Op{ID: "a", Doc: []byte(`{"x":`)}, "", true},
		{"versioned create", Op{ID: "b", Create: true, Version: 7, Doc: []byte(`{}`)}, `{"create":{"_index":"ix","_id":"b","version":7,"version_type":"external"}}` + "\n{}\n", false},
		{"id quoted as JSON", Op{ID: "a\"b\\c\n<ü>", Doc: []byte(`{}`), Compact: true}, `{"index":{"_index":"ix","_id":"a\"b\\c\n<ü>"}}` + "\n{}\n", false},
		{"compact is copied as it is", Op{ID: "c", Version: 2, Doc: []byte(`{"x":1,"y":"a b"}`), Compact: true}, `{"index":{"_index":"ix","_id":"c","version":2,"version_type":"external"}}` + "\n" + `{"x":1,"y":"a b"}` + "\n", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := encodeItem(BulkItem{Index: "ix", Op: tc.op})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if err == nil && string(got) != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
