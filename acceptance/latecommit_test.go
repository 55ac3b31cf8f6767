package acceptance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/eventstoretest"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Settings of the late-commit scenario (issue #33, must-show 2).
const (
	lateShards   = 4
	lateHealthy  = 2 // API processes that keep appending while the victim is frozen
	lateClients  = 4 // closed-loop clients, spread over the healthy APIs
	lateAggs     = 3 // aggregates per shard and client
	lateLookback = time.Second
	latePoll     = 200 * time.Millisecond
	// lateFreezeBound bounds the freeze: it ends on evidence (Kafka
	// contents, index rows), this only bounds how long the test hangs. It
	// stays below the victim's S3 response-header timeout (30 s), so the
	// frozen PUT's answer is read when the victim wakes, and below the
	// append timeout of the "within" case.
	lateFreezeBound = 20 * time.Second
)

// TestLateCommitFrozenWriter is the late commit of issue #33 with real
// processes: a store of 4 shards, one relay process, three API processes.
// One API process (the victim) reaches MinIO through putHold, an HTTP
// proxy that holds the victim's first segment PUT: at that moment the
// victim's reservation is committed in Postgres and its commit is not
// (docs/eventstore.md#append-protocol-group-commit), so the test freezes
// it there with SIGSTOP — no product test hook. While it is frozen, for
// longer than EVENT_PUBLISHER_LOOKBACK_SECONDS by construction, the two
// other API processes go on appending to aggregates of every shard,
// including a later command of the victim's aggregate. Then SIGCONT.
//
// The two cases are the two sides of EVENT_STORE_APPEND_TIMEOUT
// (docs/relay.md#what-it-does-per-cycle, docs/eventstore.md "Abandoned is
// final"):
//
//   - within: the freeze is shorter than the append timeout and the
//     frozen PUT lands while the victim is frozen. The reservation is in
//     flight (hole rule 2): the relay holds back only the victim's
//     aggregate; the other three shards, and the victim's shard's other
//     aggregates, are published while it is frozen. When the victim wakes
//     it commits at its reserved position and its aggregate's events
//     follow in order.
//   - past: the freeze outlives the append timeout and the PUT is held
//     until the relay has abandoned the reservation (rule 3: no segment)
//     and the abandoned gap has left the lookback; then the PUT lands and
//     the victim wakes. Its commit finds the rows abandoned and appends
//     the envelope again at a fresh position (abandoned is final), which
//     is published like any new append.
//
// Both end with: every acknowledged command (202) in sluice.commands
// exactly once by event_id, at the sequence number the API acknowledged,
// nothing published that was not acknowledged, and per-aggregate order on
// every Kafka key. The hold-up per shard (acknowledgement → first seen in
// Kafka, worst over the commands acknowledged while the victim was
// frozen) is printed.
func TestLateCommitFrozenWriter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		appendTimeout time.Duration
		pastTimeout   bool
	}{
		{name: "within_append_timeout", appendTimeout: 90 * time.Second},
		{name: "past_append_timeout", appendTimeout: 2 * time.Second, pastTimeout: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runLateCommit(t, tc.appendTimeout, tc.pastTimeout)
		})
	}
}

