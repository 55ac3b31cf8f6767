// Package instanceworker provides sluice's write-side command handler
// (docs/instanceworker.md): it turns CREATE_INSTANCE, UPDATE_INSTANCE and DELETE_INSTANCE
// commands from the commands topic into domain events appended into the
// command's own slot of the event store, and keeps the live instance
// documents in Elasticsearch. Worker is the handler (worker.Handler and
// worker.Healer); Service wires it to the worker runtime (worker)
// for `sluice instance-worker` and `sluice dev`.
//
// The guarantees it keeps (docs/architecture.md#the-guarantees):
//
//   - §0.1 at most one side effect per command: the domain event has a
//     deterministic event_id (envelope.DomainEventID) and goes into the
//     command's slot, so a re-run finds the stored event (an idempotent
//     append) instead of writing a second one; the instance document is
//     written with version = slot, version_type = external, so a re-run gets
//     409 (already applied).
//   - §0.3 per-aggregate order: the registry's wait-for-predecessor policy
//     lets command k run only after every slot below k is finished; the
//     state it decides on is exactly the fold of the domain events below k.
//     Stalled aggregates heal from the event store (Heal).
//   - §0.4 explicit failure: malformed commands are dead-lettered with their
//     reason; business rejections are recorded as outcomes with a reason,
//     visible through command status. An Elasticsearch outage (refused,
//     reset, timed out, 429, 502, 503, 504: shared/failure) is returned as
//     worker.Outage, so the runtime pauses instead of spending attempts,
//     and readiness is red while it lasts (Availability); it is never a
//     dead letter. So is an outage of the event store (its Postgres, its
//     object storage: storeFailure), which may be down alone when the
//     store has a server of its own.
//   - APPLIED means applied: a command is applied only when its domain event
//     is stored. When the instance document cannot be written after that
//     for a reason retrying cannot fix (a mapping conflict), the command is
//     still applied, its outcome reason says the read model is stale
//     (readmodel.StaleReason), and the instance is not blocked: later
//     commands fold the domain stream and write the full state again;
//     Repair rewrites a document from the store.
//   - A command_id reused with a different payload is rejected with the
//     store's idempotency mismatch as reason; it never borrows another
//     command's domain event.
//
// docs/instanceworker.md documents the command payloads.
package instanceworker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/elastic/go-elasticsearch/v8"
	jsonpatch "github.com/evanphx/json-patch/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/failure"
	"github.com/sluicehq/sluice/shared/tracing"
	"github.com/sluicehq/sluice/worker"
)

// Names of the handler, its consumer group and its crash-point worker.
const (
	HandlerName = "instanceworker"
	GroupName   = "instance-worker" // the group id is kafka.Config.Group(GroupName)
)

// Command and domain event types (docs/instanceworker.md).
const (
	CreateInstance  = "CREATE_INSTANCE"
	UpdateInstance  = "UPDATE_INSTANCE"
	DeleteInstance  = "DELETE_INSTANCE"
	InstanceCreated = "INSTANCE_CREATED"
	InstanceUpdated = "INSTANCE_UPDATED"
	InstanceDeleted = "INSTANCE_DELETED"
)

// Crash points of the handler (the runtime has the others).
const (
	PointBeforeAppend  = "before_append"
	PointAfterAppend   = "after_append"
	PointBeforeESWrite = "before_es_write"
	PointAfterESWrite  = "after_es_write"
)

// Store is what the worker needs of the event store (*eventstore.Store).
type Store interface {
	Append(ctx context.Context, envs ...envelope.Envelope) ([]eventstore.Result, error)
	Stream(ctx context.Context, aggregateType, aggregateID string, fromSeq, toSeq int64, kind envelope.Kind) ([]eventstore.Event, error)
	Command(ctx context.Context, aggregateType, aggregateID string, seq int64) (eventstore.Event, error)
	ByEventID(ctx context.Context, eventID string) (eventstore.Event, error)
}

