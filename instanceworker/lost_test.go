package instanceworker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/claim"
)

const lostDB, lostClass = "shop", "orders"

// lostCommands appends and publishes, for n instances, a create, an update
// of every third and a delete of every sixth; it returns the commands.
func (e *env) lostCommands(from, n int) []cmd {
	e.t.Helper()
	var cs []cmd
	for i := from; i < from+n; i++ {
		id := fmt.Sprint(i)
		cs = append(cs, e.appendCmd(instanceworker.CreateInstance, lostDB, lostClass, id,
			map[string]any{"db": lostDB, "class": lostClass, "instance_id": id, "data": map[string]any{"n": i, "v": 0}}))
		if i%3 == 0 {
			cs = append(cs, e.appendCmd(instanceworker.UpdateInstance, lostDB, lostClass, id, map[string]any{"data": map[string]any{"v": 1}}))
		}
		if i%6 == 0 {
			cs = append(cs, e.appendCmd(instanceworker.DeleteInstance, lostDB, lostClass, id, map[string]any{}))
		}
	}
	e.publish(cs...)
	return cs
}

// verifyAll is `sluice verify` of the test's class.
func (e *env) verifyAll() *instanceworker.VerifyReport {
	e.t.Helper()
	rep, err := instanceworker.Verify(ctxT(e.t), instanceworker.VerifyOptions{Store: e.store, ES: e.esc, IndexPrefix: "sluice_",
		DB: lostDB, Class: lostClass})
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

// allBack waits until verify finds every one of n instances ok, then checks
// that each document's Elasticsearch _version is its sequence_number (the
// last domain slot: external versioning).
func (e *env) allBack(n int, within time.Duration) {
	e.t.Helper()
	var rep *instanceworker.VerifyReport
	testenv.WaitForEvery(e.t, within, 200*time.Millisecond, fmt.Sprintf("all %d instances back", n), func() bool {
		rep = e.verifyAll()
		return rep.Instances == n && rep.OK == n
	})
	for i := range n {
		v, src, found := e.doc(lostDB, lostClass, fmt.Sprint(i))
		if !found {
			e.t.Errorf("instance %d: no document", i)
			continue
		}
		if seq, _ := src["sequence_number"].(float64); int64(seq) != v || v < 1 {
			e.t.Errorf("instance %d: _version %d, sequence_number %v", i, v, src["sequence_number"])
		}
	}
}

func (e *env) deleteIndex() {
	e.t.Helper()
	res, err := e.esc.Indices.Delete([]string{readmodel.InstanceNames("sluice_", lostDB, readmodel.DefaultVersion).Index})
	if err != nil || res.IsError() {
		e.t.Fatalf("delete index: %v %v", res, err)
	}
	res.Body.Close()
}

// TestReadModelLost: an instance worker restarted after its index was
// deleted, or after part of its documents were, rebuilds the documents
// from the event store (every one back at its last domain slot, as
// `sluice verify` sees it); a fresh deployment, and a restart with the
// index intact, rebuild nothing.
func TestReadModelLost(t *testing.T) {
	const n = 24
	for _, tc := range []struct {
		name string
		lose func(e *env)
	}{
		{"index deleted", func(e *env) { e.deleteIndex() }},
		{"partly emptied", func(e *env) {
			// As an index restored from an older snapshot: only every
			// other document. (Deleting documents one by one would leave
			// Elasticsearch delete tombstones, index.gc_deletes, whose
			// versions refuse the rebuild's writes for 60 s.)
			ctx := ctxT(t)
			type kept struct {
				m     readmodel.Meta
				state []byte
			}
			var keep []kept
			for i := 0; i < n; i += 2 {
				nm := readmodel.InstanceNames("sluice_", lostDB, readmodel.DefaultVersion)
				m, st, err := readmodel.GetInstance(ctx, e.esc, nm, lostClass, fmt.Sprint(i))
				if err != nil {
					t.Fatal(err)
				}
				keep = append(keep, kept{m, st})
			}
			e.deleteIndex()
			nm, err := readmodel.EnsureIndex(ctx, e.esc, "sluice_", lostDB, readmodel.DefaultVersion)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keep {
				if _, err := readmodel.WriteInstance(ctx, e.esc, nm, k.m, k.state); err != nil {
					t.Fatal(err)
				}
			}
			if rep := e.verifyAll(); rep.Missing != n/2 {
				t.Fatalf("after restoring half: %s", rep.Summary())
			}
		}},
		{"fresh deployment", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2)
			tap := &testenv.Buffer{}
			e.logs = tap
			// The start-up check runs before the worker logs that it runs,
			// and a rebuild it starts logs "read model missing" first
			// thing, in a goroutine that stop waits for: after stop, the
			// log has it if the check fired. (Deadlines are hang guards.)
			running := func(k int) {
				t.Helper()
				testenv.WaitFor(t, 60*time.Second, "the start-up check done (worker running)", func() bool { return tap.Count("instance worker running") >= k })
			}
			if tc.lose == nil {
				// Nothing done yet: the check must not fire.
				_, stop := e.startInProcess(nil)
				running(1)
				cs := e.lostCommands(0, n)
				testenv.WaitFor(t, 60*time.Second, "all commands done", func() bool { return e.allDone(cs...) })
				e.allBack(n, 30*time.Second)
				stop()
				if tap.Contains("read model missing") {
					t.Fatal("a rebuild was triggered on a fresh deployment")
				}
				// A restart with the index intact rebuilds nothing either.
				_, stop = e.startInProcess(nil)
				running(2)
				stop()
				if tap.Contains("read model missing") {
					t.Fatal("a rebuild was triggered with the index intact")
				}
				return
			}
			_, stop := e.startInProcess(nil)
			cs := e.lostCommands(0, n)
			testenv.WaitFor(t, 60*time.Second, "all commands done", func() bool { return e.allDone(cs...) })
			e.allBack(n, 30*time.Second)
			stop()
			tc.lose(e)
			if tap.Contains("read model missing") {
				t.Fatal("rebuild before the loss")
			}
			e.startInProcess(nil)
			e.allBack(n, 60*time.Second)
			testenv.WaitFor(t, 10*time.Second, "rebuild logged", func() bool {
				return tap.Contains("read model missing; rebuilding") && tap.Contains("read model rebuilt")
			})
		})
	}
}