func runLateCommit(t *testing.T, appendTimeout time.Duration, pastTimeout bool) {
	if !pastTimeout && appendTimeout <= lateFreezeBound {
		t.Fatalf("the append timeout %v must exceed the freeze bound %v in the within case", appendTimeout, lateFreezeBound)
	}
	p := newPipeline(t, setup{partitions: 2, env: map[string]string{
		"EVENT_STORE_SHARDS":               strconv.Itoa(lateShards),
		"EVENT_STORE_APPEND_TIMEOUT":       appendTimeout.String(),
		"EVENT_PUBLISHER_LOOKBACK_SECONDS": strconv.Itoa(int(lateLookback / time.Second)),
		"EVENT_PUBLISHER_POLL_INTERVAL":    latePoll.String(),
	}})
	hold := newPutHold(t, p.minio.Endpoint, p.bucket)
	victim := p.add("api-victim", kindAPI, map[string]string{
		"EVENT_STORE_S3_ENDPOINT": hold.url,
		// The frozen PUT must not time out in the victim: its answer is
		// waiting in the socket when it wakes.
		"EVENT_STORE_OBJECT_TIMEOUT": "2m",
	})
	// Registered after newPipeline's stopAll, so it runs first: a frozen
	// process would not act on SIGTERM.
	t.Cleanup(func() { _ = victim.signal(syscall.SIGCONT); hold.releaseAll() })
	var healthy []*service
	for i := range lateHealthy {
		healthy = append(healthy, p.add(fmt.Sprintf("api-%d", i), kindAPI, nil))
	}
	rel := p.add("relay", kindRelay, nil)
	for _, s := range append([]*service{victim, rel}, healthy...) {
		s.start()
	}
	for _, s := range append([]*service{victim, rel}, healthy...) {
		s.waitReady(90 * time.Second)
	}
	tail := newTopicTail(t, p, commandsTopic)

	const db, class = "late", "items"
	aggs := lateAggregates(t, db, class)
	// V: the victim's aggregate, the first id of its own.
	vID, vAgg, vShard := lateVictimAggregate(t, db, class)
	acks := &ackLog{}
	mustAck := func(apiName, method, path string, body any, key string) ackRec {
		sent := time.Now()
		a, err := p.commandVia(apiName, method, path, body, key, time.Minute)
		if err != nil {
			t.Fatalf("%s %s via %s: %v", method, path, apiName, err)
		}
		return acks.add(a, apiName, sent)
	}
	// V's first command through a healthy API, published before the freeze.
	v1 := mustAck(healthy[0].name, http.MethodPost, instancesPath(db, class), map[string]any{"instance_id": vID, "data": map[string]any{"v": 0}}, "late-v-1")
	waitFor(t, 30*time.Second, "V's first command in Kafka", func() bool { return tail.seenAt(v1.eventID) != nil })

	// The victim's append of V: held at its segment PUT, then frozen.
	hold.arm()
	vKey := "late-v-2"
	vEventID := api.EventIDForCommand(vKey)
	victimDone := make(chan victimResult, 1)
	vSent := time.Now()
	go func() {
		victimDone <- victimCommand(p, victim, http.MethodPatch, instancePath(db, class, vID), map[string]any{"v": 1}, vKey)
	}()
	var heldPath string
	select {
	case heldPath = <-hold.caught:
	case r := <-victimDone:
		t.Fatalf("the victim answered before its segment PUT was held: %d %s %v", r.code, r.body, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the victim's segment PUT never reached the proxy")
	}
	if err := victim.signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP the victim: %v", err)
	}
	frozenAt := time.Now()
	vRow := lateIndexRow(t, p, vEventID)
	if vRow.State != eventstore.StateReserved {
		t.Fatalf("the victim's row is %s at the freeze, want reserved (its PUT %s is held)", vRow.State, heldPath)
	}
	t.Logf("victim frozen (SIGSTOP) with its segment PUT %s held; its reservation: shard %d position %d, %s #%d",
		heldPath, vShard, vRow.Position, vAgg, vRow.SequenceNumber)
	if !pastTimeout {
		// The PUT lands while the writer is frozen: the realistic case of a
		// process stopped after sending its request.
		if st := hold.forward(); st != http.StatusOK {
			t.Fatalf("MinIO answered the held PUT with %d", st)
		}
	}

	// The load: closed-loop clients through the healthy APIs, every shard.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var loadErr atomic.Value
	for c := range lateClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := lateLoad(ctx, p, acks, healthy[c%len(healthy)].name, db, class, c, aggs); err != nil {
				loadErr.Store(err)
			}
		}()
	}
	// A later command of V through a healthy API: acknowledged, and held
	// behind the frozen reservation (within) or published after the
	// abandoned slot (past).
	v3 := mustAck(healthy[1].name, http.MethodPatch, instancePath(db, class, vID), map[string]any{"v": 2}, "late-v-3")

	// Evidence while frozen, for longer than the lookback by construction:
	// every shard, the victim's included, publishes commands of other
	// aggregates sent after frozenAt + twice the lookback + one poll, and
	// after V's later command was acknowledged: their reservations came
	// after V's later one, so on V's shard the relay has walked past its
	// position (the within case's negative asserts below rely on that).
	cut := frozenAt.Add(2*lateLookback + latePoll)
	if v3.at.After(cut) {
		cut = v3.at
	}
	var waiting []int // shards without that evidence yet
	publishedAfterCut := func() bool {
		if loadErr.Load() != nil {
			return true // reported below
		}
		waiting = waiting[:0]
		for sh := range lateShards {
			if !acks.any(func(a ackRec) bool {
				return a.shard == sh && a.agg != vAgg && a.sent.After(cut) && tail.seenAt(a.eventID) != nil
			}) {
				waiting = append(waiting, sh)
			}
		}
		return len(waiting) == 0
	}
	untilFrozen := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(lateFreezeBound); !cond(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("victim frozen %v: %s did not happen; shards %v published nothing sent after frozen + 2 × lookback + poll and V's later command (victim's shard %d)",
					time.Since(frozenAt).Round(time.Millisecond), what, waiting, vShard)
			}
		}
	}
	if pastTimeout {
		// The relay abandons the reservation (no segment: rule 3), the
		// abandoned gap leaves the lookback, and V's later command is
		// published behind the abandoned slot.
		untilFrozen("the frozen reservation abandoned, its gap expired from the lookback, V's later command published and every shard past the lookback", func() bool {
			return lateIndexRow(t, p, vEventID).State == eventstore.StateAbandoned &&
				rel.metric("sluice_relay_gap_resolutions_total", `resolution="expired"`, fmt.Sprintf(`shard="%d"`, vShard)) >= 1 &&
				tail.seenAt(v3.eventID) != nil && publishedAfterCut()
		})
		// Now the PUT lands, the writer still frozen.
		if st := hold.forward(); st != http.StatusOK {
			t.Fatalf("MinIO answered the held PUT with %d", st)
		}
	} else {
		untilFrozen("every shard, the victim's other aggregates included, publishing past the lookback", publishedAfterCut)
		// Positive evidence first (above: V's shard published commands
		// sent after V's later one was acknowledged), then the negative asserts: the
		// reservation is still in flight, and nothing of V after it was
		// published.
		if r := lateIndexRow(t, p, vEventID); r.State != eventstore.StateReserved {
			t.Fatalf("the frozen reservation is %s before the append timeout, want reserved", r.State)
		}
		if tail.seenAt(v3.eventID) != nil {
			t.Errorf("V's command #%d was published while its predecessor #%d is in flight", v3.seq, vRow.SequenceNumber)
		}
		if ck := rel.metric("sluice_relay_checkpoint_position", fmt.Sprintf(`shard="%d"`, vShard)); int64(ck) >= vRow.Position {
			t.Errorf("shard %d's checkpoint is %v, at or past the position %d in flight", vShard, ck, vRow.Position)
		}
		if g := rel.metric("sluice_relay_pending_gaps", fmt.Sprintf(`shard="%d"`, vShard)); g != 0 {
			t.Errorf("shard %d has %v pending gaps: the position in flight was passed", vShard, g)
		}
	}
	if err := loadErr.Load(); err != nil {
		t.Fatalf("load: %v", err)
	}
	if sent := hold.count(); sent != 1 {
		t.Errorf("the proxy saw %d segment PUTs of the victim, want 1", sent)
	}
	thawAt := time.Now()
	if err := victim.signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT the victim: %v", err)
	}
	var vr victimResult
	select {
	case vr = <-victimDone:
	case <-time.After(time.Minute):
		t.Fatal("the victim did not answer within a minute of SIGCONT")
	}
	if vr.err != nil || vr.code != http.StatusAccepted {
		t.Fatalf("the victim's command: %d %s %v, want 202", vr.code, vr.body, vr.err)
	}
	v2 := acks.add(vr.acc, victim.name, vSent)
	cancel()
	wg.Wait()
	if err := loadErr.Load(); err != nil {
		t.Fatalf("load: %v", err)
	}
	row := lateIndexRow(t, p, vEventID)
	t.Logf("victim frozen %v (lookback %v, append timeout %v); its command acknowledged at shard %d position %d #%d (reserved at position %d #%d)",
		thawAt.Sub(frozenAt).Round(time.Millisecond), lateLookback, appendTimeout, vShard, row.Position, v2.seq, vRow.Position, vRow.SequenceNumber)
	switch {
	case !pastTimeout && (row.Position != vRow.Position || v2.seq != vRow.SequenceNumber):
		t.Errorf("within the append timeout the late commit must keep its reservation: committed at %d #%d, reserved %d #%d",
			row.Position, v2.seq, vRow.Position, vRow.SequenceNumber)
	case pastTimeout && row.Position <= vRow.Position:
		t.Errorf("past the append timeout the late writer's envelope must move to a fresh position: at %d, abandoned %d", row.Position, vRow.Position)
	}

	// Every acknowledged command published (polled until the relay has
	// caught up, then checked and reported by event id).
	all := acks.all()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if !slices.ContainsFunc(all, func(a ackRec) bool { return tail.seenAt(a.eventID) == nil }) {
			break
		}
	}
	checkLatePublished(t, p, all)
	reportHoldUps(t, tail, all, frozenAt, thawAt, vAgg, vShard, vSent, v2.eventID)
}

