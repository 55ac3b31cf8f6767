package projectionworker

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/suggest"
)

// Projection is a read model in Elasticsearch (docs/projectionworker.md#model): a named,
// versioned Go value with the event types it handles, its index template
// and a pure function from one event to bulk operations. Implementations
// must be safe for concurrent use and deterministic: the same event always
// yields the same operations (a re-run after a crash repeats them).
type Projection interface {
	// Name is the projection's name, [a-z0-9][a-z0-9_-]{0,62}; it becomes
	// part of index names, the registry handler and the consumer group.
	Name() string
	// Version is the version this code builds when none is live yet (≥ 1).
	// A rebuild runs the same code under a higher version.
	Version() int
	// Handles reports whether the projection acts on the event; other
	// events are finished with outcome "ignored".
	Handles(e envelope.Envelope) bool
	// Template is the body of a new concrete index and the filter of its
	// read alias.
	Template() Template
	// Project returns the bulk operations for one handled event. An error
	// is permanent: the event goes to the dead-letter topic.
	Project(e envelope.Envelope) ([]Op, error)
}

// Guarded is implemented by a projection that chooses its registry
// sequence-guard policy (docs/registry.md#sequence-guard-policies-per-handler). A projection without it is skip-stale:
// its documents hold current state, versioned by sequence number, so an
// event at or below the aggregate's last applied sequence has nothing to add.
// A projection whose documents are the events themselves (history: one
// document per event, op_type create) returns claim.Unguarded, so that an
// event published late, after newer events of its aggregate, still gets its
// document. WaitForPredecessor is not for projections and is refused.
type Guarded interface {
	SequenceGuard() claim.Policy
}

// guardOf returns p's sequence-guard policy.
func guardOf(p Projection) (claim.Policy, error) {
	g, ok := p.(Guarded)
	if !ok {
		return claim.SkipStale, nil
	}
	switch pol := g.SequenceGuard(); pol {
	case claim.SkipStale, claim.Unguarded:
		return pol, nil
	default:
		return 0, fmt.Errorf("projectionworker: projection %q: sequence guard %s: want skip-stale or none", p.Name(), pol)
	}
}

// Template describes a projection's indices.
type Template struct {
	// Settings and Mappings are the body of a new concrete index.
	Settings map[string]any
	Mappings map[string]any
	// ReadFilter, when set, filters the read alias (instances:
	// {"term":{"deleted":false}}, which hides tombstones).
	ReadFilter map[string]any
}

// Op is one bulk operation of an event.
type Op struct {
	// Scope is the {db} part of the index name
	// {prefix}{scope}_{projection}_v{version}; it must match
	// [a-z0-9][a-z0-9_-]{0,62}.
	Scope string
	// ID is the document _id (≤ 512 bytes: use envelope.ESDocumentID).
	ID string
	// Create makes the operation op_type=create (history: exactly one
	// document per event; a second write is a 409). Otherwise it is an
	// index operation.
	Create bool
	// Version, when > 0, is the external version (sequence_number).
	Version int64
	// Doc is the document body, a JSON object. Deletes are tombstones:
	// a versioned document that says it is deleted.
	Doc json.RawMessage
	// Compact says that Doc is already valid compact JSON, as json.Compact
	// leaves it (the projection encoded it itself): the worker writes it
	// as it is instead of compacting and checking it again. Leave it false
	// for a document that comes from elsewhere.
	Compact bool
	// FromState, for a Stateful projection, says that the document is the
	// round's state of Scope/ID (Doc is left nil): what the projection
	// recorded in the DocState with PutValue, encoded once when the round's
	// write of the document is built — after the round's last event, not
	// after every event. The encoding is the projection's (Compact applies
	// to it as to Doc).
	FromState bool
}

var nameRE = regexp.MustCompile(`^` + envelope.NamePattern + `$`)

// ValidateName checks a projection or scope name.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("projectionworker: name %q must match %s", name, envelope.NamePattern)
	}
	return nil
}

// Names are the index and aliases of one scope (db) of one projection
// version.
type Names struct {
	// Index is the concrete index {prefix}{scope}_{projection}_v{version}.
	Index string
	// ReadAlias is {prefix}{scope}_{projection}, with the template's
	// ReadFilter.
	ReadAlias string
	// WriteAlias is {prefix}{scope}_{projection}_write (is_write_index),
	// on the active version.
	WriteAlias string
}

// IndexNames returns the names of scope for projection name at version. For
// instances they are exactly readmodel.InstanceNames.
func IndexNames(prefix, scope, name string, version int) Names {
	base := prefix + scope + "_" + name
	return Names{Index: base + "_v" + strconv.Itoa(version), ReadAlias: base, WriteAlias: base + "_write"}
}

// HandlerName is the registry handler of a projection version.
func HandlerName(name string, version int) string {
	return "projection:" + name + ":v" + strconv.Itoa(version)
}

// GroupName is the base consumer group of a projection version; the
// group id is kafka.Config.Group(GroupName(…)), KAFKA_GROUP_PREFIX first.
func GroupName(name string, version int) string {
	return "projection-" + name + "-v" + strconv.Itoa(version)
}

// parseIndex splits a concrete index name {prefix}{scope}_{name}_v{N} of
// projection name into scope and version.
func parseIndex(prefix, name, index string) (scope string, version int, ok bool) {
	rest, found := strings.CutPrefix(index, prefix)
	if !found {
		return "", 0, false
	}
	i := strings.LastIndex(rest, "_"+name+"_v")
	if i <= 0 {
		return "", 0, false
	}
	v, err := strconv.Atoi(rest[i+len(name)+3:])
	if err != nil || v <= 0 {
		return "", 0, false
	}
	scope = rest[:i]
	if ValidateName(scope) != nil {
		return "", 0, false
	}
	return scope, v, true
}

// Builtins returns the built-in projections: instances and history.
func Builtins() []Projection {
	return []Projection{Instances{}, History{}}
}

// Lookup finds a projection by name among the built-ins and custom.
func Lookup(name string, custom ...Projection) (Projection, error) {
	var names []string
	for _, p := range append(custom, Builtins()...) {
		if p.Name() == name {
			return p, nil
		}
		names = append(names, p.Name())
	}
	nf := suggest.NotFound("projection", name, names)
	nf.Note = "known: " + strings.Join(names, ", ")
	return nil, fmt.Errorf("projectionworker: %w", nf)
}
