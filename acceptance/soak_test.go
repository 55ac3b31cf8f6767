package acceptance

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/internal/testenv"
)

// soakDuration is the load-and-faults phase of the chaos soak:
// SLUICE_SOAK (a Go duration, `make soak` sets minutes), else 45 s.
func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	if v := os.Getenv("SLUICE_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("SLUICE_SOAK=%q: want a positive Go duration (5m)", v)
		}
		return d
	}
	return 45 * time.Second
}

// soakSeed is SLUICE_SOAK_SEED, else the clock: the seed is logged so a
// failing run can be replayed with the same fault schedule.
func soakSeed(t *testing.T) uint64 {
	t.Helper()
	if v := os.Getenv("SLUICE_SOAK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SLUICE_SOAK_SEED=%q: %v", v, err)
		}
		return s
	}
	return uint64(time.Now().UnixNano())
}

// faultCounts counts the faults a soak's controller injected and keeps,
// for faults that act on later requests, a counter of the requests each
// one actually hit.
type faultCounts struct {
	mu    sync.Mutex
	n     map[string]int
	fired map[string][]func() int64
}

func newFaultCounts() *faultCounts {
	return &faultCounts{n: map[string]int{}, fired: map[string][]func() int64{}}
}

func (f *faultCounts) add(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n[name]++
}

// addFired counts an injected fault whose hits hit reports.
func (f *faultCounts) addFired(name string, hit func() int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n[name]++
	f.fired[name] = append(f.fired[name], hit)
}

func (f *faultCounts) get(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[name]
}

// check fails the test for every kind in kinds that was never injected,
// or whose injections (when they report hits) never hit a request: a soak
// must prove its faults happened, not only that it drew them.
func (f *faultCounts) check(t *testing.T, kinds []string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range kinds {
		if f.n[k] == 0 {
			t.Errorf("fault %s was never injected", k)
			continue
		}
		if hits := f.fired[k]; len(hits) > 0 {
			var n int64
			for _, h := range hits {
				n += h()
			}
			if n == 0 {
				t.Errorf("fault %s was injected %d times and never hit a request", k, f.n[k])
			}
		}
	}
}

func (f *faultCounts) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.n))
	for k := range f.n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		part := fmt.Sprintf("%s=%d", k, f.n[k])
		if hits := f.fired[k]; len(hits) > 0 {
			var n int64
			for _, h := range hits {
				n += h()
			}
			part += fmt.Sprintf("(hit %d requests)", n)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, " ")
}

// checkKills requires every kill a soak counted to have ended its process
// (an exit by SIGKILL, code -1, for each).
func checkKills(t *testing.T, p *pipeline, names ...string) {
	t.Helper()
	for _, n := range names {
		s := p.service(n)
		s.mu.Lock()
		kills, killed := s.kills, s.exits[-1]
		s.mu.Unlock()
		if killed != kills {
			t.Errorf("%s: %d kills sent, %d exits by SIGKILL", n, kills, killed)
		}
	}
}

// soakInstance is the load generator's model of one instance.
type soakInstance struct {
	id      string
	state   map[string]any
	deleted bool
	slot    int64 // slot of the last command (= document version)
}

// soakCmd is one acknowledged command.
type soakCmd struct {
	eventID string
	kind    string
}

// soakLoad is one load-generating client: it owns its instances and sends
// their commands one at a time (each retried with its Idempotency-Key until
// acknowledged), so the model knows the order of every instance's slots.
type soakLoad struct {
	p     *pipeline
	db    string
	class string
	name  string
	rng   *rand.Rand
	insts []*soakInstance
	cmds  []soakCmd
	errs  []error
	// api names the API service the client sends to ("" = "api").
	api string
}

