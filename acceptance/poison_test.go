package acceptance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/eventstoretest"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry/registrytest"
	"github.com/sluicehq/sluice/shared/claim"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/s3store"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/envelope"
)

// The poison soak (issue 21, docs/acceptance.md "Poison soak"): normal load
// interleaved with every class of poison that can be injected from the
// outside, with kill -9 of the relay and both workers. Every poison record
// must be accounted for (refused synchronously with its status, dead-lettered
// with its reason, or parked by the relay with its reason), the normal load
// must show 0 lost and 0 duplicated effects, and no partition and no relay
// may stall longer than poisonStallBudget.

const (
	// poisonEnvelopeLimit is EVENT_STORE_MAX_ENVELOPE_BYTES in the soak:
	// small, so records near the limit are cheap.
	poisonEnvelopeLimit = 64 << 10
	// poisonStallBudget is the longest a partition's committed offset or
	// the relay checkpoint may stand still while work is pending. It is the
	// sum of the bounded waits of the soak's configuration: a killed
	// worker's group session (KAFKA_SESSION_TIMEOUT 10 s) and its claims'
	// lease (PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS 8 s), a poison record's
	// retries (5 attempts, backoff capped at 1 s, 3 in-attempt ES retries),
	// the relay's parking (3 attempts) and leader lease (3 s), and a
	// restart to readiness; rounded up. No service is killed again within
	// this budget of its last kill, so a longer stall is the product's.
	poisonStallBudget = 45 * time.Second
)

// poisonEvents is SLUICE_POISON_EVENTS (normal commands), default 300.
func poisonEvents(t *testing.T) int {
	t.Helper()
	if v := os.Getenv("SLUICE_POISON_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 {
			t.Fatalf("SLUICE_POISON_EVENTS=%q: want an integer ≥ 100", v)
		}
		return n
	}
	return 300
}

// Poison classes.
const (
	pcSizeUnder     = "size_just_under_limit"  // applied
	pcSizeOver      = "size_just_over_limit"   // 413 limit_exceeded
	pcBodyTooLarge  = "body_over_api_limit"    // 413 body_too_large
	pcInvalidUTF8   = "invalid_utf8"           // 400
	pcLoneSurrogate = "lone_surrogate"         // 400 invalid_text
	pcReservedKey   = "reserved_data_key"      // 422 invalid_data_key
	pcReusedKey     = "reused_idempotency_key" // 422 idempotency_key_reused
	pcMapping       = "mapping_conflict"       // APPLIED, read model stale, then repaired
	pcStateGrowth   = "state_over_limit"       // a patch under the limit, the state it leads to over: REJECTED or DLQ with the reason
	pcCommandIDDup  = "command_id_reused"      // two commands appended with one command_id, other payloads: the second REJECTED
	pcTopicBadName  = "kafka_topic_bad_name"   // refused by the store's append
	pcTopicCollide  = "kafka_topic_collision"  // parked topic_collision
	pcTopicRefused  = "kafka_topic_refused"    // parked invalid_topic
	pcGarbageCmd    = "garbage_on_commands"    // commands DLQ (parse)
	pcGarbageBigCmd = "large_garbage_commands" // commands DLQ, pointer form
	pcGarbageEvt    = "garbage_on_events"      // events DLQ (parse)
)

var poisonClasses = []string{pcSizeUnder, pcSizeOver, pcBodyTooLarge, pcInvalidUTF8, pcLoneSurrogate, pcReservedKey,
	pcReusedKey, pcMapping, pcStateGrowth, pcCommandIDDup, pcTopicBadName, pcTopicCollide, pcTopicRefused, pcGarbageCmd, pcGarbageBigCmd, pcGarbageEvt}

// poisonItem is one injected poison record and what became of it.
type poisonItem struct {
	class string
	n     int
	// outcome of the synchronous step ("" until injected).
	sync string
	// where it must be found afterwards.
	eventID   string // store event id (parked, mapping conflict)
	topic     string // produced to (garbage)
	partition int32
	offset    int64
	err       error
}

// poisonRun is the state of one soak.
type poisonRun struct {
	p          *pipeline
	db         string
	store      *eventstore.Store
	bigBlob    int // largest blob length a create accepts
	mu         sync.Mutex
	extra      []*soakInstance // instances of class items outside the load clients
	extraCmds  []soakCmd
	refusedIDs []string // instance ids whose commands were refused: nothing may be stored
	conflicts  []*soakInstance
	reuses     []*soakInstance   // class reuse (pcCommandIDDup)
	notApplied int               // commands of class items acknowledged but not to be applied (pcStateGrowth)
	parked     map[string]string // event_id → reason expected
}