// Worker handles instance commands: the handler (worker.Handler,
// worker.BatchHandler, worker.Healer) a Service runs in the worker runtime.
// It is safe for concurrent use by the runtime (different aggregates at
// once).
type Worker struct {
	cfg   Config // the Service's, defaults applied (Config.withDefaults)
	store Store
	reg   *registry.Registry
	es    *elasticsearch.Client
	// avail tracks Elasticsearch outages for readiness.
	avail *readmodel.Availability
	crash *crashpoint.Crasher
	log   *slog.Logger

	ensured sync.Map // db → readmodel.Names
	gens    sync.Map // db → *atomic.Uint64: index generation (lost.go)
	rb      rebuilds // lost indices being rebuilt (lost.go)
	// recoverMu serialises recoverIndex, so that the writes in flight
	// when an index was lost find it ensured again (a newer generation)
	// instead of each starting a rebuild.
	recoverMu sync.Mutex
}

// newWorker returns the Worker of a Service: cfg with its defaults applied,
// d's Store and ES, the Service's registry and crash points.
func newWorker(cfg Config, d Deps, reg *registry.Registry, crash *crashpoint.Crasher) (*Worker, error) {
	if d.Store == nil || reg == nil || d.ES == nil {
		return nil, errors.New("instanceworker: Store, Registry and ES are required")
	}
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Worker{cfg: cfg, store: d.Store, reg: reg, es: d.ES, avail: &readmodel.Availability{ES: d.ES}, crash: crash, log: log,
		rb: rebuilds{sched: readmodel.Rebuilds{Again: true}}}, nil
}

// Availability is the worker's view of Elasticsearch: its Check is the
// readiness check "instanceworker:elasticsearch".
func (w *Worker) Availability() *readmodel.Availability { return w.avail }

// esDo runs one Elasticsearch call with the in-attempt retry of short
// blips (ESRetry), reporting every try to Availability, so that readiness
// turns red at the first try that fails as an outage.
func (w *Worker) esDo(ctx context.Context, fn func(ctx context.Context) error) error {
	return w.cfg.ESRetry.Do(ctx, func(ctx context.Context) error {
		return w.avail.Observe(ctx, fn(ctx))
	})
}

func (w *Worker) hit(point string) {
	if w.crash != nil {
		w.crash.Hit(HandlerName, point)
	}
}

// payload is the data of an instance command (docs/instanceworker.md).
type payload struct {
	DB         *string         `json:"db"`
	Class      *string         `json:"class"`
	InstanceID *string         `json:"instance_id"`
	Data       json.RawMessage `json:"data"`
}

// command is a validated instance command.
type command struct {
	env                   envelope.Envelope
	db, class, instanceID string
	data                  json.RawMessage // CREATE: the state; UPDATE: the merge patch
	commandID             string
	// span is the record's span when tracing is on (worker.Record.Span).
	span trace.Span
}