// victimResult is the victim API's answer.
type victimResult struct {
	code int
	body []byte
	acc  accepted
	err  error
}

// victimCommand sends one command to the victim with a client that waits
// as long as the freeze lasts (the pipeline's client gives up after 15 s).
func victimCommand(p *pipeline, victim *service, method, path string, body any, key string) victimResult {
	b, err := json.Marshal(body)
	if err != nil {
		return victimResult{err: err}
	}
	req, err := http.NewRequest(method, "http://"+victim.httpAddr+path, bytes.NewReader(b))
	if err != nil {
		return victimResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
	if err != nil {
		return victimResult{err: err}
	}
	defer resp.Body.Close()
	out := victimResult{code: resp.StatusCode}
	out.body, out.err = io.ReadAll(resp.Body)
	if out.err == nil && out.code == http.StatusAccepted {
		out.err = json.Unmarshal(out.body, &out.acc)
	}
	if out.code >= 500 {
		p.note5xx(method, path, key, out.code, out.body)
	}
	return out
}

// signal sends sig to the service's running process.
func (s *service) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return fmt.Errorf("%s has no process", s.name)
	}
	return syscall.Kill(s.proc.Pid, sig)
}

// lateIndexRow is the index row of eventID.
func lateIndexRow(t *testing.T, p *pipeline, eventID string) eventstore.IndexEntry {
	t.Helper()
	ctx, cancel := p.ctx(10 * time.Second)
	defer cancel()
	rows, err := eventstoretest.Select(ctx, p.pool, eventstoretest.Filter{EventID: eventID})
	if err != nil || len(rows) != 1 {
		t.Fatalf("index row of %s: %v %v", eventID, rows, err)
	}
	return rows[0]
}