func randHex(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// status sends one request, retrying connection errors and 5xx (the same
// Idempotency-Key; a 5xx fails the soak, note5xx), and returns the final
// status and the problem code.
func (r *poisonRun) status(method, path string, body any, key string) (int, string, []byte) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, b, err := r.p.call(method, path, body, key)
		if err == nil && code < 500 {
			var pr struct {
				Error string `json:"error"`
			}
			_ = json.Unmarshal(b, &pr)
			return code, pr.Error, b
		}
		if err == nil {
			r.p.note5xx(method, path, key, code, b)
		}
		if time.Now().After(deadline) {
			return code, fmt.Sprintf("still failing: %v", err), b
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// probeSizeLimit finds, by bisection over creates of fixed-width ids, the
// largest blob a create accepts. Accepted probes are instances of the model.
func (r *poisonRun) probeSizeLimit(t *testing.T) {
	lo, hi := poisonEnvelopeLimit-4096, poisonEnvelopeLimit
	k := 0
	try := func(n int) bool {
		k++
		id := fmt.Sprintf("big-p%04d", k)
		state := map[string]any{"blob": randHex(n)}
		code, perr, b := r.status(http.MethodPost, instancesPath(r.db, "items"), map[string]any{"instance_id": id, "data": state}, "")
		switch {
		case code == http.StatusAccepted:
			var a accepted
			_ = json.Unmarshal(b, &a)
			r.extra = append(r.extra, &soakInstance{id: id, state: state, slot: a.SequenceNumber})
			r.extraCmds = append(r.extraCmds, soakCmd{a.EventID, "create"})
			return true
		case code == http.StatusRequestEntityTooLarge && perr == "limit_exceeded":
			r.refusedIDs = append(r.refusedIDs, id)
			return false
		default:
			t.Fatalf("size probe %d bytes: %d %s", n, code, b)
			return false
		}
	}
	if !try(lo) {
		t.Fatalf("a create with a %d-byte blob was refused under an envelope limit of %d", lo, poisonEnvelopeLimit)
	}
	if try(hi) {
		t.Fatalf("a create with a %d-byte blob was accepted under an envelope limit of %d", hi, poisonEnvelopeLimit)
	}
	for hi-lo > 1 {
		m := (lo + hi) / 2
		if try(m) {
			lo = m
		} else {
			hi = m
		}
	}
	r.bigBlob = lo
}

// inject sends one poison item and records its synchronous outcome.
func (r *poisonRun) inject(ctx context.Context, it *poisonItem) {
	p := r.p
	id := fmt.Sprintf("%s-%d", strings.ReplaceAll(it.class, "_", ""), it.n)
	path := instancesPath(r.db, "items")
	want := func(code int, perr string, gotCode int, gotErr string, body []byte) {
		it.sync = fmt.Sprintf("%d %s", gotCode, gotErr)
		if gotCode != code || (perr != "" && gotErr != perr) {
			it.err = fmt.Errorf("%s: got %d %s, want %d %s", it.class, gotCode, body, code, perr)
		}
	}
	refuse := func(body any, code int, perr string) {
		c, e, b := r.status(http.MethodPost, path, body, "")
		want(code, perr, c, e, b)
		r.mu.Lock()
		r.refusedIDs = append(r.refusedIDs, id)
		r.mu.Unlock()
	}
	switch it.class {
	case pcSizeUnder:
		// Just under the limit (the probe's boundary, less the few bytes a
		// timestamp's width may vary by): must be applied.
		state := map[string]any{"blob": randHex(r.bigBlob - 32)}
		a, err := p.command(http.MethodPost, path, map[string]any{"instance_id": fmt.Sprintf("big-u%04d", it.n), "data": state}, "", 2*time.Minute)
		if err != nil {
			it.err = fmt.Errorf("%s: %w", it.class, err)
			return
		}
		it.sync, it.eventID = "202", a.EventID
		r.mu.Lock()
		r.extra = append(r.extra, &soakInstance{id: fmt.Sprintf("big-u%04d", it.n), state: state, slot: a.SequenceNumber})
		r.extraCmds = append(r.extraCmds, soakCmd{a.EventID, "create"})
		r.mu.Unlock()
	case pcSizeOver:
		id = fmt.Sprintf("big-o%04d", it.n)
		refuse(map[string]any{"instance_id": id, "data": map[string]any{"blob": randHex(r.bigBlob + 32)}}, http.StatusRequestEntityTooLarge, "limit_exceeded")
	case pcBodyTooLarge:
		refuse(map[string]any{"instance_id": id, "data": map[string]any{"blob": randHex(1<<20 + 1024)}}, http.StatusRequestEntityTooLarge, "body_too_large")
	case pcInvalidUTF8:
		refuse([]byte(`{"instance_id":"`+id+`","data":{"s":"a\xff\xfeb"}}`), http.StatusBadRequest, "")
	case pcLoneSurrogate:
		refuse([]byte(`{"instance_id":"`+id+`","data":{"s":"x\ud800y"}}`), http.StatusBadRequest, "invalid_text")
	case pcReservedKey:
		key := []string{"_id", "sequence_number", "_source", "deleted"}[it.n%4]
		refuse(map[string]any{"instance_id": id, "data": map[string]any{key: 1}}, http.StatusUnprocessableEntity, "invalid_data_key")
	case pcReusedKey:
		key := "poison-rk-" + strconv.Itoa(it.n)
		state := map[string]any{"a": float64(1)}
		a, err := p.command(http.MethodPost, path, map[string]any{"instance_id": id, "data": state}, key, 2*time.Minute)
		if err != nil {
			it.err = fmt.Errorf("%s: first use: %w", it.class, err)
			return
		}
		r.mu.Lock()
		r.extra = append(r.extra, &soakInstance{id: id, state: state, slot: a.SequenceNumber})
		r.extraCmds = append(r.extraCmds, soakCmd{a.EventID, "create"})
		r.mu.Unlock()
		it.eventID = a.EventID
		// The same key, another payload: refused, never applied twice.
		c, e, b := r.status(http.MethodPost, path, map[string]any{"instance_id": id, "data": map[string]any{"a": 2}}, key)
		it.sync = fmt.Sprintf("%d %s", c, e)
		if !(c == http.StatusUnprocessableEntity && e == "idempotency_key_reused") && c != http.StatusConflict {
			it.err = fmt.Errorf("%s: reuse got %d %s, want 422 idempotency_key_reused or 409", it.class, c, b)
		}
		// The same key, the same payload: the stored command again.
		a2, err := p.command(http.MethodPost, path, map[string]any{"instance_id": id, "data": state}, key, 2*time.Minute)
		if err != nil || a2.EventID != a.EventID {
			it.err = errors.Join(it.err, fmt.Errorf("%s: replay got %+v %v, want event %s", it.class, a2, err, a.EventID))
		}
	case pcMapping:
		// A field first indexed as a number, then patched to an object (the
		// Elasticsearch 400 after the append), then back to a number.
		f := "m" + strconv.Itoa(it.n)
		cpath := instancesPath(r.db, "conflicts")
		in := &soakInstance{id: "mc-" + strconv.Itoa(it.n), state: map[string]any{f: float64(1)}}
		steps := []struct {
			method, path string
			body         map[string]any
		}{
			{http.MethodPost, cpath, map[string]any{"instance_id": in.id, "data": map[string]any{f: 1}}},
			{http.MethodPatch, instancePath(r.db, "conflicts", in.id), map[string]any{f: map[string]any{"x": 1}}},
			{http.MethodPatch, instancePath(r.db, "conflicts", in.id), map[string]any{f: 2}},
		}
		for i, s := range steps {
			a, err := p.command(s.method, s.path, s.body, "", 2*time.Minute)
			if err != nil {
				it.err = fmt.Errorf("%s step %d: %w", it.class, i, err)
				return
			}
			in.slot = a.SequenceNumber
			if i == 1 {
				it.eventID = a.CommandID
			}
		}
		in.state[f] = float64(2)
		it.sync = "202"
		r.mu.Lock()
		r.conflicts = append(r.conflicts, in)
		r.mu.Unlock()
	case pcStateGrowth:
		// Each command well under the limit, the state after both over it.
		id = fmt.Sprintf("grow-%04d", it.n)
		state := map[string]any{"ga": randHex(r.bigBlob * 6 / 10)}
		a, err := p.command(http.MethodPost, path, map[string]any{"instance_id": id, "data": state}, "", 2*time.Minute)
		if err != nil {
			it.err = fmt.Errorf("%s: create: %w", it.class, err)
			return
		}
		in := &soakInstance{id: id, state: state, slot: a.SequenceNumber}
		b, err := p.command(http.MethodPatch, instancePath(r.db, "items", id), map[string]any{"gb": randHex(r.bigBlob * 6 / 10)}, "", 2*time.Minute)
		if err != nil {
			it.err = fmt.Errorf("%s: patch: %w", it.class, err)
			return
		}
		it.sync, it.eventID = "202", b.EventID
		// A later command of the instance is not blocked by the refused
		// one: it is applied on the state before it.
		c, err := p.command(http.MethodPatch, instancePath(r.db, "items", id), map[string]any{"gc": 1}, "", 2*time.Minute)
		if err != nil {
			it.err = fmt.Errorf("%s: later patch: %w", it.class, err)
			return
		}
		in.state["gc"], in.slot = float64(1), c.SequenceNumber
		r.mu.Lock()
		r.extra = append(r.extra, in)
		r.extraCmds = append(r.extraCmds, soakCmd{a.EventID, "create"}, soakCmd{c.EventID, "patch"})
		r.notApplied++
		r.mu.Unlock()
	case pcCommandIDDup:
		// A producer appends a create and two updates whose command_id is
		// the same and whose payloads differ: the second update must be
		// rejected, never applied on the first one's domain event.
		id = fmt.Sprintf("cid-%04d", it.n)
		agg := r.db + ":reuse:" + id
		cid := fmt.Sprintf("poison-cid-%d-%s", it.n, uuid.NewString()[:8])
		mk := func(typ, cmdID, data string) envelope.Envelope {
			e := envelope.Envelope{EventID: uuid.NewString(), EventType: typ, Kind: envelope.KindCommand,
				AggregateType: envelope.AggregateTypeInstance, AggregateID: agg, Data: json.RawMessage(data),
				OccurredAt: envelope.NewTimestamp(time.Now().UTC())}
			e.Metadata.SetString(envelope.MetaCommandID, cmdID)
			return e
		}
		envs := []envelope.Envelope{
			mk("CREATE_INSTANCE", cid+"-c", `{"db":"`+r.db+`","class":"reuse","instance_id":"`+id+`","data":{"a":1}}`),
			mk("UPDATE_INSTANCE", cid, `{"data":{"a":2}}`),
			mk("UPDATE_INSTANCE", cid, `{"data":{"a":3}}`),
		}
		in := &soakInstance{id: id, state: map[string]any{"a": float64(2)}}
		for i, e := range envs {
			actx, cancel := context.WithTimeout(ctx, time.Minute)
			res, err := r.store.AppendOne(actx, e)
			cancel()
			if err != nil {
				it.err = fmt.Errorf("%s: append %d: %w", it.class, i, err)
				return
			}
			if i < 2 {
				in.slot = res.Event.Envelope.SequenceNumber
			}
		}
		it.sync, it.eventID = "appended", envs[2].EventID
		r.mu.Lock()
		r.reuses = append(r.reuses, in)
		r.mu.Unlock()
	case pcTopicBadName, pcTopicCollide, pcTopicRefused:
		topic := map[string]string{pcTopicBadName: "bad topic!", pcTopicCollide: "sluice_commands", pcTopicRefused: "poison.refused"}[it.class]
		e := envelope.Envelope{EventID: uuid.NewString(), EventType: "POISON", Kind: envelope.KindDomain,
			AggregateType: "Poison", AggregateID: id, Data: json.RawMessage(`{"n":` + strconv.Itoa(it.n) + `}`),
			OccurredAt: envelope.NewTimestamp(time.Now().UTC())}
		e.Metadata.SetString(envelope.MetaKafkaTopic, topic)
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := r.store.AppendOne(actx, e)
		cancel()
		var ve *envelope.ValidationError
		switch {
		case it.class == pcTopicBadName && errors.As(err, &ve):
			it.sync = "refused: " + ve.Error()
		case it.class == pcTopicBadName:
			it.err = fmt.Errorf("%s: append of kafka_topic %q: %v, want a validation error", it.class, topic, err)
		case err != nil:
			it.err = fmt.Errorf("%s: append: %w", it.class, err)
		default:
			it.sync, it.eventID = "appended", e.EventID
			r.mu.Lock()
			r.parked[e.EventID] = map[string]string{pcTopicCollide: relay.ReasonTopicCollision, pcTopicRefused: relay.ReasonInvalidTopic}[it.class]
			r.mu.Unlock()
		}
	case pcGarbageCmd, pcGarbageBigCmd, pcGarbageEvt:
		it.topic = commandsTopic
		val := []byte(fmt.Sprintf(`not an envelope %d {"event_id":`, it.n))
		switch it.class {
		case pcGarbageEvt:
			it.topic = eventsTopic
		case pcGarbageBigCmd:
			// 180 kB the broker takes, whose DLQ copy, escaped (a control
			// character grows to 6 bytes), exceeds the producer's maximum
			// batch size: the dead letter must take the pointer form.
			val = []byte(strings.Repeat("\x01", 180_000))
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		res := p.kcl.ProduceSync(pctx, &kgo.Record{Topic: it.topic, Key: []byte(id), Value: val})
		cancel()
		rec, err := res.First()
		if err != nil {
			it.err = fmt.Errorf("%s: produce: %w", it.class, err)
			return
		}
		it.sync, it.partition, it.offset = "produced", rec.Partition, rec.Offset
	}
}

// stallMeter measures the longest interval during which a partition's
// committed offset, or the relay checkpoint, did not move while work was
// pending.
type stallMeter struct {
	mu        sync.Mutex
	since     map[string]time.Time
	last      map[string]int64
	longest   map[string]time.Duration // "partition" and "relay"
	longestAt map[string]string
}

func (m *stallMeter) observe(kind, key string, pos int64, pending bool, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, seen := m.last[key]
	if !pending || !seen || prev != pos {
		m.since[key], m.last[key] = now, pos
		return
	}
	if d := now.Sub(m.since[key]); d > m.longest[kind] {
		m.longest[kind], m.longestAt[kind] = d, fmt.Sprintf("%s at %d", key, pos)
	}
}

func (m *stallMeter) get(kind string) (time.Duration, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.longest[kind], m.longestAt[kind]
}

// watchStalls samples every 250 ms until ctx ends.
func (r *poisonRun) watchStalls(ctx context.Context, m *stallMeter) {
	p := r.p
	bucket, err := s3store.New(ctx, s3store.Options{Bucket: p.bucket, Endpoint: p.minio.Endpoint, PathStyle: true,
		AccessKeyID: p.minio.AccessKey, SecretAccessKey: p.minio.SecretKey})
	if err != nil {
		p.t.Errorf("stall watcher: %v", err)
		return
	}
	cps := relay.NewCheckpointStore(bucket, "checkpoints/default.json")
	for ctx.Err() == nil {
		now := time.Now()
		for _, g := range []struct{ group, topic string }{{instanceGroup, commandsTopic}, {historyGroup, eventsTopic}} {
			end, err1 := p.endOffsets(g.topic)
			c, err2 := p.committed(g.group, g.topic)
			if err1 == nil && err2 == nil {
				for part, e := range end {
					m.observe("partition", fmt.Sprintf("%s/%d", g.topic, part), c[part], c[part] < e, now)
				}
			}
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cp, _, found, err := cps.Load(lctx)
		cancel()
		if head, herr := p.storeHead(); herr == nil && err == nil {
			pos := int64(0)
			if found {
				pos = cp.Position
			}
			m.observe("relay", "relay checkpoint", pos, head > pos, now)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// parkedCount is the number of records the relay (named "default", as the
// pipeline runs it) has parked and not resolved.
func (p *pipeline) parkedCount() (int64, error) {
	ctx, cancel := p.ctx(30 * time.Second)
	defer cancel()
	return relay.NewParkedStore(p.pool).Count(ctx, "default")
}

// unfinishedExcept is pipeline.unfinished leaving out the parked records
// (no worker ever receives them).
func (p *pipeline) unfinishedExcept(kind, handler string, except []string) (int64, error) {
	ctx, cancel := p.ctx(30 * time.Second)
	defer cancel()
	rows, err := p.storeSelect(ctx, eventstoretest.Filter{State: eventstore.StateCommitted, Kind: envelope.Kind(kind)})
	if err != nil {
		return 0, err
	}
	finished, err := registrytest.EventIDs(ctx, p.pool, handler, claim.StatusDone, claim.StatusSkippedStale, claim.StatusDead)
	if err != nil {
		return 0, err
	}
	left := make(map[string]bool, len(except))
	for _, id := range except {
		left[id] = true
	}
	var n int64
	for _, r := range rows {
		if !finished[r.EventID] && !left[r.EventID] {
			n++
		}
	}
	return n, nil
}

// TestPoisonSoak is the poison soak of issue 21: SLUICE_POISON_EVENTS normal
// commands (creates, patches, deletes through the API, tracked in a model)
// interleaved with poison of every class in poisonClasses while the relay
// and both workers are killed (-9) at random. Afterwards the pipeline
// drains, the normal load has 0 lost and 0 duplicated effects (sluice
// verify, the registry, the store, Elasticsearch's write log), every poison
// record is accounted for, and no partition or relay stalled longer than
// poisonStallBudget.
func TestPoisonSoak(t *testing.T) {
	t.Parallel()
	total, seed := poisonEvents(t), soakSeed(t)
	perClass := max(2, (total+999)/1000)
	t.Logf("poison soak: %d normal commands, %d poison records of each of %d classes, SLUICE_SOAK_SEED=%d", total, perClass, len(poisonClasses), seed)
	p := newPipeline(t, setup{partitions: 3, env: map[string]string{
		"EVENT_STORE_MAX_ENVELOPE_BYTES": strconv.Itoa(poisonEnvelopeLimit),
	}})
	// The broker refuses to create this one topic (a policy, an ACL).
	p.kafka.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Topic: "poison.refused", Err: kerr.InvalidTopicException, Count: -1})
	p.startDefault()
	const db = "poison"
	st, err := eventstore.New(eventstore.Config{
		AppendTimeout: 5 * time.Second, Limits: envelope.Limits{MaxEnvelopeBytes: poisonEnvelopeLimit},
	}, eventstore.Deps{Pool: p.pool, Bucket: mustS3(t, p)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	r := &poisonRun{p: p, db: db, store: st, parked: map[string]string{}}
	r.probeSizeLimit(t)
	t.Logf("size boundary: a create with a %d-byte blob is accepted, %d bytes is refused (envelope limit %d)", r.bigBlob, r.bigBlob+1, poisonEnvelopeLimit)

	rng := mrand.New(mrand.NewPCG(seed, 7))
	var items []*poisonItem
	for _, c := range poisonClasses {
		for i := range perClass {
			items = append(items, &poisonItem{class: c, n: i})
		}
	}
	rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	if 100*len(items) < total {
		t.Fatalf("%d poison records for %d normal commands: less than 1 %%", len(items), total)
	}

	meter := &stallMeter{since: map[string]time.Time{}, last: map[string]int64{}, longest: map[string]time.Duration{}, longestAt: map[string]string{}}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); r.watchStalls(watchCtx, meter) }()
	defer func() { stopWatch(); <-watchDone }()

	normal := func() int64 {
		n, _ := p.storeCount(eventstoretest.Filter{Kind: envelope.KindCommand, AggregateIDPrefix: db + ":items:c"})
		return n
	}
	loadCtx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	// The soak in named steps; they share these, which the summary reads.
	var (
		load, drain                 time.Duration
		loads                       []*soakLoad
		insts                       map[string]*soakInstance
		cmds                        []soakCmd
		rows                        map[string]regRow // instance-worker registry rows by event_id
		lost, dupEvents, mismatches int
		dupWrites                   []string
		histMissing, histExtra      int
		rep, rep2, rep3             verifyReport
		accounted                   map[string]int
		bad                         int
		dlqUnexpected               []string
		longPart, longRelay         time.Duration
		longPartAt, longRelayAt     string
		conf                        conflictReport
		restarts                    map[string]string
	)
	prefix := db + ":items:"
	faults := newFaultCounts()
	killKinds := []string{"kill_relay", "kill_instance-worker", "kill_projection-worker"}

	testenv.Step(t, "load, poison and kills", func(t *testing.T) {
		start := time.Now()
		var wg sync.WaitGroup
		for i := range 4 {
			l := &soakLoad{p: p, db: db, class: "items", name: fmt.Sprintf("c%d", i), rng: mrand.New(mrand.NewPCG(seed, uint64(i)))}
			loads = append(loads, l)
			wg.Add(1)
			go func() { defer wg.Done(); l.run(loadCtx) }()
		}
		// Kills: the relay and both workers in a shuffled rotation every
		// 1.5–3.5 s, each at most once per stall budget (so a stall longer
		// than the budget is not two kills back to back).
		killDone := make(chan struct{})
		krng := mrand.New(mrand.NewPCG(seed, 8))
		go func() {
			defer close(killDone)
			last := map[string]time.Time{}
			var order []string
			for loadCtx.Err() == nil {
				select {
				case <-loadCtx.Done():
					return
				case <-time.After(time.Duration(1500+krng.IntN(2000)) * time.Millisecond):
				}
				if len(order) == 0 {
					order = []string{"relay", "instance-worker", "projection-worker"}
					krng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				}
				name := order[0]
				order = order[1:]
				if time.Since(last[name]) < poisonStallBudget {
					continue
				}
				if p.service(name).kill() {
					last[name] = time.Now()
					faults.add("kill_" + name)
				}
			}
		}()
		// Poison, spread evenly over the normal load.
		for i, it := range items {
			target := int64((i + 1) * total / (len(items) + 1))
			waitFor(t, 10*time.Minute, "normal load to progress", func() bool { return normal() >= target })
			r.inject(context.Background(), it)
		}
		waitFor(t, 30*time.Minute, "normal load to finish", func() bool { return normal() >= int64(total) })
		// The load goes on until the rotation killed every service at least
		// once (a short soak may store its commands sooner); a rotation slot
		// comes every 3.5 s at most, so 2 minutes is ample.
		waitFor(t, 2*time.Minute, "every service killed at least once", func() bool {
			for _, k := range killKinds {
				if faults.get(k) == 0 {
					return false
				}
			}
			return true
		})
		stopLoad()
		wg.Wait()
		<-killDone
		load = time.Since(start).Round(100 * time.Millisecond)
	})

	testenv.Step(t, "drain", func(t *testing.T) {
		// Drain.
		drainStart := time.Now()
		for _, n := range []string{"api", "relay", "instance-worker", "projection-worker"} {
			p.service(n).waitReady(2 * time.Minute)
		}
		var parkedIDs []string
		for id := range r.parked {
			parkedIDs = append(parkedIDs, id)
		}
		waitFor(t, 5*time.Minute, "the pipeline to drain", func() bool {
			if n, err := p.unfinishedExcept("command", instanceHandler, parkedIDs); err != nil || n > 0 {
				return false
			}
			if n, err := p.unfinishedExcept("domain", historyHandler, parkedIDs); err != nil || n > 0 {
				return false
			}
			if n, err := p.storeCount(eventstoretest.Filter{State: eventstore.StateReserved}); err != nil || n > 0 {
				return false
			}
			if n, err := p.parkedCount(); err != nil || n < int64(len(parkedIDs)) {
				return false
			}
			return p.caughtUp(instanceGroup, commandsTopic) && p.caughtUp(historyGroup, eventsTopic)
		})
		// One more relay cycle and a sample after the drain: the watcher sees
		// the checkpoint at the head.
		time.Sleep(time.Second)
		stopWatch()
		<-watchDone
		drain = time.Since(drainStart).Round(100 * time.Millisecond)
	})

	testenv.Step(t, "normal load: none lost or duplicated", func(t *testing.T) {
		// --- normal load: 0 lost, 0 duplicated -------------------------------
		var errs []error
		insts = map[string]*soakInstance{}
		cmds = append([]soakCmd(nil), r.extraCmds...)
		for _, in := range r.extra {
			insts[in.id] = in
		}
		for _, l := range loads {
			errs = append(errs, l.errs...)
			cmds = append(cmds, l.cmds...)
			for _, in := range l.insts {
				insts[in.id] = in
			}
		}
		if err := errors.Join(errs...); err != nil {
			t.Errorf("normal commands the API did not acknowledge: %v", err)
		}
		rows = map[string]regRow{}
		for _, rw := range p.registry(instanceHandler, prefix) {
			rows[rw.EventID] = rw
		}
		lost = 0
		for _, c := range cmds {
			if rw, ok := rows[c.eventID]; !ok || rw.Status != "done" || rw.Result != "applied" {
				lost++
				if lost <= 10 {
					t.Errorf("acknowledged %s command %s: registry row %+v", c.kind, c.eventID, rw)
				}
			}
		}
		if len(rows) != len(cmds)+r.notApplied {
			t.Errorf("%d instance-worker registry rows of %s for %d acknowledged commands", len(rows), prefix, len(cmds)+r.notApplied)
		}
		doms := p.storeEvents("domain", prefix)
		dupEvents = max(len(doms)-len(cmds), 0)
		if len(doms) != len(cmds) {
			t.Errorf("%d domain events of %s for %d acknowledged commands", len(doms), prefix, len(cmds))
		}
		dupWrites = p.writes.duplicates()
		// History = every domain event of the db (all classes) except the
		// parked ones, both ways, read in pages (20,000 events in make soak).
		var histWant []storeEvent
		for _, d := range p.storeEvents("domain", db+":") {
			if _, parked := r.parked[d.EventID]; !parked {
				histWant = append(histWant, d)
			}
		}
		hd := diffHistory(histWant, p.historyDocs(db))
		histMissing, histExtra = len(hd.Missing)+len(hd.WrongSeq), len(hd.Extra)
		if !hd.empty() {
			t.Errorf("history of %s: %d domain events without their document (%v), %d with another sequence_number (%v), %d documents of no domain event (%v)",
				db, len(hd.Missing), hd.Missing[:min(10, len(hd.Missing))], len(hd.WrongSeq), hd.WrongSeq[:min(10, len(hd.WrongSeq))],
				len(hd.Extra), hd.Extra[:min(10, len(hd.Extra))])
		}
		rep = p.verify(db, "items", len(insts))
		mismatches = 0
		for _, in := range insts {
			if !r.docMatches(in, "items") {
				mismatches++
			}
		}
	})

	testenv.Step(t, "poison: every record accounted for", func(t *testing.T) {
		// --- poison: every record accounted for --------------------------------
		accounted = map[string]int{}
		bad = 0
		fail := func(it *poisonItem, format string, a ...any) {
			bad++
			t.Errorf("poison %s #%d (%s): %s", it.class, it.n, it.sync, fmt.Sprintf(format, a...))
		}
		dlqByOrigin := map[string]map[string]any{}
		dlqByEvent := map[string]string{} // original event_id → origin key
		for _, topic := range []string{commandsDLQ, eventsDLQ} {
			for _, rec := range p.readTopic(topic) {
				var d map[string]any
				if err := json.Unmarshal(rec.Value, &d); err != nil {
					dlqUnexpected = append(dlqUnexpected, fmt.Sprintf("%s: unreadable: %.300s", topic, rec.Value))
					continue
				}
				k := fmt.Sprintf("%v/%v/%v", d["original_topic"], d["original_partition"], d["original_offset"])
				dlqByOrigin[k] = d
				if h, ok := d["original_headers"].(map[string]any); ok {
					if id, ok := h["event_id"].(string); ok {
						dlqByEvent[id] = k
					}
				}
			}
		}
		parkedRows := map[string][2]string{} // event_id → reason, state
		prs, err := relay.NewParkedStore(p.pool).List(context.Background(), relay.ParkedFilter{Relay: "default"})
		if err != nil {
			t.Fatalf("parked list: %v", err)
		}
		for _, pr := range prs {
			parkedRows[pr.EventID] = [2]string{pr.Reason, pr.State}
		}
		for _, it := range items {
			if it.err != nil {
				fail(it, "%v", it.err)
				continue
			}
			switch it.class {
			case pcSizeUnder:
				if rw := rows[it.eventID]; rw.Status != "done" || rw.Result != "applied" {
					fail(it, "command %s just under the limit not applied: %+v", it.eventID, rw)
					continue
				}
				accounted["applied"]++
			case pcReusedKey:
				n, _ := p.storeCount(eventstoretest.Filter{Kind: envelope.KindCommand, AggregateIDs: []string{prefix + fmt.Sprintf("%s-%d", strings.ReplaceAll(it.class, "_", ""), it.n)}})
				if n != 1 {
					fail(it, "%d commands stored for one Idempotency-Key, want 1", n)
					continue
				}
				accounted["refused_sync"]++
			case pcMapping:
				st := r.commandStatus(it.eventID)
				if st.Status != "APPLIED" || st.ReadModel != "stale" {
					fail(it, "the conflicting patch has status %+v, want APPLIED with read_model stale", st)
					continue
				}
				accounted["applied_read_model_stale"]++
			case pcStateGrowth:
				rw := rows[it.eventID]
				if rw.Status == "done" && rw.Result == "rejected" {
					accounted["rejected"]++
					continue
				}
				k, ok := dlqByEvent[it.eventID]
				if rw.Status != "dead" || !ok {
					fail(it, "patch %s whose state exceeds the limit: registry row %+v, DLQ record %t; want REJECTED, or DEAD with a DLQ record", it.eventID, rw, ok)
					continue
				}
				if e := fmt.Sprint(dlqByOrigin[k]["error"]); !strings.Contains(e, "limit") {
					fail(it, "DLQ record without the size limit as its reason: %.300s", e)
					continue
				}
				delete(dlqByOrigin, k)
				accounted["dlq_state_over_limit"]++
			case pcCommandIDDup:
				rr := p.registry(instanceHandler, r.db+":reuse:")
				var row regRow
				for _, x := range rr {
					if x.EventID == it.eventID {
						row = x
					}
				}
				st := r.commandStatusByEvent(it.eventID)
				if row.Status != "done" || row.Result != "rejected" || !strings.Contains(st, "reused") {
					fail(it, "second command with a reused command_id: registry %+v, reason %q; want rejected as reused", row, st)
					continue
				}
				accounted["rejected"]++
			case pcTopicBadName:
				accounted["refused_sync"]++
			case pcTopicCollide, pcTopicRefused:
				pr, ok := parkedRows[it.eventID]
				if !ok || pr[0] != r.parked[it.eventID] || pr[1] != relay.ParkedStateParked {
					fail(it, "event %s: parked row %v (found %t), want reason %s", it.eventID, pr, ok, r.parked[it.eventID])
					continue
				}
				accounted["parked_"+pr[0]]++
			case pcGarbageCmd, pcGarbageBigCmd, pcGarbageEvt:
				k := fmt.Sprintf("%s/%d/%d", it.topic, it.partition, it.offset)
				d, ok := dlqByOrigin[k]
				if !ok {
					fail(it, "no DLQ record for %s", k)
					continue
				}
				delete(dlqByOrigin, k)
				if d["error"] == "" || d["error"] == nil {
					fail(it, "DLQ record without a reason: %v", d)
					continue
				}
				if it.class == pcGarbageBigCmd && d["original_truncated"] != true {
					fail(it, "DLQ record of %v bytes is not in pointer form", len(fmt.Sprint(d["original_value"])))
					continue
				}
				accounted["dlq"]++
			default: // refused synchronously (checked in inject)
				accounted["refused_sync"]++
			}
		}
		for k, d := range dlqByOrigin {
			dlqUnexpected = append(dlqUnexpected, fmt.Sprintf("%s: %.400v", k, d))
		}
		for _, u := range dlqUnexpected {
			t.Errorf("DLQ record that is no poison of the soak: %s", u)
		}
		if len(prs) != len(r.parked) {
			t.Errorf("%d parked records, want %d (the appended bad topics)", len(prs), len(r.parked))
		}
		out, errOut, code := p.cli("relay", "parked", "list", "--state", "all", "--limit", "10000")
		if code != 0 || !strings.Contains(out, fmt.Sprintf("%d records", len(r.parked))) {
			t.Errorf("sluice relay parked list: exit %d, %s %s", code, out, errOut)
		}
		stored, err := p.storeCount(eventstoretest.Filter{AggregateIDs: prefixed(prefix, r.refusedIDs)})
		if err != nil || stored != 0 {
			t.Errorf("%d appends of commands the API refused (%v)", stored, err)
		}
	})
	testenv.Step(t, "read models: conflicts and reuse", func(t *testing.T) {
		// Mapping conflicts: visible while stale, repaired by the later patch.
		rep2 = p.verify(db, "conflicts", len(r.conflicts))
		for _, in := range r.conflicts {
			if !r.docMatches(in, "conflicts") {
				mismatches++
			}
		}

		rep3 = p.verify(db, "reuse", len(r.reuses))
		for _, in := range r.reuses {
			if !r.docMatches(in, "reuse") {
				mismatches++
			}
		}
	})

	testenv.Step(t, "stalls, kills and restarts", func(t *testing.T) {
		longPart, longPartAt = meter.get("partition")
		longRelay, longRelayAt = meter.get("relay")
		if longPart > poisonStallBudget {
			t.Errorf("partition %s stalled %s (budget %s)", longPartAt, longPart.Round(100*time.Millisecond), poisonStallBudget)
		}
		if longRelay > poisonStallBudget {
			t.Errorf("relay stalled %s at %s (budget %s)", longRelay.Round(100*time.Millisecond), longRelayAt, poisonStallBudget)
		}
		faults.check(t, killKinds)
		checkKills(t, p, "relay", "instance-worker", "projection-worker")
		conf = p.checkConflicts(false) // finished writes sent again: at most one per retried attempt
		if n := p.api5xx.Load(); n > 0 {
			t.Errorf("the API answered %d requests with a 5xx (the soak never cuts it)", n)
		}
		restarts = map[string]string{}
		for _, n := range []string{"relay", "instance-worker", "projection-worker", "api"} {
			s := p.service(n)
			s.mu.Lock()
			restarts[n] = fmt.Sprintf("%d (exit codes %v)", s.starts-1, s.exits)
			for c, k := range s.exits {
				if c != -1 {
					t.Errorf("%s exited %d times with code %d (see its log)", n, k, c)
				}
			}
			s.mu.Unlock()
		}
	})
	poison := len(items)
	cls := map[string]int{}
	for _, it := range items {
		cls[it.class]++
	}
	result := "PASS"
	if t.Failed() {
		result = "FAIL"
	}
	t.Logf("poison soak summary: load %s, drain %s, seed %d; %d normal commands acknowledged on %d instances; "+
		"%d poison records (%.1f%%, %d classes × %d): accounted %s, unaccounted %d, unexpected DLQ records %d; kills: %s; restarts: %v; "+
		"verification: lost=%d duplicate_domain_events=%d duplicate_es_writes=%d missing_history=%d extra_history=%d read_model_mismatches=%d "+
		"sluice_verify items=%d/%d conflicts=%d/%d reuse=%d/%d ok; es_write_conflicts=%d (≤ %d retried attempts); longest stall: partition %s (%s), relay %s (%s), budget %s => %s",
		load, drain, seed, len(cmds), len(insts), poison, 100*float64(poison)/float64(len(cmds)), len(cls), perClass,
		sortedCounts(accounted), bad, len(dlqUnexpected), faults, restarts,
		lost, dupEvents, len(dupWrites), histMissing, histExtra, mismatches, rep.OK, rep.Instances, rep2.OK, rep2.Instances, rep3.OK, rep3.Instances, conf.es, conf.retried,
		longPart.Round(100*time.Millisecond), longPartAt, longRelay.Round(100*time.Millisecond), longRelayAt, poisonStallBudget, result)
	if len(dupWrites) > 0 {
		t.Errorf("document versions written twice: %v", dupWrites)
	}
}

// docMatches compares an instance document with the model.
func (r *poisonRun) docMatches(in *soakInstance, class string) bool {
	doc := r.p.instanceDoc(r.db, class, in.id)
	ok := doc.Found && doc.Version == in.slot && doc.Source["deleted"] == in.deleted
	if ok && !in.deleted {
		for k, v := range in.state {
			ok = ok && fmt.Sprint(doc.Source[k]) == fmt.Sprint(v)
		}
	}
	if !ok {
		src := fmt.Sprintf("%.300v", doc.Source)
		r.p.t.Errorf("instance %s/%s: document found %t _version %d %s; model slot %d deleted %t", class, in.id, doc.Found, doc.Version, src, in.slot, in.deleted)
	}
	return ok
}

// commandStatus is GET /v1/commands/{id}.
func (r *poisonRun) commandStatus(commandID string) (st struct {
	Status    string `json:"status"`
	Reason    string `json:"reason"`
	ReadModel string `json:"read_model"`
}) {
	code, _, b := r.status(http.MethodGet, "/v1/commands/"+commandID, nil, "")
	if code == http.StatusOK {
		_ = json.Unmarshal(b, &st)
	} else {
		st.Status = fmt.Sprintf("HTTP %d %s", code, b)
	}
	return st
}

// commandStatusByEvent returns the registry outcome reason of a command
// by its event id (a producer's command has no API status by key).
func (r *poisonRun) commandStatusByEvent(eventID string) string {
	ctx, cancel := r.p.ctx(30 * time.Second)
	defer cancel()
	row, err := registrytest.Row(ctx, r.p.pool, instanceHandler, eventID)
	if err != nil || row.Outcome == nil {
		return ""
	}
	return row.Outcome.Reason
}

func prefixed(prefix string, ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = prefix + id
	}
	return out
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// mustS3 opens the pipeline's bucket directly (a producer's view).
func mustS3(t *testing.T, p *pipeline) *s3store.Bucket {
	t.Helper()
	b, err := s3store.New(context.Background(), s3store.Options{Bucket: p.bucket, Endpoint: p.minio.Endpoint, PathStyle: true,
		AccessKeyID: p.minio.AccessKey, SecretAccessKey: p.minio.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