// parseCommand validates a command envelope; every failure is permanent.
func parseCommand(e envelope.Envelope) (command, error) {
	c := command{env: e, commandID: e.Metadata.CommandID()}
	if c.commandID == "" {
		c.commandID = e.EventID
	}
	if e.Kind != envelope.KindCommand {
		return c, fmt.Errorf("kind %q: the instance worker handles commands only", e.Kind)
	}
	if e.AggregateType != envelope.AggregateTypeInstance {
		return c, fmt.Errorf("aggregate_type %q: want %s", e.AggregateType, envelope.AggregateTypeInstance)
	}
	switch e.EventType {
	case CreateInstance, UpdateInstance, DeleteInstance:
	default:
		return c, fmt.Errorf("unknown command type %q (want %s, %s or %s)", e.EventType, CreateInstance, UpdateInstance, DeleteInstance)
	}
	if e.SequenceNumber < 1 {
		return c, errors.New("command has no sequence_number")
	}
	var err error
	if c.db, c.class, c.instanceID, err = envelope.ParseInstanceAggregateID(e.AggregateID); err != nil {
		return c, err
	}
	var p payload
	dec := json.NewDecoder(bytes.NewReader(e.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return c, fmt.Errorf("%s payload: %w", e.EventType, err)
	}
	if p.DB != nil && *p.DB != c.db {
		return c, fmt.Errorf("payload db %q does not match aggregate_id %q", *p.DB, e.AggregateID)
	}
	if p.Class != nil && *p.Class != c.class {
		return c, fmt.Errorf("payload class %q does not match aggregate_id %q", *p.Class, e.AggregateID)
	}
	if p.InstanceID != nil {
		id, err := envelope.NormalizeAggregateID(*p.InstanceID)
		if err != nil || id != c.instanceID {
			return c, fmt.Errorf("payload instance_id %q does not match aggregate_id %q", *p.InstanceID, e.AggregateID)
		}
	}
	isObject := func(b json.RawMessage) bool {
		b = bytes.TrimSpace(b)
		return len(b) > 0 && b[0] == '{'
	}
	switch e.EventType {
	case CreateInstance:
		if p.DB == nil || p.Class == nil {
			return c, errors.New("CREATE_INSTANCE payload needs db and class")
		}
		if !isObject(p.Data) {
			return c, errors.New("CREATE_INSTANCE payload needs data, a JSON object")
		}
		if p.InstanceID == nil {
			want, err := DeriveInstanceID(c.class, c.commandID, p.Data)
			if err != nil {
				return c, err
			}
			if want != c.instanceID {
				return c, fmt.Errorf("aggregate_id %q does not carry the derived instance_id %q", e.AggregateID, want)
			}
		}
	case UpdateInstance:
		if !isObject(p.Data) {
			return c, errors.New("UPDATE_INSTANCE payload needs data, a JSON object (RFC 7386 merge patch)")
		}
	case DeleteInstance:
		if len(p.Data) > 0 && string(bytes.TrimSpace(p.Data)) != "null" && !isObject(p.Data) {
			return c, errors.New("DELETE_INSTANCE payload data must be absent or an object")
		}
	}
	c.data = p.Data
	return c, nil
}

// DeriveInstanceID returns the instance_id of a CREATE_INSTANCE command that
// names none (docs/instanceworker.md): data["{class}_id"] when it is a non-empty string or
// a number (its JSON text), normalised; else
// envelope.InstanceIDFromCommand(commandID). commandID is metadata.command_id,
// or the command's event_id when it has none.
func DeriveInstanceID(class, commandID string, data json.RawMessage) (string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return "", fmt.Errorf("data: %w", err)
	}
	if raw, ok := fields[class+"_id"]; ok {
		var s string
		var n json.Number
		switch {
		case json.Unmarshal(raw, &s) == nil && s != "":
		case json.Unmarshal(raw, &n) == nil:
			s = n.String()
		}
		if s != "" {
			return envelope.NormalizeAggregateID(s)
		}
	}
	return envelope.InstanceIDFromCommand(commandID).String(), nil
}

// current is the state of an instance before slot k.
type current struct {
	exists, deleted bool
	state           json.RawMessage
	createdAt       envelope.Timestamp
}

// fold applies domain events (full states) in order.
func (c *current) fold(evs []eventstore.Event) {
	for _, ev := range evs {
		e := ev.Envelope
		switch e.EventType {
		case InstanceCreated:
			c.exists, c.deleted, c.state, c.createdAt = true, false, e.Data, e.OccurredAt
		case InstanceUpdated:
			c.exists, c.deleted, c.state = true, false, e.Data
		case InstanceDeleted:
			c.deleted, c.state = true, json.RawMessage(`{}`)
		}
	}
}

func (w *Worker) names(ctx context.Context, db string) (readmodel.Names, error) {
	if n, ok := w.ensured.Load(db); ok {
		return n.(readmodel.Names), nil
	}
	var n readmodel.Names
	err := w.esDo(ctx, func(ctx context.Context) (err error) {
		n, err = readmodel.EnsureIndex(ctx, w.es, w.cfg.Elasticsearch.IndexPrefix, db, w.cfg.IndexVersion)
		return err
	})
	if err != nil {
		return n, worker.Classified(ctx, failure.Elasticsearch, err)
	}
	w.gen(db).Add(1)
	w.ensured.Store(db, n)
	// A rebuild found needed while the index could not be ensured (a
	// failed recoverIndex) starts now that it exists again.
	w.startNeeded(db)
	return n, nil
}

// load returns the state of the instance before slot k: the real-time
// document when it holds a slot below k plus the domain events after it
// (normally none); when the document is at or past k, the last domain
// event below k (loadBefore); else (no document) the fold of the domain
// stream below k.
func (w *Worker) load(ctx context.Context, c command, n readmodel.Names) (current, error) {
	var g readmodel.GetResult
	g.Err = w.esDo(ctx, func(ctx context.Context) (err error) {
		g.Meta, g.State, err = readmodel.GetInstance(ctx, w.es, n, c.class, c.instanceID)
		return err
	})
	return w.loadFrom(ctx, c, g)
}

