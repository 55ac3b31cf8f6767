// Package api provides sluice's command API (docs/api.md, `sluice api`): the
// HTTP front of the write side. Clients create, merge-patch and delete
// instances; each request becomes one command envelope appended to the event
// store (kind command, aggregate Instance "{db}:{class}:{instance_id}",
// event type CREATE_INSTANCE, UPDATE_INSTANCE or DELETE_INSTANCE), which the
// relay publishes and the instance worker turns into domain events. The API
// also serves command status (from the processed-event registry), an
// instance's state folded from the event store (read-your-writes) and its
// event stream, /openapi.json, and /metrics, /livez and /readyz.
//
// The event API (events.go, cloudevents.go, subscribe.go) lets producers
// append domain events of their own aggregate types — one event or an
// atomic batch, with an expected_sequence and idempotency by event_id, in
// sluice's own JSON or as CloudEvents — read streams forward and backward
// and the log by position or by cursor (a position per shard on a store
// of several shards), and subscribe to the log over Server-Sent Events,
// resuming from Last-Event-ID (the cursor after the last event received)
// without loss or duplicates (eventstore.LogPage.Next).
//
// api/ is the write side's HTTP front (docs/architecture.md#the-parts), kept apart
// from eventstore (which it only calls) and from the workers.
//
// # Guarantee kept
//
// Explicit failure (docs/architecture.md#explicit-failure): bad input gets a clear 4xx with a
// machine-readable body (an RFC 9457 problem document: type, title,
// status, detail, code, field, limit) and nothing is half-written. Every
// rule is checked before the append — body size and JSON depth limits,
// valid text (no invalid UTF-8, no lone surrogate escape: 400
// invalid_text, never U+FFFD), strict JSON (no duplicate keys, no unknown
// fields), the id rules of docs/architecture.md#aggregate-identity (db and class names, normalised instance
// ids, Idempotency-Key syntax), the data keys the instance document can
// hold (readmodel.ValidateData, the worker's own rule: 422
// invalid_data_key) and the store's envelope limits — and a
// command is one envelope appended atomically, so a request either stored
// its command (202) or stored nothing (4xx). When the store cannot say
// (503), the reply names the command id to retry with; retries with the same
// Idempotency-Key are idempotent (docs/architecture.md#at-most-one-side-effect: the store de-duplicates by
// event_id).
//
// # Command envelope
//
//	event_id        the Idempotency-Key if it is a canonical lower-case UUID,
//	                else UUIDv5(EventNamespace, "sluice:command:" + key); a
//	                fresh UUID without a key (EventIDForCommand)
//	metadata        command_id = the key (or the fresh UUID); traceparent,
//	                tracestate, request_id from the request headers
//	expected_seq    from ?expected_seq= or If-Match
//	data            CREATE_INSTANCE {"db","class","instance_id","data"}
//	                UPDATE_INSTANCE {"data": merge patch}
//	                DELETE_INSTANCE {}
//	occurred_at     left to the store (so a replay compares equal)
//
// A create's instance_id is resolved here, because the aggregate id needs
// it: the body's instance_id, else data["{class}_id"], else
// envelope.InstanceIDFromCommand(command_id).
//
// docs/api.md is the user guide; openapi.json the machine-readable contract.
package api
