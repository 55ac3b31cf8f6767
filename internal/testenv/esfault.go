package testenv

import (
	"net/http"

	"github.com/sluicehq/sluice/esserver"
)

// ESFault is one kind of Elasticsearch outage of a test's esserver es, as
// a worker sees it through g (NewGate(t, es)): Start begins it and returns
// what ends it.
type ESFault struct {
	Name  string
	Start func(es *esserver.Server, g *Gate) (end func())
	// Items: only _bulk items fail (the request succeeds): the batch
	// path's document writes, on indices that exist.
	Items bool
}

// ESFaults are the kinds of Elasticsearch outage a worker must treat as an
// outage: a closed port, a frozen server, 503 and 429 answers, and 429 for
// each bulk item.
func ESFaults() []ESFault {
	status := func(code int) func(*esserver.Server, *Gate) func() {
		return func(es *esserver.Server, _ *Gate) func() { return es.InjectFault(esserver.Fault{Status: code}) }
	}
	return []ESFault{
		{"closed port", func(_ *esserver.Server, g *Gate) func() { g.Stop(); return g.Start }, false},
		{"frozen", func(_ *esserver.Server, g *Gate) func() { g.Freeze(); return g.Thaw }, false},
		{"503", status(http.StatusServiceUnavailable), false},
		{"429", status(http.StatusTooManyRequests), false},
		{"429 items", func(es *esserver.Server, _ *Gate) func() {
			return es.InjectFault(esserver.Fault{BulkItemStatus: http.StatusTooManyRequests})
		}, true},
	}
}
