package readmodel

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/shared/envelope"
)

// Data-key rules (issue 26.3). An instance's state becomes the body of its
// Elasticsearch document (Document), so a key Elasticsearch refuses, or one
// that collides with the bookkeeping fields Document sets, makes the write
// fail after the domain event was appended. ValidateData is the one place
// these rules live: the API refuses such data synchronously (422
// invalid_data_key) and the instance worker's decide step rejects the
// command with the same reason, so the two cannot drift.

// Rules a DataError reports (DataError.Rule), machine-readable.
const (
	// RuleNotObject: the data is not a JSON object.
	RuleNotObject = "object"
	// RuleEmptyKey: a key is "" (Elasticsearch: "field name cannot be an
	// empty string").
	RuleEmptyKey = "non_empty_key"
	// RuleBlankKey: a key, or a dot-separated segment of one, is only white
	// space (Elasticsearch: "field name cannot contain only whitespace").
	RuleBlankKey = "non_blank_key"
	// RuleEmptySegment: a key with a leading, trailing or doubled '.', or
	// only dots (Elasticsearch: "object field starting or ending with a [.]
	// makes object resolution ambiguous", "field name cannot contain only
	// dots"). Elasticsearch reads "a.b" as the path a → b.
	RuleEmptySegment = "no_empty_dot_segment"
	// RuleMetadataField: a top-level key (or its first dot segment) is an
	// Elasticsearch metadata field such as _id or _source ("Field [_id] is a
	// metadata field and cannot be added inside a document").
	RuleMetadataField = "not_metadata_field"
	// RuleReservedField: a top-level key (or its first dot segment) is one
	// of the fields Document adds (ReservedFields: db, class, instance_id,
	// sequence_number, event_id, created_at, updated_at, deleted).
	RuleReservedField = "not_reserved_field"
)

// metadataFields are the metadata field names Elasticsearch 8 (and its
// bundled plugins, and 7.x for _type) reserves; a document may not contain
// them at its top level.
var metadataFields = [...]string{
	"_id", "_index", "_source", "_routing", "_version", "_seq_no", "_primary_term",
	"_field_names", "_ignored", "_ignored_source", "_doc_count", "_tier",
	"_data_stream_timestamp", "_nested_path", "_feature", "_tsid", "_ts_routing_hash",
	"_type", "_size", "_uid", "_parent", "_all", "_timestamp", "_ttl",
}

// IsMetadataField reports whether name is a metadata field name that
// Elasticsearch reserves (it cannot be a top-level key of a document).
func IsMetadataField(name string) bool {
	if len(name) < 2 || name[0] != '_' {
		return false
	}
	for _, f := range metadataFields {
		if f == name {
			return true
		}
	}
	return false
}

// DataError reports the first data key an instance document cannot hold.
type DataError struct {
	// Field is the key's path from the data object, "data" first: object
	// members as ".name", array elements as "[i]" (data.items[2].x).
	Field string
	// Key is the offending key itself.
	Key string
	// Rule is the violated rule (the Rule* constants).
	Rule string
	// Reason explains the rule for humans.
	Reason string
}

// Error formats the failure as `data key "K" at P: reason`, P the Path.
func (e *DataError) Error() string {
	if e.Rule == RuleNotObject {
		return "data: " + e.Reason
	}
	return fmt.Sprintf("data key %q at %s: %s", e.Key, e.Path(), e.Reason)
}

// Path is Field as the API's errors and the instance worker's reasons name
// the key (docs/api.md#data-keys-the-read-model-cannot-hold): dotted
// (data.a.b), except that a key the dotted form cannot show — empty, only
// white space, or with an empty or blank dot segment — is written as a
// JSON string in brackets after its parent's path: data[""], data.x["y."].
// Only the refused key can be such a key: every key before it on its path
// passed these rules.
func (e *DataError) Path() string {
	switch e.Rule {
	case RuleEmptyKey, RuleBlankKey, RuleEmptySegment:
	default:
		return e.Field
	}
	parent, ok := strings.CutSuffix(e.Field, "."+e.Key)
	if !ok {
		return e.Field
	}
	q, err := envelope.EncodeJSON(e.Key)
	if err != nil {
		return e.Field
	}
	return parent + "[" + strings.TrimSpace(string(q)) + "]"
}