// lateAgg is one aggregate of the load.
type lateAgg struct {
	id, agg string
	shard   int
}

// lateAggregates picks lateAggs instance ids per shard and client, so
// that every client appends to every shard.
func lateAggregates(t *testing.T, db, class string) [lateClients][]lateAgg {
	var out [lateClients][]lateAgg
	n := [lateShards]int{}
	for i := 0; slices.Min(n[:]) < lateClients*lateAggs; i++ {
		id := fmt.Sprintf("a%d", i)
		agg, err := envelope.InstanceAggregateID(db, class, id)
		if err != nil {
			t.Fatal(err)
		}
		sh := eventstore.ShardOf(envelope.AggregateTypeInstance, agg, lateShards)
		if n[sh] >= lateClients*lateAggs {
			continue
		}
		c := n[sh] % lateClients
		n[sh]++
		out[c] = append(out[c], lateAgg{id: id, agg: agg, shard: sh})
	}
	return out
}

// lateVictimAggregate is V, the aggregate the victim appends to.
func lateVictimAggregate(t *testing.T, db, class string) (id, agg string, shard int) {
	id = "victim"
	agg, err := envelope.InstanceAggregateID(db, class, id)
	if err != nil {
		t.Fatal(err)
	}
	return id, agg, eventstore.ShardOf(envelope.AggregateTypeInstance, agg, lateShards)
}

// lateLoad appends through apiName, round robin over its aggregates: a
// create first, then patches, until ctx ends.
func lateLoad(ctx context.Context, p *pipeline, acks *ackLog, apiName, db, class string, client int, aggs [lateClients][]lateAgg) error {
	mine := aggs[client]
	created := make([]bool, len(mine))
	for n := 0; ctx.Err() == nil; n++ {
		k := n % len(mine)
		key := fmt.Sprintf("late-c%d-%d", client, n)
		var a accepted
		var err error
		sent := time.Now()
		if !created[k] {
			a, err = p.commandVia(apiName, http.MethodPost, instancesPath(db, class), map[string]any{"instance_id": mine[k].id, "data": map[string]any{"v": 0}}, key, time.Minute)
			created[k] = err == nil
		} else {
			a, err = p.commandVia(apiName, http.MethodPatch, instancePath(db, class, mine[k].id), map[string]any{"v": n}, key, time.Minute)
		}
		if err != nil {
			return fmt.Errorf("client %d via %s (key %s): %w", client, apiName, key, err)
		}
		acks.add(a, apiName, sent)
	}
	return nil
}

