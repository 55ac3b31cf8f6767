package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Error codes of the machine-readable error bodies ({"error": code, …}).
// They are part of the API contract (docs/api.md, /openapi.json).
const (
	CodeMalformedJSON        = "malformed_json"                  // 400
	CodeInvalidText          = "invalid_text"                    // 400
	CodeInvalidParameter     = "invalid_parameter"               // 400
	CodeUnexpectedBody       = "unexpected_body"                 // 400
	CodeUnauthorized         = "unauthorized"                    // 401
	CodeNotFound             = "not_found"                       // 404 (no such route)
	CodeCommandNotFound      = "command_not_found"               // 404
	CodeInstanceNotFound     = "instance_not_found"              // 404
	CodeInstanceDeleted      = "instance_deleted"                // 404
	CodeMethodNotAllowed     = "method_not_allowed"              // 405
	CodeConflict             = "optimistic_concurrency_conflict" // 409
	CodeSlotConflict         = "slot_conflict"                   // 409
	CodeBodyTooLarge         = "body_too_large"                  // 413
	CodeLimitExceeded        = "limit_exceeded"                  // 413
	CodeUnsupportedMediaType = "unsupported_media_type"          // 415
	CodeValidationFailed     = "validation_failed"               // 422
	CodeInvalidDataKey       = "invalid_data_key"                // 422
	CodeIdempotencyKeyReused = "idempotency_key_reused"          // 422
	CodeSchemaInvalid        = "schema_validation_failed"        // 422 (docs/schemas.md)
	CodeSchemaNotRegistered  = "schema_not_registered"           // 422 (EVENT_SCHEMA_MODE=strict)
	CodeTooManyRequests      = "too_many_requests"               // 429
	CodeUnavailable          = "unavailable"                     // 503
	CodeStarting             = "starting"                        // 503 (the process's start-up probes: cmd/sluice)
	CodeInternal             = "internal_error"                  // 500
	CodeNotImplemented       = "not_implemented"                 // 501 (a read by one global position on a store of several shards)
)

// ProblemTypePrefix is the prefix of the problem type URI of every error
// body: "urn:sluice:problem:" + the error code (RFC 9457 "type").
const ProblemTypePrefix = "urn:sluice:problem:"

// mediaProblem is the media type of error bodies (RFC 9457).
const mediaProblem = "application/problem+json"

// problemTitles are the RFC 9457 titles, one per problem type (code).
var problemTitles = map[string]string{
	CodeMalformedJSON:        "Malformed JSON",
	CodeInvalidText:          "Invalid text",
	CodeInvalidParameter:     "Invalid parameter",
	CodeUnexpectedBody:       "Unexpected body",
	CodeUnauthorized:         "Unauthorized",
	CodeNotFound:             "Not found",
	CodeCommandNotFound:      "Command not found",
	CodeInstanceNotFound:     "Instance not found",
	CodeInstanceDeleted:      "Instance deleted",
	CodeMethodNotAllowed:     "Method not allowed",
	CodeConflict:             "Optimistic concurrency conflict",
	CodeSlotConflict:         "Slot conflict",
	CodeBodyTooLarge:         "Body too large",
	CodeLimitExceeded:        "Limit exceeded",
	CodeUnsupportedMediaType: "Unsupported media type",
	CodeValidationFailed:     "Validation failed",
	CodeInvalidDataKey:       "Invalid data key",
	CodeIdempotencyKeyReused: "Idempotency key reused",
	CodeSchemaInvalid:        "Data does not match the event type's schema",
	CodeSchemaNotRegistered:  "Event type has no schema",
	CodeTooManyRequests:      "Too many requests",
	CodeUnavailable:          "Unavailable",
	CodeStarting:             "Service starting",
	CodeInternal:             "Internal error",
	CodeNotImplemented:       "Not implemented for this store",
}

