package admin_test

import (
	"net/http"
	"testing"
)

// A refused key names the member at fault by its place, a member of a
// grant with the grant's index (docs/security.md: grants[i]).
func TestKeyCreateNamesTheGrantMember(t *testing.T) {
	srv, _, _ := keyServer(t)
	tests := []struct {
		name, body, field string
	}{
		{"ops not an array", `{"principal":"p","grants":[{"ops":"read","resource":"*"}]}`, "grants[0].ops"},
		{"resource not a string", `{"principal":"p","grants":[{"ops":["read"],"resource":"*"},{"ops":["read"],"resource":5}]}`, "grants[1].resource"},
		{"unknown member of a grant", `{"principal":"p","grants":[{"ops":["read"],"resource":"*","x":1}]}`, "grants[0].x"},
		{"a grant not an object", `{"principal":"p","grants":["read=*"]}`, "grants[0]"},
		{"unknown operation", `{"principal":"p","grants":[{"ops":["fly"],"resource":"*"}]}`, "grants[0]"},
		{"null grant", `{"principal":"p","grants":[null]}`, "grants[0]"},
		{"grants not an array", `{"principal":"p","grants":{}}`, "grants"},
		{"unknown member", `{"principal":"p","grant":[]}`, "grant"},
		{"principal not a string", `{"principal":1,"grants":[{"ops":["read"],"resource":"*"}]}`, "principal"},
		{"admin_act on a db", `{"principal":"p","grants":[{"ops":["read"],"resource":"*"},{"ops":["admin_act"],"resource":"db:orders"}]}`, "grants[1]"},
		{"admin_act six times on a db", `{"principal":"p","grants":[{"ops":["admin_act","admin_act","admin_act","admin_act","admin_act","admin_act"],"resource":"db:orders"}]}`, "grants[0]"},
		{"admin_read on a stream", `{"principal":"p","grants":[{"ops":["admin_read","read"],"resource":"stream:Order"}]}`, "grants[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if code, out := serve(srv, "POST", "/admin/v1/auth/keys", opToken, tc.body); code != http.StatusBadRequest || out["field"] != tc.field {
				t.Fatalf("%d %v, want 400 naming %q", code, out, tc.field)
			}
		})
	}
	if code, out := serve(srv, "POST", "/admin/v1/auth/keys", opToken, `{"principal":"p","grants":[{"ops":["read"],"resource":"*"}]}`); code != http.StatusCreated {
		t.Fatalf("a good key: %d %v", code, out)
	}
}