// loadFrom is load given the answer of the real-time GET of the document.
func (w *Worker) loadFrom(ctx context.Context, c command, g readmodel.GetResult) (current, error) {
	k := c.env.SequenceNumber
	var cur current
	from := int64(1)
	switch err := g.Err; {
	case err == nil && g.Meta.SequenceNumber < k:
		cur = current{exists: true, deleted: g.Meta.Deleted, state: g.State, createdAt: g.Meta.CreatedAt}
		from = g.Meta.SequenceNumber + 1
	case err == nil:
		if cur, ok, err := w.loadBefore(ctx, c, g.Meta); err != nil || ok {
			return cur, err
		}
	case errors.Is(err, readmodel.ErrNotFound):
	default:
		return cur, worker.Classified(ctx, failure.Elasticsearch, err)
	}
	if from <= k-1 {
		evs, err := w.store.Stream(ctx, envelope.AggregateTypeInstance, c.env.AggregateID, from, k-1, envelope.KindDomain)
		if err != nil {
			return cur, storeFailure(ctx, fmt.Errorf("read domain stream: %w", err))
		}
		cur.fold(evs)
	}
	return cur, nil
}

// loadBefore returns the state before slot k of an instance whose document
// is at or past k (doc): command k was applied before, and is delivered
// again (a crash between the document's write and the mark). Domain events
// carry the whole state, so the state before k is the last domain event
// below k of an instance type, read backward in windows of 1, 4, 16, …
// slots — after a delete, on to the create or update before it, which
// says the instance existed. created_at is the document's: no instance
// was created in slots k…doc (read first), so the document's is the last
// create below k (used only for the document write, which the version
// then refuses anyway). ok is false when one was (a delete and a create
// again, at or after k): the caller folds the stream below k. The reads
// grow with the slots from the document back to that last event, not
// with the aggregate (docs/instanceworker.md#processing-command-at-slot-k).
func (w *Worker) loadBefore(ctx context.Context, c command, doc readmodel.Meta) (cur current, ok bool, err error) {
	k := c.env.SequenceNumber
	read := func(from, to int64) ([]eventstore.Event, error) {
		evs, err := w.store.Stream(ctx, envelope.AggregateTypeInstance, c.env.AggregateID, from, to, envelope.KindDomain)
		if err != nil {
			return nil, storeFailure(ctx, fmt.Errorf("read domain stream: %w", err))
		}
		return evs, nil
	}
	since, err := read(k, doc.SequenceNumber)
	if err != nil {
		return current{}, false, err
	}
	for _, ev := range since {
		if ev.Envelope.EventType == InstanceCreated {
			return current{}, false, nil
		}
	}
	cur.createdAt = doc.CreatedAt
	found := false // the last event of an instance type below k

	// Each window at most the slots left: never past slot 1, never overflowing.
	for to, n := k-1, int64(1); to >= 1; to, n = to-n, min(4*n, to) {
		evs, err := read(max(to-n+1, 1), to)
		if err != nil {
			return current{}, false, err
		}
		for i := len(evs) - 1; i >= 0; i-- {
			switch evs[i].Envelope.EventType {
			case InstanceCreated, InstanceUpdated:
				switch {
				case !found:
					cur.fold(evs[i : i+1])
				case evs[i].Envelope.EventType == InstanceCreated:
					cur.createdAt = evs[i].Envelope.OccurredAt
				}
				cur.exists = true
				return cur, true, nil
			case InstanceDeleted:
				if !found {
					cur.fold(evs[i : i+1])
					found = true
				}
			}
		}
	}
	return cur, true, nil // no create or update below k: the instance never existed
}

// Handle processes one claimed command (worker.Handler).
func (w *Worker) Handle(ctx context.Context, rec *worker.Record) (claim.Outcome, error) {
	return w.process(ctx, rec.Envelope, rec.Attempt >= w.cfg.Worker.InstanceMaxRetryAttempts, rec.Span)
}

// Outcome reasons of rejected commands.
const (
	ReasonExists  = "instance already exists"
	ReasonMissing = "instance does not exist"
	ReasonDeleted = "instance is deleted"
	// ReasonInvalidData starts the reason of a command whose new state
	// holds a key the instance document cannot hold
	// (readmodel.ValidateData; the reason goes on with its error).
	ReasonInvalidData = "data cannot be stored"
	// ReasonInvalidEvent starts the reason of a command whose domain event
	// the store refuses (the new state over EVENT_STORE_MAX_ENVELOPE_BYTES).
	ReasonInvalidEvent = "domain event refused by the store"
	// ReasonCommandIDReused starts the reason of a command whose
	// command_id names another command's domain event (stored with a
	// different payload).
	ReasonCommandIDReused = "command_id reused with a different payload"
)

