package esserver

import (
	"net/http"
	"strings"
	"sync"
	"time"
)

// Fault describes a failure to inject into matching requests.
//
// A fault with Status answers the request itself with that status and an
// Elasticsearch error body (429 gives es_rejected_execution_exception, 503
// unavailable_shards_exception). A fault with only Delay slows the request
// down and then serves it normally. On _bulk requests, RejectBulkItems (or
// BulkItemStatus) fails individual items while the others are applied,
// like Elasticsearch does when its write queue is full.
type Fault struct {
	// Match selects requests; nil matches every request.
	Match func(*http.Request) bool
	// Status, when non-zero, is returned instead of serving the request.
	Status int
	// ErrorType and Reason override the error body for Status faults.
	ErrorType, Reason string
	// Delay is waited before the request is answered (or the request
	// context ends).
	Delay time.Duration
	// Times limits how many requests the fault applies to; 0 means
	// unlimited.
	Times int
	// RejectBulkItems selects bulk items that fail with BulkItemStatus
	// (default 429 es_rejected_execution_exception).
	RejectBulkItems func(BulkItem) bool
	// BulkItemStatus is the status of the items RejectBulkItems selects,
	// or, when RejectBulkItems is nil, of every item of matching bulk
	// requests.
	BulkItemStatus int
}

// BulkItem identifies one item of a bulk request for RejectBulkItems.
type BulkItem struct {
	Position int    // 0-based position in the request
	Action   string // index, create, update or delete
	Index    string // target index or alias as given
	ID       string // document id ("" for auto ids)
}

// MatchPath returns a matcher for requests with the given method (empty
// for any) whose path contains substr (for example "/_bulk").
func MatchPath(method, substr string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return (method == "" || r.Method == method) && strings.Contains(r.URL.Path, substr)
	}
}

type faultEntry struct {
	f    Fault
	used int
	id   uint64
}

type faultSet struct {
	mu     sync.Mutex
	next   uint64
	faults []*faultEntry
}

// InjectFault registers a fault. Faults are checked in registration order
// and the first matching one applies. The returned function removes it.
func (s *Server) InjectFault(f Fault) (remove func()) {
	fs := &s.faults
	fs.mu.Lock()
	fs.next++
	e := &faultEntry{f: f, id: fs.next}
	fs.faults = append(fs.faults, e)
	fs.mu.Unlock()
	return func() {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		for i, x := range fs.faults {
			if x.id == e.id {
				fs.faults = append(fs.faults[:i], fs.faults[i+1:]...)
				return
			}
		}
	}
}

// ClearFaults removes all injected faults.
func (s *Server) ClearFaults() {
	s.faults.mu.Lock()
	s.faults.faults = nil
	s.faults.mu.Unlock()
}

func (fs *faultSet) match(r *http.Request) *Fault {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, e := range fs.faults {
		if e.f.Match != nil && !e.f.Match(r) {
			continue
		}
		if (e.f.RejectBulkItems != nil || e.f.BulkItemStatus != 0) && e.f.Status == 0 && !strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "/_bulk") {
			continue
		}
		e.used++
		f := e.f
		if e.f.Times > 0 && e.used >= e.f.Times {
			fs.faults = append(fs.faults[:i], fs.faults[i+1:]...)
		}
		return &f
	}
	return nil
}

func faultResponse(f *Fault) response {
	typ, reason := f.ErrorType, f.Reason
	switch f.Status {
	case http.StatusTooManyRequests:
		if typ == "" {
			typ = "es_rejected_execution_exception"
		}
		if reason == "" {
			reason = "rejected execution of coordinating operation (injected by esserver)"
		}
	case http.StatusServiceUnavailable:
		if typ == "" {
			typ = "unavailable_shards_exception"
		}
		if reason == "" {
			reason = "[_na_][0] primary shard is not active (injected by esserver)"
		}
	}
	if typ == "" {
		typ = "exception"
	}
	if reason == "" {
		reason = "injected fault (esserver)"
	}
	return errResp(&esError{Status: f.Status, Type: typ, Reason: reason})
}
