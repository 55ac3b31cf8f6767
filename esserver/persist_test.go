package esserver

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// preq sends one request to h and returns the status and the decoded body
// ("took" removed: it is a duration).
func preq(t *testing.T, h http.Handler, method, path, body string) (int, any) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/x-ndjson")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	var v any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, rec.Body.String())
		}
	}
	if m, ok := v.(map[string]any); ok {
		delete(m, "took")
	}
	return rec.Code, v
}

func mustReq(t *testing.T, h http.Handler, method, path, body string, want int) any {
	t.Helper()
	code, v := preq(t, h, method, path, body)
	if code != want {
		t.Fatalf("%s %s: status %d, want %d: %v", method, path, code, want, v)
	}
	return v
}

// crash drops a persistent server the way a killed process does: the files
// are closed as they are, without the final compaction of Close.
func crash(t *testing.T, s *Server) {
	t.Helper()
	st := s.store
	st.syncMu.Lock()
	defer st.syncMu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.buf) != 0 {
		t.Fatalf("crash: %d bytes were never synced, yet their requests were answered", len(st.buf))
	}
	_ = st.log.Close()
	_ = st.lock.Close()
	st.closed, st.err = true, ErrClosed
}

func bulkBody(index string, from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, `{"index":{"_index":%q,"_id":"o%d"}}`+"\n", index, i)
		fmt.Fprintf(&b, `{"total":%d,"status":"open","customer":{"name":"c%d"},"at":"2024-05-0%dT10:00:00Z"}`+"\n", i, i%7, 1+i%9)
	}
	return b.String()
}

// persistWrites exercises every kind of mutation the log records.
func persistWrites(t *testing.T, h http.Handler) {
	mustReq(t, h, "PUT", "/orders", `{"settings":{"number_of_shards":2,"refresh_interval":"-1"},
		"mappings":{"properties":{"total":{"type":"long"},"status":{"type":"keyword"}}},
		"aliases":{"orders-read":{"filter":{"term":{"status":"open"}}}}}`, 200)
	mustReq(t, h, "POST", "/_bulk?refresh=true", bulkBody("orders", 0, 60), 200)
	mustReq(t, h, "PUT", "/orders/_doc/ext?version=7&version_type=external", `{"total":1,"status":"open"}`, 201)
	mustReq(t, h, "POST", "/orders/_update/o2", `{"doc":{"status":"shipped","extra":{"note":"new field"}}}`, 200)
	mustReq(t, h, "DELETE", "/orders/_doc/o3", "", 200)
	mustReq(t, h, "POST", "/_bulk", bulkBody("events", 0, 20), 200) // auto-created, dynamic mapping
	mustReq(t, h, "POST", "/_bulk", `{"delete":{"_index":"events","_id":"o4"}}`+"\n", 200)
	mustReq(t, h, "PUT", "/scratch", `{}`, 200)
	mustReq(t, h, "DELETE", "/scratch", "", 200)
	mustReq(t, h, "POST", "/_aliases", `{"actions":[{"add":{"index":"orders","alias":"all"}},
		{"add":{"index":"events","alias":"all","is_write_index":true}}]}`, 200)
	mustReq(t, h, "PUT", "/orders/_settings", `{"index":{"max_result_window":500}}`, 200)
	mustReq(t, h, "PUT", "/orders/_mapping", `{"properties":{"note":{"type":"text"}}}`, 200)
	mustReq(t, h, "PUT", "/orders/_doc/unrefreshed", `{"total":99,"status":"open"}`, 201) // acknowledged, not yet refreshed
	mustReq(t, h, "POST", "/orders/_delete_by_query?refresh=true", `{"query":{"term":{"total":5}}}`, 200)
	mustReq(t, h, "POST", "/_refresh", "", 200)
}

// persistView is everything a client can read back.
func persistView(t *testing.T, h http.Handler) map[string]any {
	view := map[string]any{}
	for _, p := range []string{
		"/orders/_search?size=100&sort=_doc&version=true&seq_no_primary_term=true",
		"/events/_search?size=100&sort=_doc&version=true&seq_no_primary_term=true",
		"/orders-read/_count",
		"/all/_search?q=status:shipped",
		"/orders/_doc/o2", "/orders/_doc/ext", "/events/_doc/o7",
		"/_mapping", "/orders,events/_settings", "/_alias", "/orders",
	} {
		view[p] = mustReq(t, h, "GET", p, "", 200)
	}
	for _, p := range []string{"/orders/_doc/o3", "/scratch"} {
		code, v := preq(t, h, "GET", p, "")
		view[p] = []any{code, v}
	}
	return view
}

