package esserver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Write is one document write as an Elasticsearch-compatible server
// answered it: a _bulk item or a single-document index/create request.
type Write struct {
	Index   string
	ID      string
	Version int64
	// Status is the item's (or the request's) HTTP status: 200/201 applied,
	// 409 version conflict, 429/5xx rejected.
	Status int
	// At is when the answer was sent.
	At time.Time
}

// OK reports whether the write was applied (200 or 201).
func (w Write) OK() bool { return w.Status == http.StatusOK || w.Status == http.StatusCreated }

// WriteLog is test middleware for an Elasticsearch-compatible server (this
// package's Server, or a real cluster behind a proxy): it reads the answers
// of every write request that passes through and records each document
// write, so that tests see side effects as Elasticsearch acknowledged them —
// a version acknowledged twice is a side effect made twice — and when.
type WriteLog struct {
	observe  []func(Write)
	mu       sync.Mutex
	writes   []Write
	unparsed int
}

// NewWriteLog returns an empty log; each observe func is called with every
// write as it is recorded (from the serving goroutine).
func NewWriteLog(observe ...func(Write)) *WriteLog {
	return &WriteLog{observe: observe}
}

// Writes returns a copy of the writes recorded so far, in answer order.
func (l *WriteLog) Writes() []Write {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Write(nil), l.writes...)
}

// Unparsed returns the number of write answers the log could not read
// (not JSON, compressed, an error body without _id): writes it cannot have
// recorded. Tests that count writes should require 0.
func (l *WriteLog) Unparsed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unparsed
}

func (l *WriteLog) miss() {
	l.mu.Lock()
	l.unparsed++
	l.mu.Unlock()
}

// Wrap returns h with the log in front of it.
func (l *WriteLog) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		path := strings.TrimSuffix(r.URL.Path, "/")
		bulk := strings.HasSuffix(path, "/_bulk")
		single := (r.Method == http.MethodPut || r.Method == http.MethodPost) &&
			(strings.Contains(path, "/_doc/") || strings.Contains(path, "/_create/"))
		if !bulk && !single {
			h.ServeHTTP(rw, r)
			return
		}
		cw := &captureWriter{ResponseWriter: rw}
		h.ServeHTTP(cw, r)
		now := time.Now()
		type answer struct {
			Index   string `json:"_index"`
			ID      string `json:"_id"`
			Version int64  `json:"_version"`
			Status  int    `json:"status"`
		}
		var got []answer
		if bulk {
			// Each item is an object with one key, its action.
			var res struct {
				Items []struct {
					Index  *answer `json:"index"`
					Create *answer `json:"create"`
					Update *answer `json:"update"`
					Delete *answer `json:"delete"`
				} `json:"items"`
			}
			if json.Unmarshal(cw.buf.Bytes(), &res) != nil {
				l.miss()
				return
			}
			for _, it := range res.Items {
				n := len(got)
				for _, a := range []*answer{it.Index, it.Create, it.Update, it.Delete} {
					if a != nil {
						got = append(got, *a)
					}
				}
				if len(got) == n {
					l.miss() // an item of no known action: a write not recorded
				}
			}
		} else {
			var a answer
			if json.Unmarshal(cw.buf.Bytes(), &a) != nil {
				l.miss()
				return
			}
			if a.ID == "" {
				// An error answer names no document: take it from the
				// path, /{index}/_doc/{id} or /{index}/_create/{id}.
				parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
				if len(parts) != 3 {
					l.miss()
					return
				}
				a.Index, a.ID = parts[0], parts[2]
			}
			a.Status = cw.status
			got = append(got, a)
		}
		ws := make([]Write, len(got))
		for i, a := range got {
			ws[i] = Write{Index: a.Index, ID: a.ID, Version: a.Version, Status: a.Status, At: now}
		}
		l.mu.Lock()
		l.writes = append(l.writes, ws...)
		l.mu.Unlock()
		for _, w := range ws {
			for _, f := range l.observe {
				f(w)
			}
		}
	})
}

// captureWriter passes a response through and keeps its status and body.
type captureWriter struct {
	http.ResponseWriter
	status int
	buf    bytes.Buffer
}

func (c *captureWriter) WriteHeader(code int) {
	c.status = code
	c.ResponseWriter.WriteHeader(code)
}

func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.buf.Write(b)
	return c.ResponseWriter.Write(b)
}
