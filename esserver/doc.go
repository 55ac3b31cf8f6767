// Package esserver provides an Elasticsearch-8-compatible, in-memory HTTP
// test server for sluice's tests and for `sluice dev`. It lives in
// internal/ as its own package (docs/esserver.md): the services do not share
// it, `sluice dev` serves it as its development cluster, and nothing outside
// this module may import it.
//
// A *Server is an http.Handler: mount it in-process with net/http/httptest,
// or serve it on a real listener (for example :9200) with ListenAndServe.
// It speaks enough of the Elasticsearch 8 REST API that the official
// github.com/elastic/go-elasticsearch/v8 client works against it unmodified.
//
// Guarantees (each checked by Elasticsearch's own REST YAML tests, see
// docs/esserver.md and yaml_test.go):
//
//   - Every response carries "X-Elastic-Product: Elasticsearch"; GET /
//     reports version 8.15.0 and GET /_cluster/health reports green.
//   - Documents: index/create/get/exists/delete/update/_source/mget with
//     Elasticsearch's versioning model: internal versions, external and
//     external_gte versions, op_type=create, if_seq_no/if_primary_term,
//     per-index sequence numbers, delete tombstones, and Elasticsearch's
//     exact response and 409/404 error bodies.
//   - Bulk NDJSON with index/create/update/delete items, per-item status and
//     errors, and Elasticsearch's errors for malformed bodies.
//   - Indices: create/delete/exists/get, settings, mappings with dynamic
//     mapping, refresh (with near-real-time visibility when
//     index.refresh_interval is -1; otherwise writes are searchable at once),
//     index name validation, aliases with filters and write indices, and
//     atomic POST /_aliases.
//   - Search and count with a practical query DSL subset (match_all,
//     match_none, term, terms, match, match_phrase, multi_match, bool, range,
//     ids, exists, prefix, wildcard, constant_score, simple query strings),
//     sorting, search_after, from/size, _source filtering and
//     track_total_hits.
//   - Errors always come back in Elasticsearch's JSON error shape with the
//     same status codes; malformed input never panics the server.
//   - Faults (429, 503, delays, per-item bulk rejections) can be injected
//     for chosen requests with Server.InjectFault.
//   - Persistence (Open): a server opened on a data directory answers, after
//     a restart or a crash, every write it acknowledged, with the same
//     _version and _seq_no. Each write request is in the checksummed log and
//     fsynced before it is answered (one fsync per request, so per _bulk); a
//     snapshot written aside and renamed into place compacts the log; a torn
//     log tail (never acknowledged) is dropped, any other damage refused.
//
// The server holds no package-level mutable state and is safe for
// concurrent use.
package esserver
