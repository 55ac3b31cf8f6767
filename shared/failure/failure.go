// Package failure classifies the failures of sluice's dependencies
// (Postgres, Kafka, Elasticsearch, object storage) in one place, as an
// outage or as permanent. It keeps guarantee 4 of docs/architecture.md
// ("explicit failure"): an outage pauses the affected loop and resumes by
// itself, it never spends a record's retry budget or dead-letters it; a
// permanent failure is the record's own and goes to its DLQ record with the
// reason. The table it encodes is in docs/failures.md.
package failure

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Class is the class of a dependency failure.
type Class int

const (
	// Unknown: the error says nothing either way; the caller keeps its
	// own default (a worker retries it within the retry budget).
	Unknown Class = iota
	// Outage: the dependency is unreachable, overloaded or too slow;
	// the same request may succeed later. Pause, never dead-letter.
	Outage
	// Permanent: the dependency understood the request and refused it;
	// repeating it cannot help (a mapping conflict, a 400 for one
	// document, a record too large, an invalid topic).
	Permanent
)

func (c Class) String() string {
	switch c {
	case Outage:
		return "outage"
	case Permanent:
		return "permanent"
	}
	return "unknown"
}

// Dependency names, used as metric labels and in readiness reasons.
const (
	Postgres      = "postgres"
	Kafka         = "kafka"
	Elasticsearch = "elasticsearch"
	ObjectStore   = "objectstore"
)

// httpStatuser is an error carrying the HTTP status of a dependency's
// answer (readmodel.StatusError, eventstore's typed errors).
type httpStatuser interface{ HTTPStatus() int }

// httpStatusCoder is the same for the AWS SDK's response errors.
type httpStatusCoder interface{ HTTPStatusCode() int }

// IsOutage reports whether err is a dependency outage (Classify == Outage).
func IsOutage(ctx context.Context, err error) bool { return Classify(ctx, err) == Outage }

// Classify returns the class of err, a failure of a call to a dependency
// made under ctx. The caller's own cancellation (ctx done) is Unknown: it
// says nothing about the dependency.
//
// Outage: connection refused, reset, aborted or unreachable; an unexpected
// EOF; a timeout (net.Error Timeout, context.DeadlineExceeded of a
// per-request deadline); HTTP 408, 429, 502, 503, 504; Postgres connection
// failures and SQLSTATE classes 08 (connection), 53 (insufficient
// resources), 58 (system I/O error), 57P01–57P03 (shutdown, cannot connect
// now), 57P05 (idle session timeout), 57014 (statement timeout on an
// overloaded server), 25006 (read-only: a standby after a failover) — the
// registry's own list (registry.ErrUnavailable); Kafka errors franz-go marks
// retriable.
//
// Credentials and policy are the deployment's, never the record's: HTTP
// 401 and 403 (a wrong key, an expired token, an index blocked read-only by
// a full disk) and Kafka's authorization and SASL errors are outages too, so
// that a credential mistake pauses the worker with readiness red instead of
// dead-lettering every record it touches.
//
// Permanent: any other HTTP 4xx (400 mapping conflict, 413, 404 of a
// named resource…); any other Kafka error code (MESSAGE_TOO_LARGE,
// INVALID_TOPIC_EXCEPTION…).
//
// The first classifiable error in err's chain wins.
func Classify(ctx context.Context, err error) Class {
	if err == nil || (ctx != nil && ctx.Err() != nil) {
		return Unknown
	}
	if st := status(err); st != 0 {
		switch {
		case st == http.StatusRequestTimeout, st == http.StatusTooManyRequests,
			st == http.StatusBadGateway, st == http.StatusServiceUnavailable, st == http.StatusGatewayTimeout,
			st == http.StatusUnauthorized, st == http.StatusForbidden:
			return Outage
		case st >= 400 && st < 500:
			return Permanent
		case st >= 500:
			return Unknown
		}
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		if ke.Retriable || kafkaAccessDenied(ke) {
			return Outage
		}
		return Permanent
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case len(pe.Code) == 5 && (pe.Code[:2] == "08" || pe.Code[:2] == "53" || pe.Code[:2] == "58"),
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", pe.Code == "57P05",
			pe.Code == "57014", pe.Code == "25006":
			return Outage
		}
		return Unknown
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return Outage
	}
	if pgconn.Timeout(err) {
		return Outage
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.ETIMEDOUT),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return Outage
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return Outage // a transport failure: timeout, refused, DNS, TLS
	}
	return Unknown
}

// status returns the HTTP status carried by err's chain, or 0.
func status(err error) int {
	var hs httpStatuser
	if errors.As(err, &hs) {
		return hs.HTTPStatus()
	}
	var hc httpStatusCoder
	if errors.As(err, &hc) {
		return hc.HTTPStatusCode()
	}
	return 0
}

// Dependency names the dependency err came from when its chain says so
// (a Postgres error: Postgres; a Kafka error code: Kafka), else "". Errors
// of HTTP dependencies do not say which one answered: callers that know
// wrap them (consumer.Outage(failure.Elasticsearch, err)).
func Dependency(err error) string {
	var pe *pgconn.PgError
	var ce *pgconn.ConnectError
	var ke *kerr.Error
	switch {
	case errors.As(err, &pe), errors.As(err, &ce):
		return Postgres
	case errors.As(err, &ke):
		return Kafka
	}
	return ""
}

// kafkaAccessDenied reports Kafka's authentication and authorization
// refusals: the deployment's credentials or ACLs, not the record.
func kafkaAccessDenied(ke *kerr.Error) bool {
	switch ke {
	case kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed, kerr.ClusterAuthorizationFailed,
		kerr.TransactionalIDAuthorizationFailed, kerr.SaslAuthenticationFailed, kerr.DelegationTokenAuthorizationFailed:
		return true
	}
	return false
}