func TestPersistReopen(t *testing.T) {
	tests := []struct {
		name string
		stop func(t *testing.T, s *Server) // how the first server goes away
		// fromLog: the second server replays the log (no final snapshot).
		fromLog bool
	}{
		{"close then reopen (snapshot)", func(t *testing.T, s *Server) {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"crash then reopen (log replay)", crash, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s1, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			persistWrites(t, s1)
			probe := mustReq(t, s1, "PUT", "/orders/_doc/probe?refresh=true", `{"total":7}`, 201).(map[string]any)
			before := persistView(t, s1)
			tc.stop(t, s1)

			s2, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s2.Close() }()
			rec := s2.Recovery()
			if rec.Indices != 2 || rec.TornBytes != 0 || (rec.LogRecords > 0) != tc.fromLog {
				t.Fatalf("recovery %+v: want 2 indices, no torn bytes, log records replayed: %v", rec, tc.fromLog)
			}
			after := persistView(t, s2)
			for k := range before {
				if !reflect.DeepEqual(before[k], after[k]) {
					t.Errorf("GET %s after reopen:\n got %v\nwant %v", k, after[k], before[k])
				}
			}
			// Sequence numbers continue; versions and tombstones still
			// decide conflicts.
			next := mustReq(t, s2, "PUT", "/orders/_doc/probe2", `{"total":8}`, 201).(map[string]any)
			if next["_seq_no"].(float64) != probe["_seq_no"].(float64)+1 {
				t.Errorf("_seq_no after reopen = %v, want %v+1", next["_seq_no"], probe["_seq_no"])
			}
			mustReq(t, s2, "PUT", "/orders/_doc/ext?version=7&version_type=external", `{"total":2}`, 409)
			mustReq(t, s2, "PUT", "/orders/_doc/o3?version=1&version_type=external", `{"total":2}`, 409) // tombstone at version 2
			upd := mustReq(t, s2, "POST", "/orders/_update/o2", `{"doc":{"total":1000}}`, 200).(map[string]any)
			if upd["_version"].(float64) != 3 {
				t.Errorf("_version of o2 after reopen and update = %v, want 3", upd["_version"])
			}
		})
	}
}

func TestPersistTornTail(t *testing.T) {
	frame := appendFrame(nil, []byte(`X{"never":"acknowledged"}`))
	badSum := append([]byte(nil), frame...)
	badSum[len(badSum)-1] ^= 0xff
	tests := []struct {
		name string
		tail []byte
	}{
		{"half a frame header", frame[:3]},
		{"header without all of its payload", frame[:len(frame)-5]},
		{"whole frame, bad checksum", badSum},
		{"zeros after a torn write", make([]byte, 4096)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s1, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			mustReq(t, s1, "POST", "/_bulk", bulkBody("orders", 0, 30), 200)
			want := mustReq(t, s1, "GET", "/orders/_search?size=100&sort=_doc&version=true&seq_no_primary_term=true", "", 200)
			crash(t, s1)
			gens, err := listLogs(dir)
			if err != nil || len(gens) != 1 {
				t.Fatalf("logs %v, %v: want one", gens, err)
			}
			f, err := os.OpenFile(s1.store.logPath(gens[0]), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(tc.tail); err != nil {
				t.Fatal(err)
			}
			_ = f.Close()

			s2, err := Open(dir)
			if err != nil {
				t.Fatalf("reopen with a torn tail: %v", err)
			}
			if got := s2.Recovery(); got.TornBytes != int64(len(tc.tail)) || got.Documents != 30 {
				t.Errorf("recovery %+v: want %d torn bytes and 30 documents", got, len(tc.tail))
			}
			if got := mustReq(t, s2, "GET", "/orders/_search?size=100&sort=_doc&version=true&seq_no_primary_term=true", "", 200); !reflect.DeepEqual(got, want) {
				t.Errorf("after reopen:\n got %v\nwant %v", got, want)
			}
			mustReq(t, s2, "PUT", "/orders/_doc/after", `{"total":1}`, 201)
			crash(t, s2)
			s3, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s3.Close() }()
			if got := s3.Recovery(); got.TornBytes != 0 || got.Documents != 31 {
				t.Errorf("second reopen %+v: want no torn bytes and 31 documents", got)
			}
		})
	}
}

