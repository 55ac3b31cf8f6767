package api

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 description of the API, served at
// /openapi.json (docs/api.md describes the same contract in prose).
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns a copy of the OpenAPI 3.1 document served at /openapi.json.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openAPI)
}
