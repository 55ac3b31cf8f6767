// Package envelope provides the sluice event envelope (docs/architecture.md#the-envelope) and the
// aggregate identity rules (docs/architecture.md#aggregate-identity): the Envelope type and its strict wire
// parser, validation with typed errors, the canonical form and its SHA-256
// used for idempotent appends, deterministic event and instance ids, and the
// normalisation and encodings of aggregate ids (path segments, Kafka keys,
// Elasticsearch _ids). Its ScanObject is the module's one strict JSON-object
// scanner (valid text, no duplicate key at any level, bounded nesting, one
// object), used by the envelope parser and the API's request bodies.
//
// # Guarantees kept
//
// Everything here exists to keep "at most one side effect per
// event_id" (docs/architecture.md#at-most-one-side-effect):
//
//   - Ids are deterministic. DomainEventID derives the event_id of the domain
//     event produced for a command with UUIDv5 over a fixed namespace
//     (EventNamespace), so a retried command yields the same event_id and the
//     registry/store de-duplicate it. InstanceIDFromCommand does the same for
//     generated instance ids (docs/instanceworker.md).
//   - Equal logical content has one canonical form. CanonicalJSON sorts keys
//     at every level, drops store-assigned and transport fields, and keeps
//     numbers exactly as written, so the store's idempotency comparison
//     (docs/eventstore.md#append-protocol-group-commit) depends on content only, not on key order or whitespace.
//   - The encodings do not change across versions. Marshal and the
//     canonical form are computed without reflection but are byte for byte
//     what encoding/json's encoder of the Envelope struct wrote (the
//     reference FuzzMarshalMatchesReflection keeps), so lines and hashes
//     stored by older versions compare equal.
//   - No two aggregates collide on one key. NormalizeAggregateID maps ids
//     that are equal after Unicode NFC and trimming to one string and keeps
//     every other difference (case is significant); EncodePathSegment is a
//     bijection onto a safe alphabet ([A-Za-z0-9_~%-], never "/" or "."), so
//     distinct ids never share a path, and no id can traverse out of its
//     prefix.
//
// # Decisions
//
// Unknown top-level fields: Parse rejects them (CodeInvalid), as it rejects
// duplicate object keys at any level (CodeMalformed), because the envelope is
// a contract and different JSON parsers resolve duplicates differently.
// Consumers that must tolerate envelopes written by a newer version can
// decode with encoding/json directly; Envelope carries standard JSON tags.
// Free keys inside metadata are allowed and round-trip byte-exactly (they are
// kept as json.RawMessage).
//
// Absent values: sequence_number and position use 0 for "not assigned" and
// are omitted when 0; on the wire an explicit 0 is rejected (both are ≥ 1 when
// present). expected_seq is a pointer (nil = absent; 0 is a valid
// precondition). An absent data is {}; an absent schema_version is 1; an
// absent occurred_at is filled by FillDefaults from a clock. occurred_at is
// always stored as RFC 3339 UTC with exactly three fractional digits
// (sub-millisecond precision is truncated).
//
// event_id must be a UUID in canonical 8-4-4-4-12 form (any version, not the
// nil UUID); Normalize lower-cases it so one UUID is one event_id.
//
// Aggregate ids: NFC is applied, then surrounding white space
// (unicode.IsSpace) is trimmed, repeated until neither step changes the
// string, so NormalizeAggregateID is idempotent. The result must be valid
// UTF-8, 1..512 bytes, and contain no rune of category C and no unassigned
// code point (rejecting unassigned code points keeps the NFC result stable
// across Unicode versions).
//
// Command ids (metadata.command_id, the API's Idempotency-Key) must not
// contain ':' (ValidateCommandID). Together with event_type and
// aggregate_type not containing ':', this makes the UUIDv5 name of
// DomainEventID uniquely decodable, so two different (command, aggregate)
// pairs can never be given the same event_id.
//
// Limits (Limits, defaults per docs/architecture.md#the-envelope): encoded envelope ≤ 1 MiB, JSON
// nesting depth of data (and of metadata) ≤ 64 where the data object itself
// is depth 1, encoded metadata ≤ 16 KiB. Depth is measured by an iterative
// token scan, never by recursion over untrusted input.
//
// Text: JSON text must be valid UTF-8 with no \u escape of a lone UTF-16
// surrogate (CheckJSONText, checked on the raw bytes before decoding; ids,
// keys and values alike). Such input is refused (CodeInvalidText), never
// decoded as U+FFFD, so two different inputs cannot become one id. This
// includes envelopes stored by earlier versions: a worker dead-letters them
// with the reason.
//
// Registry keys: AggregateKey maps (aggregate_type, aggregate_id) to the
// processed-event registry's aggregate key, injectively (an escape keeps
// literal ids apart from the hashed form of long ids).
//
// Errors: every validation failure is a *ValidationError naming the field and
// the rule or limit; its Code maps to HTTP 400 (malformed JSON, invalid
// text), 413 (a configured limit exceeded) or 422 (a rule of the contract
// violated).
package envelope