func TestPersistRefusesDamage(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string)
	}{
		{"a flipped byte in the snapshot", func(t *testing.T, dir string) {
			p := filepath.Join(dir, snapshotName)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x01
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"a truncated snapshot", func(t *testing.T, dir string) {
			p := filepath.Join(dir, snapshotName)
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, fi.Size()-10); err != nil {
				t.Fatal(err)
			}
		}},
		{"a bad frame in an older log", func(t *testing.T, dir string) {
			// An older log was complete before the newer one was started: a
			// bad frame there is damage, not a torn write.
			gens, _ := listLogs(dir)
			st := &store{dir: dir}
			older := st.logPath(gens[0])
			payload := []byte{recDrop}
			payload = append(payload, "orders"...)
			b := appendFrame(nil, payload)
			binary.BigEndian.PutUint32(b[4:8], crc32.Checksum(payload, crcTable)+1)
			if err := os.WriteFile(older, append(b, appendFrame(nil, payload)...), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(st.logPath(gens[0]+1), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s1, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			mustReq(t, s1, "POST", "/_bulk", bulkBody("orders", 0, 10), 200)
			if err := s1.Close(); err != nil {
				t.Fatal(err)
			}
			tc.damage(t, dir)
			_, err = Open(dir)
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Open on a damaged directory: %v, want a *CorruptError", err)
			}
		})
	}
}

func TestPersistOneOwner(t *testing.T) {
	dir := t.TempDir()
	s1, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrDataDirLocked) {
		t.Fatalf("second Open on a held directory: %v, want ErrDataDirLocked", err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	mustReq(t, s1, "PUT", "/late/_doc/1", `{"a":1}`, 500) // nothing is acknowledged after Close
	s2, err := Open(dir)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	if code, _ := preq(t, s2, "GET", "/late", ""); code != 404 {
		t.Errorf("a write answered 500 after Close survived: GET /late = %d", code)
	}
	_ = s2.Close()
}

// Concurrent writers share fsyncs (group commit): every write any of them
// saw acknowledged is there after a crash, at the acknowledged version.
func TestPersistConcurrentWritersCrash(t *testing.T) {
	dir := t.TempDir()
	s1, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	const writers, rounds = 6, 15
	type ack struct {
		id      string
		version float64
	}
	acks := make([][]ack, writers)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				id := fmt.Sprintf("w%d", w) // each writer rewrites its own document
				req := httptest.NewRequest("PUT", "/shared/_doc/"+id, strings.NewReader(fmt.Sprintf(`{"round":%d}`, r)))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				s1.ServeHTTP(rec, req)
				var res map[string]any
				if rec.Code/100 != 2 || json.Unmarshal(rec.Body.Bytes(), &res) != nil {
					t.Errorf("writer %d round %d: %d %s", w, r, rec.Code, rec.Body.String())
					return
				}
				acks[w] = append(acks[w], ack{id, res["_version"].(float64)})
				bulk := fmt.Sprintf(`{"index":{"_index":"shared","_id":"w%d-r%d"}}`+"\n"+`{"round":%d}`+"\n", w, r, r)
				breq := httptest.NewRequest("POST", "/_bulk", strings.NewReader(bulk))
				breq.Header.Set("Content-Type", "application/x-ndjson")
				brec := httptest.NewRecorder()
				s1.ServeHTTP(brec, breq)
				if brec.Code != 200 {
					t.Errorf("writer %d bulk %d: %d", w, r, brec.Code)
					return
				}
				acks[w] = append(acks[w], ack{fmt.Sprintf("w%d-r%d", w, r), 1})
			}
		}()
	}
	wg.Wait()
	crash(t, s1)
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s2.Close() }()
	latest := map[string]float64{}
	for _, as := range acks {
		for _, a := range as {
			latest[a.id] = max(latest[a.id], a.version)
		}
	}
	if len(latest) != writers*(rounds+1) {
		t.Fatalf("%d acknowledged documents, want %d", len(latest), writers*(rounds+1))
	}
	for id, v := range latest {
		got := mustReq(t, s2, "GET", "/shared/_doc/"+id, "", 200).(map[string]any)
		if got["_version"].(float64) != v {
			t.Errorf("%s: _version %v after the crash, want the acknowledged %v", id, got["_version"], v)
		}
	}
}