// TestIndexDeletedWhileRunning: the index is deleted under a running
// worker. The next document write is answered 404: the worker creates the
// index again, writes the document, and rebuilds the others from the
// store — no command dead-lettered, stale or failed, every document back.
func TestIndexDeletedWhileRunning(t *testing.T) {
	const n = 24
	e := newEnv(t, 2)
	tap := &testenv.Buffer{}
	e.logs = tap
	e.startInProcess(nil)
	cs := e.lostCommands(0, n)
	testenv.WaitFor(t, 60*time.Second, "all commands done", func() bool { return e.allDone(cs...) })
	e.allBack(n, 30*time.Second)
	e.deleteIndex()
	// Commands after the loss: new instances (their documents are written
	// by the live worker through the recreated alias).
	more := e.lostCommands(n, 4)
	testenv.WaitFor(t, 60*time.Second, "the new commands done", func() bool { return e.allDone(more...) })
	for _, c := range more {
		if o := e.outcome(c); o.Result != claim.OutcomeApplied || o.Reason != "" {
			t.Errorf("command %s: outcome %+v", c.ev.Envelope.EventType, o)
		}
	}
	e.allBack(n+4, 60*time.Second)
	if !tap.Contains("read model missing; rebuilding") {
		t.Error("no rebuild logged")
	}
	if recs := e.dlqRecords(); len(recs) != 0 {
		t.Errorf("%d dead letters", len(recs))
	}
}