// process handles one command; last says this is the runtime's last
// attempt at it (see worker.Settings.InstanceMaxRetryAttempts).
func (w *Worker) process(ctx context.Context, e envelope.Envelope, last bool, span trace.Span) (claim.Outcome, error) {
	c, err := parseCommand(e)
	if err != nil {
		return claim.Outcome{}, worker.Permanent(err)
	}
	c.span = span
	n, err := w.names(ctx, c.db)
	if err != nil {
		return claim.Outcome{}, err
	}
	cur, err := w.load(ctx, c, n)
	if err != nil {
		return claim.Outcome{}, err
	}
	evType, newState, rejected, err := decide(c, cur)
	if rejected != nil {
		return *rejected, nil
	}
	if err != nil {
		return claim.Outcome{}, err
	}
	w.hit(PointBeforeAppend)
	stored, err := w.appendEvent(ctx, c, evType, newState)
	if o, ok := reusedOutcome(err); ok {
		return o, nil
	}
	if o, ok := invalidEventOutcome(err); ok {
		return o, nil
	}
	if err != nil {
		return claim.Outcome{}, err
	}
	w.hit(PointAfterAppend)
	meta := docMeta(c, cur, stored)
	w.hit(PointBeforeESWrite)
	sctx, sp := tracing.StartChild(ctx, c.span, "elasticsearch write", trace.WithSpanKind(trace.SpanKindClient))
	write := func() error {
		return w.esDo(sctx, func(ctx context.Context) error {
			_, err := readmodel.WriteInstance(ctx, w.es, n, meta, stored.Envelope.Data)
			return err
		})
	}
	sent := w.generation(c.db)
	err = write()
	for try := 0; try < 2 && lostIndex(err); try++ {
		// The index was deleted under the worker: it exists again (and
		// is being rebuilt); write this document once more.
		g, rerr := w.recoverIndex(ctx, c.db, sent, err)
		if rerr != nil {
			break
		}
		sent = g
		err = write()
	}
	tracing.End(sp, err)
	if err != nil {
		return w.writeFailed(ctx, c, err, last)
	}
	w.hit(PointAfterESWrite)
	return claim.Applied(), nil
}

// writeFailed decides what a failed document write means for command c,
// whose domain event is stored (APPLIED means applied): an outage pauses
// (worker.Outage); a missing write alias is retried after ensuring it
// again; a failure retrying cannot fix (a 400 mapping conflict), or any
// other failure on the last attempt, finishes the command as applied with
// the read model stale (readmodel.StaleReason), visible in command status
// and `sluice verify`, repaired by a later write of the instance or Repair.
// Otherwise the attempt is retried.
func (w *Worker) writeFailed(ctx context.Context, c command, err error, last bool) (claim.Outcome, error) {
	var se *readmodel.StatusError
	if errors.As(err, &se) && se.Status == http.StatusNotFound {
		w.ensured.Delete(c.db) // the write alias vanished: ensure it again
		if !last {
			return claim.Outcome{}, worker.Retryable(err)
		}
	}
	cerr := worker.Classified(ctx, failure.Elasticsearch, err)
	switch worker.Classify(cerr) {
	case worker.ClassOutage:
		return claim.Outcome{}, cerr
	case worker.ClassRetryable:
		if !last || ctx.Err() != nil {
			return claim.Outcome{}, cerr
		}
	}
	w.log.Error("instance document not written: the command is applied, its read model is stale until repaired",
		"aggregate_id", c.env.AggregateID, "sequence_number", c.env.SequenceNumber, "command_id", c.commandID, "err", err)
	return claim.Outcome{Result: claim.OutcomeApplied, Reason: readmodel.StaleReason(err)}, nil
}

// invalidEventOutcome turns the store's refusal of the domain event itself
// (a *envelope.ValidationError: the new state is over the envelope limit,
// say) into the command's rejection. The refusal is decided by the command
// and the state before it, so every retry would meet it again: the command
// is REJECTED with the reason, its slot stays without an event, and later
// commands of the instance go on — never DEAD, never in the DLQ.
func invalidEventOutcome(err error) (claim.Outcome, bool) {
	var ve *envelope.ValidationError
	if err == nil || !errors.As(err, &ve) {
		return claim.Outcome{}, false
	}
	return claim.Rejected(ReasonInvalidEvent + ": " + ve.Error()), true
}

