package api

import (
	"bytes"
	"os"
	"testing"
)

// docs/openapi.json is the copy of the served document kept with the docs
// (docs/api.md); `make docs` refreshes it.
func TestOpenAPIDocsCopyMatches(t *testing.T) {
	served, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	kept, err := os.ReadFile("../docs/openapi.json")
	if err != nil {
		t.Fatalf("docs/openapi.json: %v (run `make docs`)", err)
	}
	if !bytes.Equal(served, kept) {
		t.Fatal("docs/openapi.json differs from api/openapi.json: run `make docs`")
	}
}
