package relay

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/recordformat"
)

// ContentType is the content-type header of every record (both formats).
const ContentType = recordformat.ContentType

// Router chooses the topic of an envelope (docs/relay.md#what-it-does-per-cycle).
type Router struct {
	commands, events string
	routes           map[string]TopicRoute
	format           recordformat.Format // "": envelope
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

// WithFormat returns a copy of the router that builds records in format f
// (KAFKA_RECORD_FORMAT; NewRouter's routers build envelope records).
func (r *Router) WithFormat(f recordformat.Format) *Router {
	c := *r
	c.format = f
	return &c
}

// Format is the record format of the router's records.
func (r *Router) Format() recordformat.Format {
	if r.format == "" {
		return recordformat.Envelope
	}
	return r.format
}

// Record builds the Kafka record of a stored event in the router's format
// (recordformat.Encode, docs/kafka.md): in the envelope format the line
// byte for byte as value and the headers of docs/relay.md#what-it-does-per-cycle, in
// the CloudEvents format the data as value and the ce_ headers; the key of
// docs/architecture.md#aggregate-identity in both. topic overrides the
// routing when non-empty (republish --topic).
func (r *Router) Record(ev eventstore.Event, topic string) *kgo.Record {
	if topic == "" {
		topic = r.Topic(ev.Envelope)
	}
	rec := recordformat.Encode(r.Format(), ev.Envelope, ev.Raw)
	rec.Topic = topic
	return rec
}