// decide applies command c to the state before its slot: the domain event
// type and the full new state, or the rejection (an outcome), or a
// permanent error.
func decide(c command, cur current) (string, json.RawMessage, *claim.Outcome, error) {
	reject := func(reason string) (string, json.RawMessage, *claim.Outcome, error) {
		o := claim.Rejected(reason)
		return "", nil, &o, nil
	}
	var evType string
	var newState json.RawMessage
	switch c.env.EventType {
	case CreateInstance:
		if cur.exists && !cur.deleted {
			return reject(ReasonExists)
		}
		evType, newState = InstanceCreated, c.data
	case UpdateInstance:
		if !cur.exists {
			return reject(ReasonMissing)
		}
		if cur.deleted {
			return reject(ReasonDeleted)
		}
		merged, err := jsonpatch.MergePatch(cur.state, c.data)
		if err != nil {
			return "", nil, nil, worker.Permanent(fmt.Errorf("merge patch: %w", err))
		}
		evType, newState = InstanceUpdated, merged
	case DeleteInstance:
		if !cur.exists {
			return reject(ReasonMissing)
		}
		if cur.deleted {
			return reject(ReasonDeleted)
		}
		evType, newState = InstanceDeleted, json.RawMessage(`{}`)
	}
	newState, err := compactObject(newState)
	if err != nil {
		return "", nil, nil, worker.Permanent(err)
	}
	// The API refuses such data with the same rule (issue 26.3).
	if err := readmodel.ValidateData(newState); err != nil {
		return reject(ReasonInvalidData + ": " + err.Error())
	}
	return evType, newState, nil, nil
}

// docMeta is the bookkeeping part of the instance document written for the
// stored domain event of command c (state before it: cur).
func docMeta(c command, cur current, stored eventstore.Event) readmodel.Meta {
	se := stored.Envelope
	meta := readmodel.Meta{DB: c.db, Class: c.class, InstanceID: c.instanceID, SequenceNumber: c.env.SequenceNumber,
		EventID: se.EventID, CreatedAt: cur.createdAt, UpdatedAt: se.OccurredAt, Deleted: se.EventType == InstanceDeleted}
	if se.EventType == InstanceCreated {
		meta.CreatedAt = se.OccurredAt
	}
	return meta
}

// appendEvent conditional-creates the domain event into the command's slot;
// an event already stored with the same event_id counts as done. The
// caller hits the append crash points.
func (w *Worker) appendEvent(ctx context.Context, c command, evType string, state json.RawMessage) (eventstore.Event, error) {
	stored, errs := w.appendEvents(ctx, []command{c}, []string{evType}, []json.RawMessage{state})
	return stored[0], errs[0]
}

// appendEvents appends the domain events of commands cs (event type and new
// state at the same index) with one Store.Append call, so that they reach
// the store's group commit together and are reserved, written and
// committed as one group: concurrent single appends arrive one by one, and
// an idle store starts a group with the first alone. Each event succeeds
// or fails on its own, as a single append does (appendResult).
func (w *Worker) appendEvents(ctx context.Context, cs []command, evTypes []string, states []json.RawMessage) ([]eventstore.Event, []error) {
	evs := make([]envelope.Envelope, len(cs))
	spans := make([]trace.Span, len(cs))
	for k, c := range cs {
		evs[k] = envelope.DomainEventFor(c.env, c.commandID, evTypes[k], states[k])
		actx, sp := tracing.StartChild(ctx, c.span, "eventstore append", trace.WithSpanKind(trace.SpanKindClient))
		if sp != nil {
			// The domain event carries this span on to the relay and the
			// projection worker; same length, so the API's size check holds.
			tracing.ReplaceTraceparent(actx, &evs[k].Metadata)
		}
		spans[k] = sp
	}
	res, callErr := w.store.Append(ctx, evs...)
	stored := make([]eventstore.Event, len(cs))
	errs := make([]error, len(cs))
	for k, c := range cs {
		err := callErr
		if err == nil {
			stored[k], err = res[k].Event, res[k].Err
		}
		tracing.End(spans[k], err)
		if err != nil {
			stored[k], errs[k] = w.appendResult(ctx, c, evs[k], err)
		}
	}
	return stored, errs
}

