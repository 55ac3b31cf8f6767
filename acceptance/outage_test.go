package acceptance

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRegistryOutagePausesThenRecovers is scenario 8: the workers' Postgres
// (the registry) is cut for several seconds while commands keep arriving
// (the API and the relay keep their own connection). The workers pause
// explicitly: /readyz turns red, the outage gauge is 1, no registry row is
// written, no offset is committed, nothing goes to a DLQ, no process
// exits. When Postgres returns they resume by themselves and finish
// everything exactly once.
func TestRegistryOutagePausesThenRecovers(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, setup{pgProxied: []string{"instance-worker", "projection-worker"}})
	p.startDefault()
	exp := expectation{db: "outage", class: "accounts"}
	load := func(from, to int) {
		for i := from; i < to; i++ {
			id := fmt.Sprintf("acc-%d", i)
			p.create(exp.db, exp.class, id, map[string]any{"balance": i})
			p.patch(exp.db, exp.class, id, map[string]any{"balance": i * 10})
			exp.instances++
			exp.applied += 2
		}
	}
	load(0, 3)
	p.waitDrained(60 * time.Second)
	workers := []*service{p.service("instance-worker"), p.service("projection-worker")}

	t.Run("paused during the outage", func(t *testing.T) {
		commits := map[string]map[int32]int64{}
		for g, topic := range map[string]string{instanceGroup: commandsTopic, historyGroup: eventsTopic} {
			c, err := p.committed(g, topic)
			if err != nil {
				t.Fatal(err)
			}
			commits[g] = c
		}
		rows := p.registryCount()
		acks := p.writes.acknowledged(indexPrefix)
		cmdRecords := p.records(commandsTopic)

		p.pg.Stop()
		load(3, 6)
		p.patch(exp.db, exp.class, "acc-0", map[string]any{"frozen": true})
		exp.applied++
		waitFor(t, 60*time.Second, "the new commands published", func() bool { return p.records(commandsTopic) >= cmdRecords+7 })
		// The instance worker is paused, so no new domain event reaches the
		// projection worker; an operator republication of the log gives it
		// records to (not) process during the outage.
		head, err := p.storeHead()
		if err != nil {
			t.Fatal(err)
		}
		evRecords := p.records(eventsTopic)
		if out, errOut, code := p.cli("relay", "republish", "--from-position", "1", "--to-position", fmt.Sprint(head)); code != 0 {
			t.Fatalf("relay republish: exit %d %s %s", code, out, errOut)
		}
		if n := p.records(eventsTopic); n <= evRecords {
			t.Fatalf("republish added no event records (%d before, %d after)", evRecords, n)
		}
		for _, w := range workers {
			waitFor(t, 60*time.Second, w.name+" not ready", func() bool {
				st := w.readyStatus()
				return st != 0 && st != http.StatusOK // answering, and red
			})
			waitFor(t, 30*time.Second, w.name+" outage gauge", func() bool { return w.metric("sluice_worker_registry_outage") == 1 })
		}
		// The outage lasts a while longer; the pipeline must stay paused.
		time.Sleep(4 * time.Second)
		for g, topic := range map[string]string{instanceGroup: commandsTopic, historyGroup: eventsTopic} {
			c, err := p.committed(g, topic)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(c, commits[g]) {
				t.Errorf("%s committed %v during the outage (before %v)", g, c, commits[g])
			}
		}
		if n := p.registryCount(); n != rows {
			t.Errorf("%d registry rows written during the outage", n-rows)
		}
		if n := p.writes.acknowledged(indexPrefix); n != acks {
			t.Errorf("%d Elasticsearch writes during the outage", n-acks)
		}
		if n := p.records(commandsDLQ) + p.records(eventsDLQ); n != 0 {
			t.Errorf("%d DLQ records during the outage", n)
		}
		for _, w := range workers {
			if w.startCount() != 1 {
				t.Errorf("%s restarted during the outage (%d starts)", w.name, w.startCount())
			}
		}
	})

	t.Run("resumes by itself", func(t *testing.T) {
		p.pg.Start()
		p.waitDrained(120 * time.Second)
		for _, w := range workers {
			w.waitReady(60 * time.Second)
			if w.startCount() != 1 {
				t.Errorf("%s was restarted (%d starts): recovery must not need one", w.name, w.startCount())
			}
			if g := w.metric("sluice_worker_registry_outage"); g != 0 {
				t.Errorf("%s outage gauge %v after recovery", w.name, g)
			}
		}
		p.checkEndState(exp)
	})
}

