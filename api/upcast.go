package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/shared/envelope"
)

// CodeUpcastFailed: a read with as=latest met an event its type's
// upcasters cannot bring to the latest schema version (500; the stored
// form is still readable without as).
const CodeUpcastFailed = "upcast_failed"

func init() {
	problemTitles[CodeUpcastFailed] = "Event cannot be upcast to the latest schema version"
}

// Values of the as query parameter of the event reads.
const (
	asStored = "stored" // the default: the stored envelope, byte for byte
	asLatest = "latest" // upcast to the type's latest schema version
)

// parseAs reads the as parameter of a stream read, a log read or a
// subscription (docs/schemas.md#upcasting-on-read): true for latest.
func parseAs(q url.Values) (bool, *Error) {
	vals, ok := q["as"]
	if !ok {
		return false, nil
	}
	if len(vals) > 1 {
		return false, badParam("as", "as must be given once")
	}
	switch vals[0] {
	case asLatest:
		return true, nil
	case asStored:
		return false, nil
	}
	e := badParam("as", `as must be %q (each event upcast to its type's latest schema version) or %q (the default: as stored), got %q`, asLatest, asStored, vals[0])
	e.Limit = asLatest + "|" + asStored
	return false, e
}

// present is the JSON of ev as a read sends it: the stored line, or with
// latest the envelope upcast to its type's latest schema version
// (schema.Registry.Latest) — the stored line still when nothing changed.
// Nothing stored is rewritten.
func (s *server) present(ctx context.Context, ev eventstore.Event, latest bool) ([]byte, *Error) {
	if !latest || s.opts.Schemas == nil {
		return ev.Raw, nil
	}
	up, err := s.opts.Schemas.Latest(ctx, ev.Envelope)
	if err != nil {
		return nil, fromUpcast(err)
	}
	if up.SchemaVersion == ev.Envelope.SchemaVersion {
		return ev.Raw, nil
	}
	b, err := envelope.Marshal(up)
	if err != nil {
		return nil, &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "an upcast event could not be encoded", cause: err}
	}
	return b, nil
}

// fromUpcast maps a failed upcast: the upcaster's failure is the
// deployment's (500, naming the event, its type, the versions and the
// upcaster); a registry that cannot be read is an outage (503).
func fromUpcast(err error) *Error {
	var ue *schema.UpcastError
	if errors.As(err, &ue) {
		from := ue.From
		if ue.From == ue.To && ue.Stored < ue.To {
			// The result failed the latest schema: no one step did.
			from = ue.Stored
		}
		return &Error{Status: http.StatusInternalServerError, Code: CodeUpcastFailed, Field: "as", SchemaVersion: ue.Stored,
			Limit:   fmt.Sprintf("%s v%d→v%d", ue.EventType, from, ue.To),
			Message: ue.Error() + "; fix the upcaster (sluice schema upcaster set) or read without as=latest", cause: err}
	}
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the schema registry could not be read to upcast events; retry",
		cause: err, retryAfter: time.Second}
}