// TestReadModelLostESNotReady: the index was deleted while the worker was
// down, and Elasticsearch is unreachable when it starts again (commands
// arrive meanwhile). The start-up check waits for Elasticsearch instead of
// skipping the db (after which the first command would create the index
// again, empty, and nothing would rebuild it): once it is back, every
// document comes back.
func TestReadModelLostESNotReady(t *testing.T) {
	const n = 24
	e := newEnv(t, 2)
	tap := &testenv.Buffer{}
	e.logs = tap
	g := testenv.NewGate(t, e.es)
	_, stop := e.startInProcess(nil)
	cs := e.lostCommands(0, n)
	testenv.WaitFor(t, 60*time.Second, "all commands done", func() bool { return e.allDone(cs...) })
	e.allBack(n, 30*time.Second)
	stop()
	e.deleteIndex()
	g.Stop()
	e.startInProcess(map[string]string{"ELASTICSEARCH_URLS": g.URL(), "ELASTICSEARCH_REQUEST_TIMEOUT": "500ms"})
	more := e.lostCommands(n, 4)
	// The check fails, and is retried, meanwhile: evidence, not a pause.
	testenv.WaitFor(t, 60*time.Second, "the start-up check retried while Elasticsearch is away", func() bool {
		return tap.Count("Elasticsearch unavailable for the read model check; waiting for it") >= 2
	})
	g.Start()
	testenv.WaitFor(t, 60*time.Second, "the new commands done", func() bool { return e.allDone(more...) })
	e.allBack(n+4, 60*time.Second)
	if !tap.Contains("read model missing; rebuilding") {
		t.Error("no rebuild logged")
	}
}

// TestWriteAliasRemovedWhileRunning: only the aliases of the index are
// removed under a running worker (the index and its documents stay). The
// next write is answered 404; the worker points the aliases at the index
// again (creating it answers resource_already_exists) instead of 404ing
// on: the commands are applied, every document is there, and the db is
// rebuilt once, not back to back.
func TestWriteAliasRemovedWhileRunning(t *testing.T) {
	const n = 24
	e := newEnv(t, 2)
	tap := &testenv.Buffer{}
	e.logs = tap
	_, stop := e.startInProcess(nil)
	cs := e.lostCommands(0, n)
	testenv.WaitFor(t, 60*time.Second, "all commands done", func() bool { return e.allDone(cs...) })
	e.allBack(n, 30*time.Second)
	nm := readmodel.InstanceNames("sluice_", lostDB, readmodel.DefaultVersion)
	res, err := e.esc.Indices.DeleteAlias([]string{nm.Index}, []string{nm.ReadAlias, nm.WriteAlias})
	if err != nil || res.IsError() {
		t.Fatalf("delete aliases: %v %v", res, err)
	}
	res.Body.Close()
	more := e.lostCommands(n, 4)
	testenv.WaitFor(t, 60*time.Second, "the new commands done", func() bool { return e.allDone(more...) })
	for _, c := range more {
		if o := e.outcome(c); o.Result != claim.OutcomeApplied || o.Reason != "" {
			t.Errorf("command %s: outcome %+v", c.ev.Envelope.EventType, o)
		}
	}
	e.allBack(n+4, 60*time.Second)
	// A looping rebuild starts again as the first ends: wait for the end,
	// then for a live write after it (commands applied through the alias),
	// then stop — stop waits for any rebuild started, and each logs
	// "read model missing; rebuilding" first thing.
	testenv.WaitFor(t, 60*time.Second, "the rebuild done", func() bool { return tap.Contains("read model rebuilt") })
	after := e.lostCommands(n+4, 2)
	testenv.WaitFor(t, 60*time.Second, "commands after the rebuild done", func() bool { return e.allDone(after...) })
	e.allBack(n+6, 60*time.Second)
	stop()
	if k := tap.Count("read model missing; rebuilding"); k != 1 {
		t.Errorf("%d rebuilds, want 1", k)
	}
	if recs := e.dlqRecords(); len(recs) != 0 {
		t.Errorf("%d dead letters", len(recs))
	}
}
