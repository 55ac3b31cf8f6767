package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Error codes of the API's problem documents that callers commonly branch
// on (docs/api.md, "Errors"); Error.Code holds any code the API sends.
const (
	CodeConflict             = "optimistic_concurrency_conflict"
	CodeEventIDReused        = "event_id_reused"
	CodePartialBatch         = "partial_batch"
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	CodeValidationFailed     = "validation_failed"
	CodeStreamNotFound       = "stream_not_found"
	CodeInstanceNotFound     = "instance_not_found"
	CodeInstanceDeleted      = "instance_deleted"
	CodeCommandNotFound      = "command_not_found"
	CodeUnauthorized         = "unauthorized"
	CodeTooManyRequests      = "too_many_requests"
	CodeUnavailable          = "unavailable"
)

// Error is a reply of the API with a status of 400 or above: its RFC 9457
// problem document (the API's, or, when the body is not one, what the
// status says). Every error of a request the API refused wraps one, so
// errors.As(err, &*Error) works for all of them.
type Error struct {
	// Status is the HTTP status; Code the machine-readable code
	// ("optimistic_concurrency_conflict", …).
	Status int
	Code   string
	// Title and Detail are the problem's human-readable summary and
	// explanation.
	Title, Detail string
	// Field names the offending input: a body member or the path of a
	// value inside it ("events[0].event_type", "data.items[2].name"), a
	// path parameter, a header or a query parameter.
	Field string
	// Limit is the violated rule or limit, when the API names one.
	Limit string
	// ExpectedSeq and ActualSeq are set on optimistic-concurrency
	// conflicts (ExpectedSeq only when a number was expected).
	ExpectedSeq, ActualSeq *int64
	// CommandID is set on a 503 of a command whose outcome is unknown.
	CommandID string
	// SequenceNumber and PendingCommands describe a missing or deleted
	// instance (404).
	SequenceNumber  *int64
	PendingCommands *int
	// RetryAfter is the reply's Retry-After (0 when absent).
	RetryAfter time.Duration
	// Body is the reply body as received.
	Body []byte
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", e.Status, e.Code)
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	return b.String()
}

// ConflictError is a 409 optimistic_concurrency_conflict: the stream or
// instance was not at the expected sequence, and nothing was written.
// Actual is the sequence it is at: read from there and decide again.
type ConflictError struct {
	// Expected is the sequence number expected, when one was (nil for
	// "no_stream" and "exists"); Actual is the last sequence stored.
	Expected *int64
	Actual   int64
	Err      *Error
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("conflict: the last sequence is %d: %v", e.Actual, e.Err)
}

func (e *ConflictError) Unwrap() error { return e.Err }

// ValidationError is a 400 or 422: the request is invalid as sent (and a
// retry would fail alike). Field names the offending input, in the API's
// notation (see Error.Field); Code says which rule
// ("validation_failed", "invalid_data_key", "idempotency_key_reused",
// "malformed_json", "invalid_text", "invalid_parameter", …).
type ValidationError struct {
	Field, Code, Limit string
	Err                *Error
}

func (e *ValidationError) Error() string { return "invalid request: " + e.Err.Error() }

func (e *ValidationError) Unwrap() error { return e.Err }

// NotFoundError is a 404: no such stream, instance, command or route.
// Code says which ("stream_not_found", "instance_not_found",
// "instance_deleted", "command_not_found", "not_found"); for an instance,
// SequenceNumber and PendingCommands say what is known (a create still
// pending, a delete at that sequence).
type NotFoundError struct {
	Code            string
	SequenceNumber  int64
	PendingCommands int
	Err             *Error
}

func (e *NotFoundError) Error() string { return "not found: " + e.Err.Error() }

func (e *NotFoundError) Unwrap() error { return e.Err }

// problem is the wire form of an error reply.
type problem struct {
	Type            string `json:"type"`
	Title           string `json:"title"`
	Status          int    `json:"status"`
	Detail          string `json:"detail"`
	Code            string `json:"code"`
	Field           string `json:"field"`
	Limit           string `json:"limit"`
	Error           string `json:"error"`
	Message         string `json:"message"`
	ExpectedSeq     *int64 `json:"expected_seq"`
	ActualSeq       *int64 `json:"actual_seq"`
	CommandID       string `json:"command_id"`
	SequenceNumber  *int64 `json:"sequence_number"`
	PendingCommands *int   `json:"pending_commands"`
}

// parseProblem builds the Error of a reply with status >= 300.
func parseProblem(resp *http.Response, body []byte) *Error {
	e := &Error{Status: resp.StatusCode, Body: body, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var p problem
	if json.Unmarshal(body, &p) == nil {
		e.Code, e.Title, e.Detail = p.Code, p.Title, p.Detail
		if e.Code == "" {
			e.Code = p.Error // a server of an earlier version
		}
		if e.Detail == "" {
			e.Detail = p.Message
		}
		e.Field, e.Limit, e.CommandID = p.Field, p.Limit, p.CommandID
		e.ExpectedSeq, e.ActualSeq = p.ExpectedSeq, p.ActualSeq
		e.SequenceNumber, e.PendingCommands = p.SequenceNumber, p.PendingCommands
	}
	if e.Code == "" {
		e.Code = strings.ReplaceAll(strings.ToLower(http.StatusText(resp.StatusCode)), " ", "_")
	}
	if e.Title == "" {
		e.Title = http.StatusText(resp.StatusCode)
	}
	if e.Detail == "" && len(body) > 0 && len(body) <= 512 {
		e.Detail = strings.TrimSpace(string(body))
	}
	return e
}

// typed wraps e in the typed error callers branch on, if any.
func typed(e *Error) error {
	switch {
	case e.Status == http.StatusConflict && e.Code == CodeConflict:
		c := &ConflictError{Expected: e.ExpectedSeq, Err: e}
		if e.ActualSeq != nil {
			c.Actual = *e.ActualSeq
		}
		return c
	case e.Status == http.StatusBadRequest || e.Status == http.StatusUnprocessableEntity:
		return &ValidationError{Field: e.Field, Code: e.Code, Limit: e.Limit, Err: e}
	case e.Status == http.StatusNotFound:
		n := &NotFoundError{Code: e.Code, Err: e}
		if e.SequenceNumber != nil {
			n.SequenceNumber = *e.SequenceNumber
		}
		if e.PendingCommands != nil {
			n.PendingCommands = *e.PendingCommands
		}
		return n
	}
	return e
}
