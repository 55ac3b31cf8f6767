package envelope

import (
	"strings"

	"github.com/google/uuid"
)

// EventNamespace is the UUIDv5 namespace of every id sluice derives. It is
// fixed forever: changing it would change every derived event_id and break
// idempotency of retried commands. It was generated once as
// uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://sluice.dev/ns/events")).
const EventNamespace = "540c0715-e03b-5a79-a93b-5960779a9416"

// namespace is EventNamespace parsed once; it is never modified.
var namespace = uuid.MustParse(EventNamespace)

// Namespace returns EventNamespace as a uuid.UUID.
func Namespace() uuid.UUID { return namespace }

// DomainEventID returns the deterministic event_id of the domain event that
// command commandID produces (docs/architecture.md#the-envelope):
//
//	UUIDv5(EventNamespace, "sluice:" + commandID + ":" + eventType + ":" + aggregateType + ":" + aggregateID)
//
// so a retried command always yields the same event_id. Arguments are used
// as given: commandID must satisfy ValidateCommandID (no ':'), eventType and
// aggregateType their patterns, and aggregateID must be normalised
// (NormalizeAggregateID); under these preconditions distinct arguments give
// distinct names.
func DomainEventID(commandID, eventType, aggregateType, aggregateID string) uuid.UUID {
	name := "sluice:" + commandID + ":" + eventType + ":" + aggregateType + ":" + aggregateID
	return uuid.NewSHA1(namespace, []byte(name))
}

// InstanceIDFromCommand returns the deterministic instance_id generated for a
// CREATE_INSTANCE command that names none (docs/instanceworker.md):
// UUIDv5(EventNamespace, "sluice:instance:" + commandID). Use its String()
// form as the instance_id.
func InstanceIDFromCommand(commandID string) uuid.UUID {
	return uuid.NewSHA1(namespace, []byte("sluice:instance:"+commandID))
}

// cloudEventIDPrefix is the name space of event_ids derived from a
// CloudEvent's (source, id).
const cloudEventIDPrefix = "sluice:cloudevent:"

// CloudEventID returns the event_id of the CloudEvent (source, id)
// (docs/api.md#cloudevents-input, docs/kafka.md): id itself when it is a
// UUID (lower-cased, not the nil UUID), else
//
//	UUIDv5(EventNamespace, "sluice:cloudevent:" + source + "\n" + id)
//
// CloudEvents identify an event by (source, id), and so does sluice: the
// API derives the event_id of a CloudEvent it appends with this function,
// and the workers derive it again from a record in the CloudEvents format,
// so a CloudEvent keeps its (source, id) through the store and Kafka.
func CloudEventID(source, id string) string {
	if l := strings.ToLower(id); IsCanonicalUUID(l) && l != uuid.Nil.String() {
		return l
	}
	return uuid.NewSHA1(namespace, []byte(cloudEventIDPrefix+source+"\n"+id)).String()
}