// appendResult maps the failed append of domain event ev of command c: the
// command's own event stored earlier with another payload is the truth, an
// event of another command under its id is a reused command id, a refused
// event is permanent, and anything else is retried.
func (w *Worker) appendResult(ctx context.Context, c command, ev envelope.Envelope, err error) (eventstore.Event, error) {
	e := c.env
	var mm *eventstore.IdempotencyMismatchError
	var slot *eventstore.SlotError
	var ve *envelope.ValidationError
	var ce *eventstore.ConflictError
	switch {
	case errors.As(err, &mm):
		stored, gerr := w.store.ByEventID(ctx, ev.EventID)
		if gerr != nil {
			return eventstore.Event{}, storeFailure(ctx, fmt.Errorf("read stored domain event: %w", gerr))
		}
		se := stored.Envelope
		if cause, _ := se.Metadata.String(envelope.MetaCausationID); cause == e.EventID && se.AggregateID == e.AggregateID &&
			se.SequenceNumber == e.SequenceNumber {
			// This command's own event, decided by an earlier attempt:
			// it is the truth; carry on with it.
			w.log.Warn("domain event already stored with a different payload; using the stored one",
				"event_id", ev.EventID, "stored_hash", mm.StoredHash, "new_hash", mm.NewHash)
			return stored, nil
		}
		// Another command's event: this command reused its command_id.
		cause, _ := se.Metadata.String(envelope.MetaCausationID)
		return eventstore.Event{}, &reusedCommandIDError{commandID: c.commandID, eventID: ev.EventID,
			otherCommand: cause, otherSlot: se.SequenceNumber, err: err}
	case errors.As(err, &slot), errors.As(err, &ve), errors.As(err, &ce):
		return eventstore.Event{}, worker.Permanent(fmt.Errorf("append domain event: %w", err))
	}
	return eventstore.Event{}, storeFailure(ctx, fmt.Errorf("append domain event: %w", err))
}

// storeFailure classifies a failed call to the event store
// (docs/failures.md): an outage of its Postgres or of its object storage
// is worker.Outage, so the runtime pauses, spends no attempt and
// dead-letters nothing (the store's server may be down alone:
// docs/scale-out.md#when-one-server-is-down); a refusal retrying cannot
// fix is permanent; anything else is retried within the budget.
func storeFailure(ctx context.Context, err error) error {
	dep := failure.Postgres // the store's index, unless the chain names object storage
	var ue *eventstore.UnavailableError
	if errors.As(err, &ue) && ue.Dependency != "" {
		dep = ue.Dependency
	}
	return worker.Classified(ctx, dep, err)
}

// compactObject checks that b is a JSON object and compacts it.
func compactObject(b json.RawMessage) (json.RawMessage, error) {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' {
		return nil, errors.New("new state is not a JSON object")
	}
	var out bytes.Buffer
	if err := json.Compact(&out, t); err != nil {
		return nil, fmt.Errorf("new state: %w", err)
	}
	return out.Bytes(), nil
}

// reusedCommandIDError: the domain event id of a command (derived from its
// command_id) is already stored for another command, with another payload.
type reusedCommandIDError struct {
	commandID, eventID, otherCommand string
	otherSlot                        int64
	err                              error
}

func (e *reusedCommandIDError) Error() string {
	return fmt.Sprintf("%s: command_id %q names domain event %s, already stored for command %s in slot %d: %v",
		ReasonCommandIDReused, e.commandID, e.eventID, e.otherCommand, e.otherSlot, e.err)
}

func (e *reusedCommandIDError) Unwrap() error { return e.err }

// reusedOutcome is the rejection of a command whose append failed with a
// *reusedCommandIDError.
func reusedOutcome(err error) (claim.Outcome, bool) {
	var re *reusedCommandIDError
	if !errors.As(err, &re) {
		return claim.Outcome{}, false
	}
	return claim.Rejected(re.Error()), true
}

