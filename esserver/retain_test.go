package esserver_test

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/esserver"
)

// TestStoredDocumentsOwnTheirMemory checks that a stored document keeps
// alive about its own size and not the request it came in: the server
// takes a _bulk body in one buffer and parses it without copying every
// string, so a document that kept a slice of that buffer (its source or a
// string of its parsed form) would keep the whole body alive for as long
// as it is the live version. It sends bulks of about 1 MiB, overwrites
// all but one document of each with small writes, collects and bounds the
// heap's growth by the live documents' sizes: retention would be about
// bulks × 1 MiB, several times the bound.
func TestStoredDocumentsOwnTheirMemory(t *testing.T) {
	const (
		bulks   = 32
		perBulk = 32
		padSize = 32 << 10 // bytes of one document's padding field
		keep    = perBulk / 2
	)
	pad := strings.Repeat("x", padSize)
	cases := []struct {
		name string
		// line returns the action and source lines of document id.
		line func(id string) string
		// overwrite sends the small writes replacing ids.
		overwrite func(t *testing.T, h http.Handler, ids []string)
	}{
		{
			name: "bulk index, overwritten by PUT _doc",
			line: func(id string) string {
				return `{"index":{"_index":"r","_id":"` + id + `"}}` + "\n" + `{"n":"` + id + `","pad":"` + pad + `"}` + "\n"
			},
			overwrite: putEach,
		},
		{
			name: "bulk create, overwritten by a small bulk",
			line: func(id string) string {
				return `{"create":{"_index":"r","_id":"` + id + `"}}` + "\n" + `{"n":"` + id + `","pad":"` + pad + `"}` + "\n"
			},
			overwrite: bulkEach,
		},
		{
			name: "bulk index with escapes and external versions",
			line: func(id string) string {
				return `{"index":{"_index":"r","_id":"` + id + `","version":5,"version_type":"external"}}` + "\n" +
					`{"n":"` + id + `","q":"a\"b","pad":"` + pad + `"}` + "\n"
			},
			overwrite: putEach,
		},
		{
			// A dynamic mapping's field name outlives the document that
			// brought it.
			name: "bulk index, a new field per document",
			line: func(id string) string {
				return `{"index":{"_index":"r","_id":"` + id + `"}}` + "\n" + `{"n":"` + id + `","k_` + id + `":1,"pad":"` + pad + `"}` + "\n"
			},
			overwrite: putEach,
		},
		{
			name: "bulk update doc_as_upsert, overwritten by PUT _doc",
			line: func(id string) string {
				return `{"update":{"_index":"r","_id":"` + id + `"}}` + "\n" + `{"doc":{"n":"` + id + `","pad":"` + pad + `"},"doc_as_upsert":true}` + "\n"
			},
			overwrite: putEach,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := esserver.New()
			// A new field per document passes the default limit of 1000 fields.
			serveOK(t, srv, http.MethodPut, "/r", []byte(`{"settings":{"number_of_shards":1,"index.mapping.total_fields.limit":4000}}`))
			before := liveHeap()
			sent := 0
			var overwritten []string
			for b := range bulks {
				var body strings.Builder
				for d := range perBulk {
					id := fmt.Sprintf("b%d-d%d", b, d)
					body.WriteString(tc.line(id))
					if d != keep {
						overwritten = append(overwritten, id)
					}
				}
				sent += body.Len()
				rec := serveOK(t, srv, http.MethodPost, "/_bulk", []byte(body.String()))
				if bytes.Contains(rec.Body.Bytes(), []byte(`"errors":true`)) {
					t.Fatalf("bulk item errors: %.300s", rec.Body.String())
				}
			}
			tc.overwrite(t, srv, overwritten)
			after := liveHeap()
			runtime.KeepAlive(srv)

			// The live documents: one padded document per bulk and the
			// small ones. Each may be held twice (source and parsed
			// strings) plus a map and bookkeeping; 4 MiB for the rest.
			liveDocs := bulks + len(overwritten)
			liveBytes := bulks*(padSize+64) + len(overwritten)*64
			bound := 2*liveBytes + liveDocs*1024 + 4<<20
			growth := int64(after) - int64(before)
			t.Logf("sent %d bulks of %d KiB; heap grew %d KiB, bound %d KiB (live documents %d KiB)",
				bulks, sent/bulks>>10, growth>>10, bound>>10, liveBytes>>10)
			if growth > int64(bound) {
				t.Errorf("heap grew %d KiB for %d live documents of %d KiB: the server keeps requests or replaced documents alive (bound %d KiB, sent %d KiB)",
					growth>>10, liveDocs, liveBytes>>10, bound>>10, sent>>10)
			}
		})
	}
}

// liveHeap returns the bytes of live heap objects after a collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func putEach(t *testing.T, h http.Handler, ids []string) {
	t.Helper()
	for _, id := range ids {
		serveOK(t, h, http.MethodPut, "/r/_doc/"+id+"?version=9&version_type=external", []byte(`{"n":"`+id+`"}`))
	}
}

func bulkEach(t *testing.T, h http.Handler, ids []string) {
	t.Helper()
	for len(ids) > 0 {
		n := min(len(ids), 31)
		var body strings.Builder
		for _, id := range ids[:n] {
			body.WriteString(`{"index":{"_index":"r","_id":"` + id + `"}}` + "\n" + `{"n":"` + id + `"}` + "\n")
		}
		ids = ids[n:]
		rec := serveOK(t, h, http.MethodPost, "/_bulk", []byte(body.String()))
		if bytes.Contains(rec.Body.Bytes(), []byte(`"errors":true`)) {
			t.Fatalf("bulk item errors: %.300s", rec.Body.String())
		}
	}
}