// Error is one failed request (or one failed batch item) as the API reports
// it. Its JSON form (MarshalJSON) is the error body of every 4xx and 5xx
// reply: an RFC 9457 problem document, which holds the members below with
// their tags, in this order, after the RFC's own.
type Error struct {
	// Status is the HTTP status code.
	Status int `json:"-"`
	// Field names the offending input ("data", "instance_id",
	// "Idempotency-Key", "expected_seq", …), when there is one.
	Field string `json:"field,omitempty"`
	// Limit is the rule or limit that was violated ("1048576 bytes",
	// "depth 63", "[a-z0-9][a-z0-9_-]{0,62}").
	Limit string `json:"limit,omitempty"`
	// Permission is the missing permission of a 403 ("append on
	// stream:Order/eu-1").
	Permission string `json:"permission,omitempty"`
	// Code is the machine-readable error code (the Code* constants).
	Code string `json:"error"`
	// Message explains the failure for humans.
	Message string `json:"message"`
	// ExpectedSeq and ActualSeq are set on optimistic-concurrency conflicts.
	ExpectedSeq *int64 `json:"expected_seq,omitempty"`
	ActualSeq   *int64 `json:"actual_seq,omitempty"`
	// CommandID is set when the command may have been stored although the
	// request failed (503): retry with Idempotency-Key set to it.
	CommandID string `json:"command_id,omitempty"`
	// SequenceNumber and PendingCommands describe what is known of a missing
	// or deleted instance (404 on instance reads).
	SequenceNumber  *int64 `json:"sequence_number,omitempty"`
	PendingCommands *int   `json:"pending_commands,omitempty"`
	// SchemaVersion, Keyword and Pointer say why data failed its event
	// type's schema (schema_validation_failed): the version checked, the
	// JSON Schema keyword that refused and the JSON pointer into data.
	SchemaVersion int    `json:"schema_version,omitempty"`
	Keyword       string `json:"keyword,omitempty"`
	Pointer       string `json:"pointer,omitempty"`

	// cause is the underlying error of a 5xx, logged, never sent.
	cause error
	// retryAfter, when set, is sent as the Retry-After header (seconds) of
	// a 503 for a dependency outage; a 429 or 503 without it gets
	// defaultRetryAfter.
	retryAfter time.Duration
}

// problem is the wire form of Error: the RFC 9457 members (type, title,
// status, detail) and the machine-readable code, then Error's own members
// (wireError: its fields and tags, error = code and message = detail
// among them), then the schema error's pointer, which is sent even when
// empty (the root of data).
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	*wireError
	Pointer *string `json:"pointer,omitempty"`
}

// wireError is Error without its methods, so that problem can embed it
// (an embedded *Error would bring MarshalJSON along).
type wireError Error

