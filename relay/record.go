package relay

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/shared/envelope"
)

// ContentType is the content-type header of every record.
const ContentType = "application/json"

// Router chooses the topic of an envelope (docs/relay.md#what-it-does-per-cycle).
type Router struct {
	commands, events string
	routes           map[string]TopicRoute
}

// NewRouter returns the routing table: metadata.kafka_topic, else the
// aggregate type's override, else commands → commandsTopic, domain →
// eventsTopic.
func NewRouter(commandsTopic, eventsTopic string, routes map[string]TopicRoute) *Router {
	return &Router{commands: commandsTopic, events: eventsTopic, routes: routes}
}

// Topic returns the topic of e.
func (r *Router) Topic(e envelope.Envelope) string {
	if t := e.Metadata.KafkaTopic(); t != "" {
		return t
	}
	route := r.routes[e.AggregateType]
	if e.Kind == envelope.KindCommand {
		if route.Commands != "" {
			return route.Commands
		}
		return r.commands
	}
	if route.Events != "" {
		return route.Events
	}
	return r.events
}

// Topics are the topics the table names without metadata overrides (the
// ones bootstrapped at start).
func (r *Router) Topics() []string {
	seen := map[string]bool{}
	var out []string
	add := func(t string) {
		if t != "" && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	add(r.commands)
	add(r.events)
	for _, rt := range r.routes {
		add(rt.Commands)
		add(rt.Events)
	}
	return out
}

// Record builds the Kafka record of a stored event: the line byte for byte
// as value, the key of docs/architecture.md#aggregate-identity, and the headers of docs/relay.md#what-it-does-per-cycle. topic
// overrides the routing when non-empty (republish --topic).
func (r *Router) Record(ev eventstore.Event, topic string) *kgo.Record {
	e := ev.Envelope
	if topic == "" {
		topic = r.Topic(e)
	}
	h := make([]kgo.RecordHeader, 0, 10)
	add := func(k, v string) { h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	add("event_id", e.EventID)
	add("event_type", e.EventType)
	add("kind", string(e.Kind))
	add("aggregate_type", e.AggregateType)
	add("aggregate_id", e.AggregateID)
	add("sequence_number", strconv.FormatInt(e.SequenceNumber, 10))
	add("position", strconv.FormatInt(e.Position, 10))
	add("content-type", ContentType)
	if tp := e.Metadata.Traceparent(); tp != "" {
		add("traceparent", tp)
	}
	if ts := e.Metadata.Tracestate(); ts != "" {
		add("tracestate", ts)
	}
	if p, _ := e.Metadata.String(envelope.MetaPrincipal); p != "" {
		add("principal", p)
	}
	return &kgo.Record{Topic: topic, Key: envelope.KafkaKey(e), Value: ev.Raw, Headers: h}
}