// ackRec is one acknowledged command: sent is when its request was sent,
// at when it was acknowledged.
type ackRec struct {
	eventID, agg, api string
	shard             int
	seq               int64
	sent, at          time.Time
}

// ackLog holds every acknowledgement.
type ackLog struct {
	mu   sync.Mutex
	recs []ackRec
}

func (l *ackLog) add(a accepted, apiName string, sent time.Time) ackRec {
	r := ackRec{eventID: a.EventID, agg: a.AggregateID, api: apiName, seq: a.SequenceNumber, sent: sent, at: time.Now(),
		shard: eventstore.ShardOf(envelope.AggregateTypeInstance, a.AggregateID, lateShards)}
	l.mu.Lock()
	l.recs = append(l.recs, r)
	l.mu.Unlock()
	return r
}

func (l *ackLog) any(f func(ackRec) bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.recs, f)
}

func (l *ackLog) all() []ackRec {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.recs)
}

// topicTail consumes a topic from its start for the whole test and keeps
// when each event id was first seen.
type topicTail struct {
	mu    sync.Mutex
	first map[string]time.Time
}

func newTopicTail(t *testing.T, p *pipeline, topic string) *topicTail {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.kafka.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	tt := &topicTail{first: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				var e struct {
					EventID string `json:"event_id"`
				}
				if json.Unmarshal(r.Value, &e) != nil {
					return
				}
				tt.mu.Lock()
				if _, ok := tt.first[e.EventID]; !ok {
					tt.first[e.EventID] = now
				}
				tt.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return tt
}

// seenAt is when eventID was first seen, nil if not yet.
func (tt *topicTail) seenAt(eventID string) *time.Time {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if at, ok := tt.first[eventID]; ok {
		return &at
	}
	return nil
}

// checkLatePublished reads sluice.commands in full: every acknowledged
// command exactly once, at its acknowledged sequence number, nothing
// else, and on every key the sequence numbers rise in offset order.
func checkLatePublished(t *testing.T, p *pipeline, acked []ackRec) {
	t.Helper()
	want := map[string]ackRec{}
	for _, a := range acked {
		want[a.eventID] = a
	}
	count := map[string]int{}
	last := map[string]int64{} // partition/key → last sequence number
	for _, r := range p.readTopic(commandsTopic) {
		var e struct {
			EventID string `json:"event_id"`
			Seq     int64  `json:"sequence_number"`
			Agg     string `json:"aggregate_id"`
		}
		if err := json.Unmarshal(r.Value, &e); err != nil {
			t.Fatalf("%s record %d/%d: %v", commandsTopic, r.Partition, r.Offset, err)
		}
		count[e.EventID]++
		a, ok := want[e.EventID]
		switch {
		case !ok:
			t.Errorf("%s holds %s (%s #%d), which no API acknowledged", commandsTopic, e.EventID, e.Agg, e.Seq)
		case a.seq != e.Seq:
			t.Errorf("%s: %s published as #%d, acknowledged as #%d", commandsTopic, e.EventID, e.Seq, a.seq)
		}
		k := fmt.Sprintf("%d/%s", r.Partition, r.Key)
		if e.Seq <= last[k] {
			t.Errorf("%s: %s #%d at offset %d/%d after #%d of its aggregate", commandsTopic, e.EventID, e.Seq, r.Partition, r.Offset, last[k])
		}
		last[k] = max(last[k], e.Seq)
	}
	missing, twice := 0, 0
	for _, a := range acked {
		switch n := count[a.eventID]; {
		case n == 0:
			missing++
			t.Errorf("acknowledged %s (%s #%d via %s) is not in %s", a.eventID, a.agg, a.seq, a.api, commandsTopic)
		case n > 1:
			twice++
			t.Errorf("acknowledged %s (%s #%d via %s) is in %s %d times", a.eventID, a.agg, a.seq, a.api, commandsTopic, n)
		}
	}
	t.Logf("%d commands acknowledged, %d missing from %s, %d published more than once", len(acked), missing, commandsTopic, twice)
}

// reportHoldUps prints, per shard, the worst time from acknowledgement to
// Kafka of the commands acknowledged while the victim was frozen (V's
// apart), and V's own (the frozen writer's from when it was sent).
func reportHoldUps(t *testing.T, tail *topicTail, acked []ackRec, frozenAt, thawAt time.Time, vAgg string, vShard int, vSent time.Time, vFrozen string) {
	t.Helper()
	worst := map[int]time.Duration{}
	n := map[int]int{}
	var v []string
	for _, a := range acked {
		seen := tail.seenAt(a.eventID)
		if seen == nil {
			continue
		}
		if a.agg == vAgg {
			switch {
			case a.eventID == vFrozen:
				v = append(v, fmt.Sprintf("#%d (the frozen writer's) %v from its request", a.seq, seen.Sub(vSent).Round(time.Millisecond)))
			default:
				v = append(v, fmt.Sprintf("#%d %v", a.seq, seen.Sub(a.at).Round(time.Millisecond)))
			}
			continue
		}
		if a.at.Before(frozenAt) || a.at.After(thawAt) {
			continue
		}
		n[a.shard]++
		worst[a.shard] = max(worst[a.shard], seen.Sub(a.at))
	}
	var b strings.Builder
	for sh := range lateShards {
		mark := ""
		if sh == vShard {
			mark = " (the victim's shard, its other aggregates)"
		}
		fmt.Fprintf(&b, "\n  shard %d%s: %d commands acknowledged while frozen, worst hold-up %v", sh, mark, n[sh], worst[sh].Round(time.Millisecond))
	}
	t.Logf("hold-up (acknowledgement → first seen in Kafka) while the victim was frozen %v:%s\n  the victim's aggregate %s: %s",
		thawAt.Sub(frozenAt).Round(time.Millisecond), b.String(), vAgg, strings.Join(v, ", "))
}

// putHold is an HTTP proxy in front of MinIO for one process. Armed, it
// holds the first segment PUT (`PUT /<bucket>/segments/…`) it receives,
// body read in full, and says so on caught; forward sends it on to MinIO
// and returns MinIO's status. Everything else passes through. The Host
// header is kept, so the request's signature stays valid.
type putHold struct {
	url     string
	prefix  string
	rp      *httputil.ReverseProxy
	armed   atomic.Bool
	caught  chan string
	release chan struct{}
	status  chan int
	puts    atomic.Int64
	once    sync.Once
}

func newPutHold(t *testing.T, endpoint, bucket string) *putHold {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	h := &putHold{prefix: "/" + bucket + "/" + eventstore.SegmentPrefix, caught: make(chan string, 1),
		release: make(chan struct{}), status: make(chan int, 1)}
	h.rp = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.Out.URL.Scheme, r.Out.URL.Host = target.Scheme, target.Host
		r.Out.Host = r.In.Host // signed by the client
	}}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(h.releaseAll) // before srv.Close: a held request must end
	h.url = srv.URL
	return h
}

func (h *putHold) arm() { h.armed.Store(true) }

// count is the number of segment PUTs seen while or since armed.
func (h *putHold) count() int64 { return h.puts.Load() }

func (h *putHold) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut || !strings.HasPrefix(r.URL.Path, h.prefix) {
		h.rp.ServeHTTP(w, r)
		return
	}
	if !h.armed.Load() {
		h.rp.ServeHTTP(w, r)
		return
	}
	h.puts.Add(1)
	if h.puts.Load() > 1 {
		h.rp.ServeHTTP(w, r)
		return
	}
	// The whole request is in: the writer now only waits for the answer.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	h.caught <- r.URL.Path
	<-h.release
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	h.rp.ServeHTTP(sw, r)
	h.status <- sw.code
}

// forward sends the held PUT to MinIO and returns its status.
func (h *putHold) forward() int {
	h.releaseAll()
	select {
	case st := <-h.status:
		return st
	case <-time.After(30 * time.Second):
		return 0
	}
}

func (h *putHold) releaseAll() { h.once.Do(func() { close(h.release) }) }

// statusWriter remembers the status written through it.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}