func (l *soakLoad) run(ctx context.Context) {
	n := 0
	send := func(method, path string, body any) (accepted, bool) {
		n++
		key := fmt.Sprintf("soak-%s-%d", l.name, n)
		api := cmp.Or(l.api, "api")
		a, err := l.p.commandVia(api, method, path, body, key, 3*time.Minute)
		if err != nil {
			l.errs = append(l.errs, fmt.Errorf("%s %s (key %s): %w", method, path, key, err))
			return a, false
		}
		return a, true
	}
	for ctx.Err() == nil {
		var live []*soakInstance
		for _, in := range l.insts {
			if !in.deleted {
				live = append(live, in)
			}
		}
		switch r := l.rng.Float64(); {
		case len(live) < 4 || r < 0.25:
			id := fmt.Sprintf("%s-%d", l.name, len(l.insts))
			state := map[string]any{"owner": l.name, "v": float64(0)}
			a, ok := send(http.MethodPost, instancesPath(l.db, l.class), map[string]any{"instance_id": id, "data": state})
			if !ok {
				return
			}
			l.insts = append(l.insts, &soakInstance{id: id, state: state, slot: a.SequenceNumber})
			l.cmds = append(l.cmds, soakCmd{a.EventID, "create"})
		case r < 0.33:
			in := live[l.rng.IntN(len(live))]
			a, ok := send(http.MethodDelete, instancePath(l.db, l.class, in.id), nil)
			if !ok {
				return
			}
			in.deleted, in.slot = true, a.SequenceNumber
			l.cmds = append(l.cmds, soakCmd{a.EventID, "delete"})
		default:
			in := live[l.rng.IntN(len(live))]
			v := in.state["v"].(float64) + 1
			patch := map[string]any{"v": v, fmt.Sprintf("f%d", int(v)%5): v}
			a, ok := send(http.MethodPatch, instancePath(l.db, l.class, in.id), patch)
			if !ok {
				return
			}
			for k, x := range patch {
				in.state[k] = x
			}
			in.slot = a.SequenceNumber
			l.cmds = append(l.cmds, soakCmd{a.EventID, "patch"})
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(40+l.rng.IntN(80)) * time.Millisecond):
		}
	}
}

// chaosFault is one kind of fault of the chaos soak: inject reports
// whether it was injected (a kill finds no process while one restarts).
type chaosFault struct {
	name   string
	inject func(rng *rand.Rand, faults *faultCounts) bool
}

// chaosFaults are the kinds of fault the chaos soak injects, each at least
// once per soak (chaos).
func chaosFaults(ctx context.Context, p *pipeline) []chaosFault {
	var out []chaosFault
	for _, name := range []string{"relay", "instance-worker", "projection-worker", "api"} {
		out = append(out, chaosFault{"kill_" + name, func(_ *rand.Rand, faults *faultCounts) bool {
			if !p.service(name).kill() { // the supervisor restarts it
				return false
			}
			faults.add("kill_" + name)
			return true
		}})
	}
	cut := func(name string, proxy *testenv.Proxy) chaosFault {
		return chaosFault{name, func(rng *rand.Rand, faults *faultCounts) bool {
			faults.add(name)
			proxy.Stop()
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(1000+rng.IntN(2000)) * time.Millisecond):
			}
			proxy.Start()
			return true
		}}
	}
	// Postgres and MinIO unreachable for every service for 1–3 s.
	out = append(out, cut("pg_cut", p.pg), cut("minio_cut", p.s3))
	// Kafka: the next 1–3 requests of one kind lose their connection.
	for _, k := range []struct {
		name string
		key  kmsg.Key
	}{{"produce", kmsg.Produce}, {"fetch", kmsg.Fetch}, {"offset_commit", kmsg.OffsetCommit}, {"metadata", kmsg.Metadata}} {
		out = append(out, chaosFault{"kafka_drop_" + k.name, func(rng *rand.Rand, faults *faultCounts) bool {
			dropped := kafkaFault(p.kafka.Cluster, k.key, int32(1+rng.IntN(3)))
			faults.addFired("kafka_drop_"+k.name, func() int64 { return int64(dropped.Load()) })
			return true
		}})
	}
	// Elasticsearch answers 429 or 503 to the next 3–10 requests.
	for _, st := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		name := fmt.Sprintf("es_%d", st)
		out = append(out, chaosFault{name, func(rng *rand.Rand, faults *faultCounts) bool {
			var hit atomic.Int64
			p.es.InjectFault(esserver.Fault{Status: st, Times: 3 + rng.IntN(8),
				Match: func(*http.Request) bool { hit.Add(1); return true }})
			faults.addFired(name, hit.Load)
			return true
		}})
	}
	return out
}

// chaos injects one fault every 1–2.5 s until ctx ends, in a shuffled
// round-robin over kinds (every kind once per round, in a random order), so
// that a soak of 45 s injects every kind at least once (a round takes at
// most 12 × 2.5 s + 2 × 3 s of cuts). A fault that could not be injected is
// tried again later in the round.
func chaos(ctx context.Context, rng *rand.Rand, kinds []chaosFault, faults *faultCounts) {
	var round []chaosFault
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(1000+rng.IntN(1500)) * time.Millisecond):
		}
		if len(round) == 0 {
			round = slices.Clone(kinds)
			rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		}
		f := round[0]
		round = round[1:]
		if !f.inject(rng, faults) {
			round = append(round, f)
		}
	}
}

