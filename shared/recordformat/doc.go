// Package recordformat is the one codec between sluice's envelope and a
// Kafka record (docs/kafka.md): Encode builds the record of a stored event
// in the deployment's record format (KAFKA_RECORD_FORMAT), Decode reads
// the envelope back from a record of either format, and EventID,
// EventType and Position read the identity of a record from its headers
// without decoding its value.
//
// The formats:
//
//   - envelope (the default, and sluice's only format before issue #35):
//     the value is the stored envelope line byte for byte; headers event_id,
//     event_type, kind, aggregate_type, aggregate_id, sequence_number,
//     position, content-type and the W3C trace context repeat its fields.
//   - cloudevents: the binary content mode of the CloudEvents Kafka protocol
//     binding (CloudEvents 1.0): the value is the event's data, content-type
//     is its datacontenttype (application/json), and every other attribute
//     is a ce_ header — the required ones, time, subject, dataschema, and
//     sluice's own fields as extension attributes. The mapping is the table
//     in docs/kafka.md; each field has exactly one place.
//
// # Guarantees kept
//
// A deployment switches format with a rolling restart, and both kinds of
// records live in one partition: Decode detects the format per record (a
// ce_specversion header, or a CloudEvents content-type, means CloudEvents;
// anything else is an envelope), whatever KAFKA_RECORD_FORMAT says, so no
// record of either format is lost to a reader that expected the other
// (docs/architecture.md#no-lost-work). Decode(Encode(f, e)) gives e back in
// both formats, every field and metadata key (the round trip is a test), so
// a handler sees the same envelope whichever format the relay wrote.
//
// A record Decode refuses is an error naming the attribute at fault
// (*AttributeError: "ce_type", "content-type", "data"), or the envelope's
// own *envelope.ValidationError; the worker runtime dead-letters it with that
// reason (docs/architecture.md#explicit-failure), never crashes on it.
//
// The event_id of a CloudEvents record is envelope.CloudEventID(source,
// id), the derivation the API applies to a CloudEvent it appends: an event
// that came in as a CloudEvent goes out with its producer's source and id
// (so its (source, id) identity survives the store and Kafka), any other
// event with id = event_id and source "urn:sluice:<aggregate_type>".
package recordformat