// TestObjectStoreDownAtStartupWaits: the services that open the event store
// (api, relay, instance worker) start while MinIO is unreachable. They do
// not exit: each logs that it waits, and once MinIO is back they become
// ready and the pipeline works end to end (docs/architecture.md#explicit-failure: an outage pauses and
// resumes by itself).
func TestObjectStoreDownAtStartupWaits(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, setup{s3Proxied: true})
	p.s3.Stop()
	names := []string{"api", "relay", "instance-worker"}
	for _, n := range names {
		p.add(n, n, nil).start() // the service names are their kinds
	}
	waitFor(t, 60*time.Second, "every service waiting for the object store", func() bool {
		for _, n := range names {
			b, _ := os.ReadFile(p.service(n).logPath)
			if !strings.Contains(string(b), "event store unreachable at start-up; waiting for it") {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * time.Second) // a few more retries: still no exit
	for _, n := range names {
		s := p.service(n)
		checkNoExit(t, s, "the object store was down")
		// Live but not ready, so an orchestrator neither restarts it nor
		// routes to it.
		if code := s.readyStatus(); code != http.StatusServiceUnavailable {
			t.Errorf("%s /readyz while waiting: %d, want 503", n, code)
		}
		resp, err := http.Get("http://" + s.httpAddr + "/livez")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("%s /livez while waiting: %v %v, want 200", n, resp, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
	p.s3.Start()
	for _, n := range names {
		p.service(n).waitReady(90 * time.Second)
	}
	p.add("projection-worker", kindProjection, nil).start()
	p.service("projection-worker").waitReady(90 * time.Second)
	exp := expectation{db: "late", class: "boot", instances: 1, applied: 2}
	p.create(exp.db, exp.class, "x", map[string]any{"v": 1})
	p.patch(exp.db, exp.class, "x", map[string]any{"v": 2})
	p.waitDrained(90 * time.Second)
	p.checkEndState(exp)
}

// TestPostgresDownAtStartupWaits: every service starts while Postgres is
// unreachable; none exits, and once Postgres is back they become ready and
// the pipeline works end to end.
func TestPostgresDownAtStartupWaits(t *testing.T) {
	t.Parallel()
	names := []string{"api", "relay", "instance-worker", "projection-worker"}
	p := newPipeline(t, setup{pgProxied: names})
	p.pg.Stop()
	for _, n := range names {
		p.add(n, n, nil).start()
	}
	// Positive evidence first: every process is up and serving, and not
	// ready (it waits for Postgres); then several more attempts at
	// Postgres, and still no exit.
	waitFor(t, 60*time.Second, "every service up and waiting for Postgres", func() bool {
		for _, n := range names {
			if p.service(n).readyStatus() != http.StatusServiceUnavailable {
				return false
			}
		}
		return true
	})
	time.Sleep(5 * time.Second)
	for _, n := range names {
		checkNoExit(t, p.service(n), "Postgres was down")
	}
	p.pg.Start()
	for _, n := range names {
		p.service(n).waitReady(90 * time.Second)
	}
	exp := expectation{db: "late", class: "pgboot", instances: 1, applied: 2}
	p.create(exp.db, exp.class, "x", map[string]any{"v": 1})
	p.patch(exp.db, exp.class, "x", map[string]any{"v": 2})
	p.waitDrained(90 * time.Second)
	p.checkEndState(exp)
}

// checkNoExit fails the test unless s was started once and never exited.
func checkNoExit(t *testing.T, s *service, while string) {
	t.Helper()
	s.mu.Lock()
	exits := maps.Clone(s.exits)
	s.mu.Unlock()
	if s.startCount() != 1 || len(exits) != 0 {
		t.Errorf("%s started %d times (exits %v) while %s, want one start and no exit", s.name, s.startCount(), exits, while)
	}
}