// Heal processes the slots an aggregate is waiting for (worker.Healer,
// docs/registry.md#sequence-guard-policies-per-handler): for each slot between the last finished one and the waiting
// command, the command stored there is claimed and processed like a
// delivery; a slot without a command (abandoned, or a direct domain event)
// is finished with AdvanceTo.
func (w *Worker) Heal(ctx context.Context, rec *worker.Record, wait claim.Result) error {
	e := rec.Envelope
	key := worker.DefaultAggregateKey(e)
	for s := wait.LastSequence + 1; s < e.SequenceNumber; s++ {
		ev, err := w.store.Command(ctx, e.AggregateType, e.AggregateID, s)
		if errors.Is(err, eventstore.ErrNotFound) {
			if _, err := w.reg.AdvanceTo(ctx, HandlerName, key, s); err != nil {
				return fmt.Errorf("heal slot %d: %w", s, err)
			}
			w.log.Warn("healed an empty slot", "aggregate_id", e.AggregateID, "slot", s)
			continue
		}
		if err != nil {
			return fmt.Errorf("heal slot %d: %w", s, err)
		}
		res, err := w.reg.Claim(ctx, claim.Request{Handler: HandlerName, EventID: ev.Envelope.EventID,
			AggregateID: key, Seq: s, Policy: claim.WaitForPredecessor})
		if err != nil {
			return fmt.Errorf("heal slot %d: %w", s, err)
		}
		switch res.Kind {
		case claim.DuplicateDone, claim.Stale, claim.Dead:
			continue
		case claim.Claimed:
		default:
			return fmt.Errorf("heal slot %d: %s", s, res.Kind)
		}
		hctx, stop := w.reg.Hold(ctx, res.Lease)
		out, perr := w.process(hctx, ev.Envelope, false, nil)
		stop()
		if perr != nil {
			_ = w.reg.Release(ctx, res.Lease)
			return fmt.Errorf("heal slot %d: %w", s, perr)
		}
		if err := w.reg.MarkDone(ctx, res.Lease, out); err != nil {
			return fmt.Errorf("heal slot %d: %w", s, err)
		}
		w.log.Info("healed a missing command", "aggregate_id", e.AggregateID, "slot", s, "outcome", out.Result)
	}
	return nil
}

// ErrNoDomainEvents: Repair found no domain event of the instance.
var ErrNoDomainEvents = errors.New("instanceworker: the instance has no domain event")

// Repair rewrites the instance document of aggregateID from the event
// store: the fold of every domain event of the instance, written with
// version = its last domain slot (version_type external, so a document
// already as new or newer is left alone: readmodel.AlreadyApplied). It is
// the repair of a stale read model (a command whose outcome reason is
// readmodel.StaleReason, an instance `sluice verify` reports stale) once
// its cause (the mapping, the data) is fixed. Safe to run at any time and
// repeatedly, next to a running worker.
func (w *Worker) Repair(ctx context.Context, aggregateID string) (readmodel.WriteResult, error) {
	db, class, iid, err := envelope.ParseInstanceAggregateID(aggregateID)
	if err != nil {
		return 0, fmt.Errorf("instanceworker: repair: %w", err)
	}
	evs, err := w.store.Stream(ctx, envelope.AggregateTypeInstance, aggregateID, 1, 0, envelope.KindDomain)
	if err != nil {
		return 0, fmt.Errorf("instanceworker: repair %s: read domain stream: %w", aggregateID, err)
	}
	if len(evs) == 0 {
		return 0, fmt.Errorf("%w: %s", ErrNoDomainEvents, aggregateID)
	}
	n, err := w.names(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("instanceworker: repair %s: %w", aggregateID, err)
	}
	meta, state := storedDocument(db, class, iid, evs)
	var res readmodel.WriteResult
	err = w.esDo(ctx, func(ctx context.Context) (err error) {
		res, err = readmodel.WriteInstance(ctx, w.es, n, meta, state)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("instanceworker: repair %s: %w", aggregateID, err)
	}
	return res, nil
}

// storedDocument is the instance document the event store says instance
// db/class/iid has: the fold of its domain events evs (in slot order, at
// least one), versioned by the last one's slot. Repair and the rebuild of a
// lost index (RebuildIndex) write it.
func storedDocument(db, class, iid string, evs []eventstore.Event) (readmodel.Meta, json.RawMessage) {
	var cur current
	cur.fold(evs)
	last := evs[len(evs)-1].Envelope
	return readmodel.Meta{DB: db, Class: class, InstanceID: iid, SequenceNumber: last.SequenceNumber, EventID: last.EventID,
		CreatedAt: cur.createdAt, UpdatedAt: last.OccurredAt, Deleted: cur.deleted}, cur.state
}