// TestChaosSoak is the chaos soak: a steady load of creates, patches and
// deletes through the API while a controller kills and restarts the relay,
// the workers and the API, cuts Postgres and MinIO for seconds, drops Kafka
// connections and makes Elasticsearch answer 429 and 503. Then the faults
// stop, the pipeline drains, and the end state must show 0 lost commands,
// 0 duplicated side effects and a read model equal to the event store (and
// to the load generator's own model). SLUICE_SOAK lengthens it (make soak).
func TestChaosSoak(t *testing.T) {
	t.Parallel()
	dur, seed := soakDuration(t), soakSeed(t)
	t.Logf("chaos soak: %s of load and faults, SLUICE_SOAK_SEED=%d", dur, seed)
	p := newPipeline(t, setup{
		partitions: 3,
		pgProxied:  []string{"api", "relay", "instance-worker", "projection-worker"},
		s3Proxied:  true,
		allow5xx:   true, // the API is killed and its dependencies cut on purpose
	})
	p.startDefault()
	const db, class = "soak", "items"

	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	faults := newFaultCounts()
	kinds := chaosFaults(ctx, p)
	var loads []*soakLoad
	var wg sync.WaitGroup
	for i := range 3 {
		l := &soakLoad{p: p, db: db, class: class, name: fmt.Sprintf("c%d", i), rng: rand.New(rand.NewPCG(seed, uint64(i)))}
		loads = append(loads, l)
		wg.Add(1)
		go func() { defer wg.Done(); l.run(ctx) }()
	}
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		chaos(ctx, rand.New(rand.NewPCG(seed, 99)), kinds, faults)
	}()
	<-chaosDone
	wg.Wait() // the last commands finish (retried until acknowledged)
	p.es.ClearFaults()
	start := time.Now()
	for _, n := range []string{"api", "relay", "instance-worker", "projection-worker"} {
		p.service(n).waitReady(2 * time.Minute)
	}
	p.waitDrained(4 * time.Minute)
	drain := time.Since(start).Round(100 * time.Millisecond)

	var errs []error
	var acked, creates, patches, deletes int
	insts := map[string]*soakInstance{}
	var cmds []soakCmd
	for _, l := range loads {
		errs = append(errs, l.errs...)
		cmds = append(cmds, l.cmds...)
		for _, in := range l.insts {
			insts[in.id] = in
		}
	}
	for _, c := range cmds {
		acked++
		switch c.kind {
		case "create":
			creates++
		case "patch":
			patches++
		case "delete":
			deletes++
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("commands the API did not acknowledge: %v", err)
	}
	if acked == 0 {
		t.Fatal("the load generator got no command acknowledged")
	}

	// Lost: an acknowledged command without a done, applied registry row.
	rows := map[string]regRow{}
	for _, r := range p.registry(instanceHandler, db+":") {
		rows[r.EventID] = r
	}
	lost := 0
	for _, c := range cmds {
		if r, ok := rows[c.eventID]; !ok || r.Status != "done" || r.Result != "applied" {
			lost++
			if lost <= 10 {
				t.Errorf("acknowledged %s command %s: registry row %+v", c.kind, c.eventID, r)
			}
		}
	}
	if len(rows) != acked {
		t.Errorf("%d instance-worker registry rows for %d acknowledged commands", len(rows), acked)
	}
	// Duplicates: more domain events than commands, a document version
	// written twice, a history document missing or extra.
	doms := p.storeEvents("domain", db+":")
	dupEvents := max(len(doms)-acked, 0)
	if len(doms) != acked {
		t.Errorf("%d domain events for %d acknowledged commands", len(doms), acked)
	}
	dupWrites := p.writes.duplicates()
	hist := p.historyDocs(db)
	// Both ways: a history document of no domain event is extra.
	hd := diffHistory(doms, hist)
	histExtra := len(hd.Extra) + len(hd.WrongSeq)
	if histExtra > 0 {
		t.Errorf("history of %s: %d documents of no domain event %v, %d with another sequence_number %v",
			db, len(hd.Extra), hd.Extra[:min(10, len(hd.Extra))], len(hd.WrongSeq), hd.WrongSeq[:min(10, len(hd.WrongSeq))])
	}
	histRows := map[string]regRow{}
	for _, r := range p.registry(historyHandler, db+":") {
		histRows[r.EventID] = r
	}
	// Late publication (docs/acceptance.md): a domain event whose append
	// the relay abandoned after EVENT_STORE_APPEND_TIMEOUT and the instance
	// worker then re-committed at its old position is published after newer
	// events of its aggregate. History is unguarded (claim.Unguarded), so
	// it must still have its document like every other event; such events
	// are counted to show the case was exercised.
	late := p.publishedAfterNewer(eventsTopic)
	histMissing, latePublished := 0, 0
	for _, d := range doms {
		r := histRows[d.EventID]
		if late[d.EventID] {
			latePublished++
		}
		switch {
		case r.Status != "done":
			t.Errorf("history row of %s (%s #%d, published after a newer event: %t) is %q", d.EventID, d.AggregateID, d.Seq, late[d.EventID], r.Status)
			histMissing++
		default:
			if _, ok := hist[d.EventID]; !ok {
				t.Errorf("domain event %s (%s #%d) is done without a history document", d.EventID, d.AggregateID, d.Seq)
				histMissing++
			}
		}
	}
	// Read model = event store (sluice verify) = the client's model.
	rep := p.verify(db, class, len(insts))
	mismatches := 0
	for _, in := range insts {
		doc := p.instanceDoc(db, class, in.id)
		ok := doc.Found && doc.Version == in.slot && doc.Source["deleted"] == in.deleted
		if ok && !in.deleted {
			for k, v := range in.state {
				ok = ok && doc.Source[k] == v
			}
		}
		if !ok {
			mismatches++
			if mismatches <= 10 {
				t.Errorf("instance %s: document found %t _version %d %v; client model slot %d deleted %t state %v",
					in.id, doc.Found, doc.Version, doc.Source, in.slot, in.deleted, in.state)
			}
		}
	}
	dlq := p.records(commandsDLQ) + p.records(eventsDLQ)
	restarts := map[string]string{}
	badExits := 0 // exits the controller did not cause: outages pause a service, they never end it
	for _, n := range []string{"api", "relay", "instance-worker", "projection-worker"} {
		s := p.service(n)
		s.mu.Lock()
		restarts[n] = fmt.Sprintf("%d (exit codes %v)", s.starts-1, s.exits)
		for code, k := range s.exits {
			if code != -1 { // -1: killed by the controller
				badExits += k
				t.Errorf("%s exited %d times with code %d during the soak (see its log)", n, k, code)
			}
		}
		s.mu.Unlock()
	}
	// Every kind of fault happened (and hit a request, where that can be
	// seen), and every kill ended its process.
	var kindNames []string
	for _, k := range kinds {
		kindNames = append(kindNames, k.name)
	}
	faults.check(t, kindNames)
	checkKills(t, p, "api", "relay", "instance-worker", "projection-worker")
	// Finished writes sent again: at most one per retried attempt.
	conf := p.checkConflicts(false)
	result := "PASS"
	if t.Failed() || lost > 0 || dupEvents > 0 || len(dupWrites) > 0 || histMissing > 0 || histExtra > 0 || mismatches > 0 || dlq > 0 || rep.OK != len(insts) || len(errs) > 0 || badExits > 0 {
		result = "FAIL"
	}
	t.Logf("chaos soak summary: load %s, drain %s, seed %d; %d commands acknowledged (%d creates, %d patches, %d deletes) on %d instances; "+
		"faults injected: %s; API 5xx answers (retried): %d; restarts: %v; verification: lost=%d duplicate_domain_events=%d duplicate_es_writes=%d missing_history=%d extra_history=%d "+
		"read_model_mismatches=%d dlq_records=%d sluice_verify=%d/%d ok; late_published_domain_events=%d (each with its history document); "+
		"es_write_conflicts=%d (≤ %d retried attempts) => %s",
		dur, drain, seed, acked, creates, patches, deletes, len(insts), faults, p.api5xx.Load(), restarts, lost, dupEvents, len(dupWrites), histMissing, histExtra,
		mismatches, dlq, rep.OK, rep.Instances, latePublished, conf.es, conf.retried, result)
	if len(dupWrites) > 0 {
		t.Errorf("document versions written twice: %v", dupWrites)
	}
	if dlq > 0 {
		t.Errorf("%d DLQ records (faults are transient: nothing may be dead-lettered)", dlq)
		for _, topic := range []string{commandsDLQ, eventsDLQ} {
			for _, r := range p.readTopic(topic) {
				t.Logf("DLQ %s: %.600s", topic, r.Value)
			}
		}
	}
}

// publishedAfterNewer returns the event ids whose first record in topic
// came, in its partition, after a record of the same key with a higher
// sequence number (out of per-aggregate order).
func (p *pipeline) publishedAfterNewer(topic string) map[string]bool {
	p.t.Helper()
	out, seen := map[string]bool{}, map[string]bool{}
	highest := map[string]int64{} // partition/key → highest sequence number so far
	for _, r := range p.readTopic(topic) {
		var e struct {
			EventID string `json:"event_id"`
			Seq     int64  `json:"sequence_number"`
		}
		if err := json.Unmarshal(r.Value, &e); err != nil {
			continue
		}
		k := fmt.Sprintf("%d/%s", r.Partition, r.Key)
		if !seen[e.EventID] && e.Seq < highest[k] {
			out[e.EventID] = true
		}
		seen[e.EventID] = true
		highest[k] = max(highest[k], e.Seq)
	}
	return out
}