// HTTPStatus is 422: well-formed data that breaks a rule of the read model.
func (e *DataError) HTTPStatus() int { return 422 }

// ValidateData checks every key of an instance state (a JSON object: the
// data of a create, the full new state of an update) against what the
// instance document can hold, and returns the first violation in document
// order as a *DataError; nil when every key is fine. The rules, at every
// depth: no empty or blank key, no empty or blank dot segment; at the top
// level: no Elasticsearch metadata field (IsMetadataField) and no field
// Document adds (IsReserved), neither as the key nor as its first dot
// segment ("db.x" is the path db → x). Invalid JSON is reported as a
// *DataError of RuleNotObject; the caller is expected to have checked the
// text already (envelope.CheckJSONText).
func ValidateData(data []byte) error { return validateKeys(data, false) }

// ValidateMergePatch checks an RFC 7386 merge patch with the rules of
// ValidateData, as far as they concern the state it leads to: a member
// whose value is null removes a key and is not checked; every other member
// adds or replaces its key, which must then satisfy ValidateData. Keys the
// current state already holds passed the same rules when they were written,
// so a patch that passes leads to a state that passes.
func ValidateMergePatch(patch []byte) error { return validateKeys(patch, true) }

// validateKeys walks the JSON object b with one token scan (no recursion
// over untrusted input). With patch, members whose value is null are
// skipped.
func validateKeys(b []byte, patch bool) error {
	dec := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if k := dec.PeekKind(); k != '{' {
		return &DataError{Field: "data", Rule: RuleNotObject, Reason: "must be a JSON object"}
	}
	// paths[d-1] is the path of the open container at depth d; keys[d-1]
	// the path of the last key read in the object at depth d.
	paths := []string{"data"}
	var keys []string
	set := func(s *[]string, d int, v string) {
		for len(*s) < d {
			*s = append(*s, "")
		}
		(*s)[d-1] = v
	}
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return &DataError{Field: "data", Rule: RuleNotObject, Reason: "is not valid JSON: " + err.Error()}
		}
		depth := dec.StackDepth()
		switch tok.Kind() {
		case '{', '[':
			if depth > 1 {
				if pk, pn := dec.StackIndex(depth - 1); pk == '[' {
					set(&paths, depth, paths[depth-2]+"["+strconv.FormatInt(pn-1, 10)+"]")
				} else {
					set(&paths, depth, keys[depth-2])
				}
			}
			continue
		case '}', ']':
			continue
		}
		if k, n := dec.StackIndex(depth); k != '{' || n%2 != 1 {
			continue // a value
		}
		key := tok.String()
		field := paths[depth-1] + "." + key
		set(&keys, depth, field)
		if patch && dec.PeekKind() == 'n' {
			continue // removes the key: nothing to store
		}
		if err := checkKey(key, field, depth == 1); err != nil {
			return err
		}
	}
}

// checkKey applies the key rules to one key; top says it is a key of the
// data object itself (the document's top level).
func checkKey(key, field string, top bool) error {
	fail := func(rule, format string, args ...any) error {
		return &DataError{Field: field, Key: key, Rule: rule, Reason: fmt.Sprintf(format, args...)}
	}
	if key == "" {
		return fail(RuleEmptyKey, "an empty key cannot be stored in Elasticsearch")
	}
	if strings.TrimSpace(key) == "" {
		return fail(RuleBlankKey, "a key of only white space cannot be stored in Elasticsearch")
	}
	first := key
	if strings.IndexByte(key, '.') >= 0 {
		segs := strings.Split(key, ".")
		first = segs[0]
		for _, s := range segs {
			if s == "" {
				return fail(RuleEmptySegment, "Elasticsearch reads '.' in a key as an object path; a leading, trailing or doubled '.' (or only dots) leaves an empty path segment")
			}
			if strings.TrimSpace(s) == "" {
				return fail(RuleBlankKey, "Elasticsearch reads '.' in a key as an object path; a segment of only white space cannot be stored")
			}
		}
	}
	if !top {
		return nil
	}
	if IsMetadataField(first) {
		return fail(RuleMetadataField, "%s is an Elasticsearch metadata field and cannot be a top-level key of the document", first)
	}
	if IsReserved(first) {
		return fail(RuleReservedField, "%s is a field sluice sets on the instance document (%s)", first, strings.Join(ReservedFields(), ", "))
	}
	return nil
}
