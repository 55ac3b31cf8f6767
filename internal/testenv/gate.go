package testenv

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Gate stands between a client and an HTTP handler (an Elasticsearch test
// server, say) and gives a test the shapes of a dependency outage on one
// address: through a TCP proxy (Stop: the port closed, connections
// refused; Start) to a server that forwards to the handler unless frozen
// (Freeze: connections accepted, requests never answered until Thaw).
type Gate struct {
	*Proxy
	mu     sync.Mutex
	frozen chan struct{} // closed by Thaw; nil when not frozen
}

// NewGate serves h behind a Gate until the test ends.
func NewGate(t testing.TB, h http.Handler) *Gate {
	t.Helper()
	g := &Gate{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		fr := g.frozen
		g.mu.Unlock()
		if fr != nil {
			select {
			case <-fr:
			case <-r.Context().Done():
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	g.Proxy = NewTCPProxy(t, strings.TrimPrefix(ts.URL, "http://"))
	t.Cleanup(g.Thaw)
	return g
}

// URL is the address clients use.
func (g *Gate) URL() string { return "http://" + g.Addr() }

// Freeze makes every request hang (the server accepts and never answers).
func (g *Gate) Freeze() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.frozen == nil {
		g.frozen = make(chan struct{})
	}
}

// Thaw ends Freeze: the requests held are served.
func (g *Gate) Thaw() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.frozen != nil {
		close(g.frozen)
		g.frozen = nil
	}
}
