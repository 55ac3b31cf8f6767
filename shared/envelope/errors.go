package envelope

import (
	"fmt"
	"net/http"
)

// ErrorCode classifies a ValidationError for callers that map errors to
// protocol responses.
type ErrorCode string

const (
	// CodeMalformed: the input is not well-formed (invalid JSON, invalid
	// UTF-8, duplicate keys, trailing data). HTTP 400.
	CodeMalformed ErrorCode = "malformed"
	// CodeLimitExceeded: a configured Limit is exceeded (envelope size,
	// nesting depth, metadata size). HTTP 413.
	CodeLimitExceeded ErrorCode = "limit_exceeded"
	// CodeInvalid: well-formed input that breaks a rule of the contract
	// (missing or unknown field, wrong type, pattern, range). HTTP 422.
	CodeInvalid ErrorCode = "invalid"
	// CodeInvalidText: text that is not valid UTF-8, or a JSON \u escape of
	// a lone UTF-16 surrogate, in an id, key or value (CheckJSONText). It is
	// refused, never replaced by U+FFFD. HTTP 400.
	CodeInvalidText ErrorCode = "invalid_text"
)

// ValidationError reports one violated rule of the envelope or identity
// contract. Use errors.As to obtain it from any error this package returns
// for bad input.
type ValidationError struct {
	// Code classifies the failure (see HTTPStatus).
	Code ErrorCode
	// Field is the JSON name of the offending field ("event_type",
	// "metadata.command_id", "data", …), or "" for the envelope as a whole.
	Field string
	// Limit is the rule or limit that was violated, in a short form such as
	// "[A-Za-z0-9][A-Za-z0-9._-]{0,127}", "1048576 bytes" or "depth 64".
	Limit string
	// Reason is a human-readable explanation that includes the limit.
	Reason string
	// Fault says what is wrong with invalid text (Code CodeInvalidText):
	// FaultInvalidUTF8 or FaultLoneSurrogate; "" for other codes.
	Fault TextFault
}

// Error formats the failure as `envelope: field "F": reason`.
func (e *ValidationError) Error() string {
	if e.Field == "" {
		return "envelope: " + e.Reason
	}
	return fmt.Sprintf("envelope: field %q: %s", e.Field, e.Reason)
}

// HTTPStatus maps the error to the status the HTTP API replies with:
// 400 (malformed, invalid text), 413 (limit exceeded) or 422 (invalid).
func (e *ValidationError) HTTPStatus() int {
	switch e.Code {
	case CodeMalformed, CodeInvalidText:
		return http.StatusBadRequest
	case CodeLimitExceeded:
		return http.StatusRequestEntityTooLarge
	default:
		return http.StatusUnprocessableEntity
	}
}

func malformed(field, limit, format string, args ...any) *ValidationError {
	return &ValidationError{Code: CodeMalformed, Field: field, Limit: limit, Reason: fmt.Sprintf(format, args...)}
}

func invalid(field, limit, format string, args ...any) *ValidationError {
	return &ValidationError{Code: CodeInvalid, Field: field, Limit: limit, Reason: fmt.Sprintf(format, args...)}
}

func limitExceeded(field, limit, format string, args ...any) *ValidationError {
	return &ValidationError{Code: CodeLimitExceeded, Field: field, Limit: limit, Reason: fmt.Sprintf(format, args...)}
}
