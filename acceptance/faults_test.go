package acceptance

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/esserver"
)

// esWrites sits in front of the Elasticsearch test server and records every
// document write it acknowledged: a version of a document acknowledged
// twice is a side effect made twice. It also records item failures (429,
// 5xx) with their times, to observe retries and backoff.
type esWrites struct {
	log       *esserver.WriteLog
	mu        sync.Mutex
	ok        map[string]int         // "index/_id@version" → acknowledged writes
	failures  map[string][]time.Time // "index/_id" → times of failed writes
	conflicts map[string]int         // index → writes answered 409 (a finished write sent again)
}

func newESWrites() *esWrites {
	w := &esWrites{ok: map[string]int{}, failures: map[string][]time.Time{}, conflicts: map[string]int{}}
	w.log = esserver.NewWriteLog(w.record)
	return w
}

// wrap puts the write log in front of the ES test server.
func (w *esWrites) wrap(h http.Handler) http.Handler { return w.log.Wrap(h) }

func (w *esWrites) record(wr esserver.Write) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case wr.OK():
		w.ok[fmt.Sprintf("%s/%s@%d", wr.Index, wr.ID, wr.Version)]++
	case wr.Status == http.StatusConflict:
		w.conflicts[wr.Index]++
	case wr.Status == http.StatusTooManyRequests || wr.Status >= 500:
		k := wr.Index + "/" + wr.ID
		w.failures[k] = append(w.failures[k], wr.At)
	}
}

// duplicates returns the document versions acknowledged more than once.
func (w *esWrites) duplicates() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for k, n := range w.ok {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s×%d", k, n))
		}
	}
	sort.Strings(out)
	return out
}

// conflictCount returns the writes answered 409 (version conflict or
// document exists) in total and by index. Every read-model write carries an
// external version or op_type=create, so Elasticsearch refuses a repeat
// itself; a 409 is the trace of a worker sending a finished write again.
func (w *esWrites) conflictCount() (int, map[string]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.conflicts {
		n += c
	}
	return n, maps.Clone(w.conflicts)
}

// acknowledged returns the number of acknowledged writes of documents of
// indices whose name starts with indexPrefix.
func (w *esWrites) acknowledged(indexPrefix string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for k, c := range w.ok {
		if strings.HasPrefix(k, indexPrefix) {
			n += c
		}
	}
	return n
}

// failuresOf returns the times of failed writes of documents of indices
// starting with indexPrefix, by document.
func (w *esWrites) failuresOf(indexPrefix string) map[string][]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]time.Time{}
	for k, ts := range w.failures {
		if strings.HasPrefix(k, indexPrefix) {
			out[k] = append([]time.Time(nil), ts...)
		}
	}
	return out
}

// kafkaFault drops the client connection of the next n requests of key
// (the client sees a broken connection and must retry); it returns a
// counter of the requests it dropped.
func kafkaFault(c *kfake.Cluster, key kmsg.Key, n int32) *atomic.Int32 {
	var dropped atomic.Int32
	c.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
		if dropped.Load() >= n {
			c.DropControl()
			return nil, nil, false
		}
		dropped.Add(1)
		if dropped.Load() < n {
			c.KeepControl()
		}
		return nil, errors.New("acceptance: injected connection drop"), true
	})
	return &dropped
}