// MarshalJSON encodes the error as an RFC 9457 problem document:
// {"type": "urn:sluice:problem:<code>", "title", "status", "detail",
// "code", "field", "limit", "error": code, "message": detail, …}.
func (e *Error) MarshalJSON() ([]byte, error) {
	title := problemTitles[e.Code]
	if title == "" {
		title = http.StatusText(e.Status)
	}
	return marshalNoEscape(problem{
		Type: ProblemTypePrefix + e.Code, Title: title, Status: e.Status, Detail: e.Message, Code: e.Code,
		wireError: (*wireError)(e), Pointer: pointerOf(e),
	})
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("api: %d %s: %s: %s", e.Status, e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("api: %d %s: %s", e.Status, e.Code, e.Message)
}

// HTTPStatus is the status code of the reply.
func (e *Error) HTTPStatus() int { return e.Status }

func newError(status int, code, field, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

func badParam(field, format string, args ...any) *Error {
	return newError(http.StatusBadRequest, CodeInvalidParameter, field, format, args...)
}

func unprocessable(field, format string, args ...any) *Error {
	return newError(http.StatusUnprocessableEntity, CodeValidationFailed, field, format, args...)
}

// fromValidation maps an envelope validation error to the API's error,
// renaming the envelope's field to the request's where they differ.
func fromValidation(ve *envelope.ValidationError, field string) *Error {
	status, code := ve.HTTPStatus(), CodeValidationFailed
	switch {
	case ve.Code == envelope.CodeInvalidText:
		// Invalid UTF-8 or a lone surrogate escape: 400 wherever it is
		// (body, path segment, header), naming the path the envelope
		// found (a body's) or the request's field.
		code = CodeInvalidText
		if ve.Field != "" && field == "" {
			field = ve.Field
		}
	case ve.Code == envelope.CodeLimitExceeded:
		code = CodeLimitExceeded
	case ve.Code == envelope.CodeMalformed && field != "":
		// An id (path segment, header) that is not valid UTF-8: a rule of
		// docs/architecture.md#aggregate-identity broken, not malformed JSON.
		status = http.StatusUnprocessableEntity
	case ve.Code == envelope.CodeMalformed:
		code = CodeMalformedJSON
	}
	if field == "" {
		field = ve.Field
	}
	return &Error{Status: status, Code: code, Field: field, Limit: ve.Limit, Message: ve.Reason}
}

// fromAppend maps the error of one appended command to the API's error.
// Store errors that are not one of the typed rejections leave the outcome
// unknown: 503 with the command id to retry with.
func fromAppend(err error, commandID string) *Error {
	var ce *eventstore.ConflictError
	var me *eventstore.IdempotencyMismatchError
	var se *eventstore.SlotError
	var ve *envelope.ValidationError
	var ue *eventstore.UnavailableError
	var ae *Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ue):
		// Object storage unreachable or hung (issue 26): the store failed
		// the append within EVENT_STORE_OBJECT_TIMEOUT.
		msg := "the event store's object storage is unavailable; the command may or may not be stored: retry after Retry-After with Idempotency-Key set to command_id"
		if ue.NotWritten {
			msg = "the event store's object storage is unavailable; the command was not stored: retry after Retry-After with Idempotency-Key set to command_id"
		}
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, CommandID: commandID, cause: err,
			Message: msg, retryAfter: ue.RetryAfter}
	case errors.As(err, &ce):
		exp, act := ce.ExpectedSeq, ce.ActualSeq
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Field: "expected_seq",
			Message:     fmt.Sprintf("expected_seq %d does not match the instance's last sequence %d; read it again and retry with expected_seq %d", exp, act, act),
			ExpectedSeq: &exp, ActualSeq: &act}
	case errors.As(err, &me):
		return &Error{Status: http.StatusUnprocessableEntity, Code: CodeIdempotencyKeyReused, Field: "Idempotency-Key",
			Message: fmt.Sprintf("Idempotency-Key %q was already used for a different request (stored %.12s…, this %.12s…); use a new key", commandID, me.StoredHash, me.NewHash)}
	case errors.As(err, &se):
		return &Error{Status: http.StatusConflict, Code: CodeSlotConflict, Message: se.Error()}
	case errors.As(err, &ve):
		return fromValidation(ve, "")
	case errors.Is(err, context.Canceled):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, CommandID: commandID,
			Message: "the request was cancelled before the command was acknowledged; it may or may not be stored: retry with Idempotency-Key set to command_id"}
	default:
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, CommandID: commandID, cause: err,
			Message: "the event store could not acknowledge the command; it may or may not be stored: retry with Idempotency-Key set to command_id"}
	}
}

// fromRead maps the error of a read (store or registry) to the API's error.
func fromRead(err error) *Error {
	var ae *Error
	var ve *envelope.ValidationError
	var sh *eventstore.ShardsNotSupportedError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ve):
		return fromValidation(ve, "")
	case errors.As(err, &sh):
		e := newError(http.StatusNotImplemented, CodeNotImplemented, "", "%s", sh.Error())
		e.cause = err
		return e
	case errors.Is(err, registry.ErrUnavailable):
		e := newError(http.StatusServiceUnavailable, CodeUnavailable, "", "the processed-event registry is unavailable; retry later")
		e.cause = err
		return e
	default:
		e := newError(http.StatusServiceUnavailable, CodeUnavailable, "", "the read could not be served; retry later")
		e.cause = err
		return e
	}
}

// pointerOf is the problem's pointer member: present (even "", the data
// object itself) on schema_validation_failed only.
func pointerOf(e *Error) *string {
	if e.Code != CodeSchemaInvalid {
		return nil
	}
	p := e.Pointer
	return &p
}