// TestUpdatedDocumentsOwnTheirMemory checks the same for partial updates:
// the merged document's fields must not slice the update request, which
// may carry far more than they keep (here an upsert of 1 MiB each, unused
// because the documents exist). Each case updates 32 small documents once
// with a request of about 1 MiB and bounds the heap's growth by a few MiB:
// a document that kept its request alive would hold 32 MiB.
func TestUpdatedDocumentsOwnTheirMemory(t *testing.T) {
	const docs = 32
	pad := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		name   string
		update func(t *testing.T, h http.Handler, id string)
	}{
		{"POST _update", func(t *testing.T, h http.Handler, id string) {
			serveOK(t, h, http.MethodPost, "/r/_update/"+id, []byte(`{"doc":{"n":"v2-`+id+`"},"upsert":{"pad":"`+pad+`"}}`))
		}},
		{"bulk update", func(t *testing.T, h http.Handler, id string) {
			rec := serveOK(t, h, http.MethodPost, "/_bulk", []byte(`{"update":{"_index":"r","_id":"`+id+`"}}`+"\n"+
				`{"doc":{"n":"v2-`+id+`"},"upsert":{"pad":"`+pad+`"}}`+"\n"))
			if bytes.Contains(rec.Body.Bytes(), []byte(`"errors":true`)) {
				t.Fatalf("bulk item errors: %.300s", rec.Body.String())
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := esserver.New()
			serveOK(t, srv, http.MethodPut, "/r", []byte(`{"settings":{"number_of_shards":1}}`))
			ids := make([]string, docs)
			for i := range ids {
				ids[i] = fmt.Sprintf("u%d", i)
			}
			putEach(t, srv, ids)
			before := liveHeap()
			for _, id := range ids {
				tc.update(t, srv, id)
			}
			after := liveHeap()
			runtime.KeepAlive(srv)
			const bound = 4 << 20
			growth := int64(after) - int64(before)
			t.Logf("updated %d documents with requests of 1 MiB; heap grew %d KiB, bound %d KiB", docs, growth>>10, bound>>10)
			if growth > bound {
				t.Errorf("heap grew %d KiB for %d small documents: an updated document keeps its request alive (bound %d KiB)", growth>>10, docs, bound>>10)
			}
		})
	}
}

// TestIndexDefinitionsOwnTheirMemory checks the same for what an index
// definition keeps (mappings, settings, aliases and their filters): each
// case sends 32 small definitions in requests of about 1 MiB (the rest is
// whitespace, which JSON allows between tokens) and bounds the heap's
// growth by a few MiB: a definition that sliced its request would keep all
// 32 MiB alive.
func TestIndexDefinitionsOwnTheirMemory(t *testing.T) {
	const n = 32
	pad := strings.Repeat(" ", 1<<20)
	cases := []struct {
		name string
		send func(t *testing.T, h http.Handler, i int)
	}{
		{"PUT index", func(t *testing.T, h http.Handler, i int) {
			serveOK(t, h, http.MethodPut, fmt.Sprintf("/i%d", i), []byte(`{"mappings":{"properties":{"k":{"type":"keyword"}}},`+pad+
				`"settings":{"index":{"number_of_shards":1,"analysis":{"analyzer":{"a":{"type":"standard"}}}}},"aliases":{"al":{"filter":{"term":{"k":"x"}}}}}`))
		}},
		{"PUT _mapping", func(t *testing.T, h http.Handler, i int) {
			serveOK(t, h, http.MethodPut, "/r/_mapping", []byte(fmt.Sprintf(`{"properties":{"f%d":{"type":"keyword"}}}`, i)+pad))
		}},
		{"PUT _settings", func(t *testing.T, h http.Handler, i int) {
			serveOK(t, h, http.MethodPut, "/r/_settings", []byte(fmt.Sprintf(`{"index":{"max_result_window":%d,"x_%d":"v"}}`, 10000+i, i)+pad))
		}},
		{"PUT _alias", func(t *testing.T, h http.Handler, i int) {
			serveOK(t, h, http.MethodPut, fmt.Sprintf("/r/_alias/a%d", i), []byte(`{"filter":{"term":{"k":"x"}}}`+pad))
		}},
		{"POST _aliases", func(t *testing.T, h http.Handler, i int) {
			serveOK(t, h, http.MethodPost, "/_aliases", []byte(fmt.Sprintf(`{"actions":[{"add":{"index":"r","alias":"b%d","filter":{"term":{"k":"x"}}}}]}`, i)+pad))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := esserver.New()
			serveOK(t, srv, http.MethodPut, "/r", []byte(`{"settings":{"number_of_shards":1}}`))
			before := liveHeap()
			for i := range n {
				tc.send(t, srv, i)
			}
			after := liveHeap()
			runtime.KeepAlive(srv)
			const bound = 4 << 20
			growth := int64(after) - int64(before)
			t.Logf("sent %d definitions in requests of 1 MiB; heap grew %d KiB, bound %d KiB", n, growth>>10, bound>>10)
			if growth > bound {
				t.Errorf("heap grew %d KiB for %d small definitions: an index definition keeps its request alive (bound %d KiB)", growth>>10, n, bound>>10)
			}
		})
	}
}
