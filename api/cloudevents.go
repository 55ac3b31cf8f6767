package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/shared/envelope"
)

// CloudEvents JSON input (structured mode, application/cloudevents+json;
// batch mode, application/cloudevents-batch+json; the HTTP binding's binary
// mode, ce- headers and a JSON body; CloudEvents 1.0). The mapping onto the
// envelope (docs/api.md, "CloudEvents"):
//
//	specversion      must be "1.0"
//	id + source      event_id: id itself when it is a UUID (canonical,
//	                 lower-case after folding), else
//	                 UUIDv5(envelope.Namespace, "sluice:cloudevent:" +
//	                 source + "\n" + id) — CloudEvents identify an event by
//	                 (source, id), and so does the store's idempotency
//	type             event_type, exactly ("com.example.order.placed"); it
//	                 must match envelope.EventTypePattern, else 422 on
//	                 field type (docs/architecture.md#event-types)
//	time             occurred_at
//	data             data (a JSON object; data_base64 is refused)
//	datacontenttype  absent, application/json or a +json type
//	source, id, type, subject, dataschema
//	                 kept in metadata as ce_source, ce_id, ce_type,
//	                 ce_subject, ce_dataschema
//	traceparent, tracestate (distributed tracing extension)
//	                 metadata traceparent, tracestate
//	other extensions metadata "ce_" + name (their JSON values: a string,
//	                 a boolean or an int32 — the CloudEvents types; an
//	                 attribute whose value is null is absent)
//
// The aggregate is the request path's, whatever subject says.

// cloudEventAttr is the CloudEvents attribute name rule (lower-case
// letters and digits, at most 20 characters recommended; we allow 64).
var cloudEventAttr = regexp.MustCompile(`^[a-z0-9]{1,64}$`)

// CloudEventID returns the event_id of the CloudEvent (source, id):
// envelope.CloudEventID, the one derivation the workers apply again to a
// record in the CloudEvents format (docs/kafka.md).
func CloudEventID(source, id string) string { return envelope.CloudEventID(source, id) }

// parseCloudEvents reads one structured CloudEvent or a batch (a JSON
// array of them).
func (s *server) parseCloudEvents(b []byte, batch bool) ([]eventInput, *Error) {
	if !batch {
		in, e := s.parseCloudEvent(b, "")
		if e != nil {
			return nil, e
		}
		return []eventInput{in}, nil
	}
	// Wrap the array so that the object scan checks text, duplicate keys
	// and depth for every element: {"events": [...]}.
	wrapped := append(append([]byte(`{"events":`), b...), '}')
	members, _, e := scanObject(wrapped, depthRule{offset: 3, maxData: s.opts.Limits.MaxDataDepth}, "")
	if e != nil {
		if e.Field == "events" || e.Field == "" {
			e.Field = fieldBody
		}
		return nil, e
	}
	var items []json.RawMessage
	if v := members["events"]; len(v) == 0 || v[0] != '[' || json.Unmarshal(v, &items) != nil {
		return nil, unprocessable(fieldBody, "a CloudEvents batch is a JSON array of CloudEvent objects")
	}
	out := make([]eventInput, 0, len(items))
	for i, raw := range items {
		in, e := s.parseCloudEvent(raw, "["+strconv.Itoa(i)+"]")
		if e != nil {
			return nil, e
		}
		out = append(out, in)
	}
	return out, nil
}

func (s *server) parseCloudEvent(raw []byte, field string) (eventInput, *Error) {
	in := eventInput{field: field}
	at := func(f string) string {
		if field == "" {
			return f
		}
		return field + "." + f
	}
	m, order, e := scanObject(raw, depthRule{offset: 1, maxData: s.opts.Limits.MaxDataDepth}, field)
	if e != nil {
		if field == "" && e.Field == "" {
			e.Field = fieldBody // the whole body (structured mode, one event)
		}
		return in, e
	}
	str := func(name string, required bool) (string, *Error) {
		v, ok := m[name]
		if !ok || isNull(v) {
			if required {
				return "", unprocessable(at(name), "the CloudEvents attribute %s is required", name)
			}
			return "", nil
		}
		return stringMember(v, at(name))
	}
	spec, e := str("specversion", true)
	if e != nil {
		return in, e
	}
	if spec != "1.0" {
		return in, unprocessable(at("specversion"), `specversion must be "1.0", got %q`, spec)
	}
	id, e := str("id", true)
	if e != nil {
		return in, e
	}
	source, e := str("source", true)
	if e != nil {
		return in, e
	}
	typ, e := str("type", true)
	if e != nil {
		return in, e
	}
	for _, a := range [...]struct{ name, v string }{{"id", id}, {"source", source}, {"type", typ}} {
		if a.v == "" {
			return in, unprocessable(at(a.name), "the CloudEvents attribute %s must not be empty", a.name)
		}
	}
	if err := checkURIReference(source, false); err != nil {
		return in, unprocessable(at("source"), "source must be a URI-reference (RFC 3986): %v", err)
	}
	if ct, e := str("datacontenttype", false); e != nil {
		return in, e
	} else if e := checkDataContentType(ct, at("datacontenttype")); e != nil {
		return in, e
	}
	if v, ok := m["data_base64"]; ok && !isNull(v) { // null: absent, as every optional attribute
		return in, newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, at("data_base64"), "binary data (data_base64) is not accepted: data must be a JSON object")
	}
	if err := envelope.ValidateEventType(typ); err != nil {
		return in, validationAs(err, at("type"))
	}
	in.eventID = CloudEventID(source, id)
	in.eventType, in.typeField, in.idField = typ, at("type"), at("id")
	in.metadata.SetString("ce_id", id)
	in.metadata.SetString("ce_source", source)
	in.metadata.SetString("ce_type", typ)
	if v, ok := m["data"]; ok && !isNull(v) {
		if !isObject(v) {
			return in, unprocessable(at("data"), "data must be a JSON object")
		}
		in.data = v
	}
	if v, ok := m["time"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &in.occurredAt); err != nil {
			return in, unprocessable(at("time"), "time must be an RFC 3339 time: %v", err)
		}
	}
	if e := in.cloudEventAttributes(m, order, at, str); e != nil {
		return in, e
	}
	return in, nil
}

// checkDataContentType refuses a datacontenttype that does not describe
// the data: a JSON value of this UTF-8 document. A media type that cannot
// be parsed, or names another charset, does not (the rule of the
// Content-Type header). An empty ct is absent.
func checkDataContentType(ct, field string) *Error {
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, field, "datacontenttype %q is not a media type (RFC 2046)", ct)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, field, "datacontenttype %q: JSON data is UTF-8 (only charset=utf-8)", ct)
	}
	if mt != mediaJSON && !strings.HasSuffix(mt, "+json") {
		return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, field, "data must be JSON (datacontenttype %q)", ct)
	}
	return nil
}

// cloudEventAttributes checks the optional attributes and extensions of
// the event m (members in order; at names a member's field, str reads a
// string attribute) and keeps them in in.metadata: null is absent.
func (in *eventInput) cloudEventAttributes(m map[string]json.RawMessage, order []string, at func(string) string, str func(string, bool) (string, *Error)) *Error {
	for _, k := range order {
		if isNull(m[k]) && k != "specversion" && k != "id" && k != "source" && k != "type" {
			// The JSON format: an attribute whose value is null is absent.
			if !cloudEventAttr.MatchString(k) && k != "data_base64" { // data_base64: a name of the JSON format
				return unprocessable(at(k), "%q is not a CloudEvents attribute name ([a-z0-9]{1,64})", k)
			}
			continue
		}
		switch k {
		case "specversion", "id", "source", "type", "data", "time", "datacontenttype":
			continue
		case "subject", "dataschema":
			v, e := str(k, false)
			if e != nil {
				return e
			}
			if v == "" {
				return unprocessable(at(k), "the CloudEvents attribute %s must not be empty when present", k)
			}
			if err := checkURIReference(v, true); k == "dataschema" && err != nil {
				return unprocessable(at(k), "dataschema must be an absolute URI (RFC 3986): %v", err)
			}
			in.metadata.SetString("ce_"+k, v)
		case "traceparent", "tracestate":
			v, e := str(k, false)
			if e != nil {
				return e
			}
			in.metadata.SetString(k, v)
		default:
			if !cloudEventAttr.MatchString(k) {
				return unprocessable(at(k), "%q is not a CloudEvents attribute name ([a-z0-9]{1,64})", k)
			}
			if e := checkExtensionValue(m[k], at(k)); e != nil {
				return e
			}
			in.metadata["ce_"+k] = m[k]
		}
	}
	return nil
}

// isBinaryCloudEvent reports whether h carries a CloudEvent in the binary
// content mode of the CloudEvents HTTP binding: any ce- header. The
// caller applies it to a JSON body only; a structured CloudEvent's
// media type wins over ce- headers, as the binding says.
func isBinaryCloudEvent(h http.Header) bool {
	for k := range h {
		if isCEHeader(k) {
			return true
		}
	}
	return false
}

func isCEHeader(k string) bool { return len(k) > 3 && strings.EqualFold(k[:3], "ce-") }

// parseBinaryCloudEvent reads one CloudEvent in the binary content mode of
// the HTTP binding: each attribute is a header "ce-" + name, its value
// percent-encoded (RFC 3986, as the binding writes it); the body is the
// data (a JSON object, or empty for none) and Content-Type its
// datacontenttype. The event is then mapped exactly as the same event in
// the structured mode (parseCloudEvent), so both modes store the same
// envelope; a refusal of an attribute names its header (ce-type), of the
// data "data".
func (s *server) parseBinaryCloudEvent(h http.Header, body []byte) (eventInput, *Error) {
	attrs := map[string]json.RawMessage{}
	names := make([]string, 0, 8)
	for k, vs := range h {
		if !isCEHeader(k) {
			continue
		}
		name := strings.ToLower(k[3:])
		hdr := "ce-" + name
		switch {
		case len(vs) != 1:
			return eventInput{}, unprocessable(hdr, "the header %s is given %d times; a CloudEvents attribute has one value", hdr, len(vs))
		case name == "datacontenttype":
			return eventInput{}, unprocessable(hdr, "in the binary content mode datacontenttype is the Content-Type header, not %s", hdr)
		case name == "data" || !cloudEventAttr.MatchString(name):
			return eventInput{}, unprocessable(hdr, "%q is not a CloudEvents attribute name ([a-z0-9]{1,64}, not data)", name)
		}
		v, err := url.PathUnescape(vs[0])
		if err != nil || !utf8.ValidString(v) {
			return eventInput{}, unprocessable(hdr, "the value of %s must be percent-encoded UTF-8 text (the HTTP binding's rule)", hdr)
		}
		attrs[name], _ = json.Marshal(v)
		names = append(names, name)
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if _, _, e := scanObject(body, depthRule{offset: 0, maxData: s.opts.Limits.MaxDataDepth}, "data"); e != nil {
			return eventInput{}, e
		}
		attrs["data"] = body
		names = append(names, "data")
	}
	// One structured CloudEvent of the same attributes, in a fixed order
	// (the header map's is random).
	sort.Strings(names)
	var doc bytes.Buffer
	doc.WriteByte('{')
	for i, name := range names {
		if i > 0 {
			doc.WriteByte(',')
		}
		key, _ := json.Marshal(name)
		doc.Write(key)
		doc.WriteByte(':')
		doc.Write(attrs[name])
	}
	doc.WriteByte('}')
	in, e := s.parseCloudEvent(doc.Bytes(), "")
	if e != nil && e.Field != "" && e.Field != "data" && !strings.HasPrefix(e.Field, "data.") && !strings.HasPrefix(e.Field, "data[") {
		e.Field = "ce-" + e.Field
	}
	in.typeField, in.idField = "ce-type", "ce-id"
	return in, e
}

// checkURIReference reports why v is not a URI-reference of RFC 3986
// (section 4.1; with absolute, not a URI with a scheme, section 3): only
// the characters the RFC allows, each "%" starting a two-digit hex
// escape, and a structure net/url can parse. The CloudEvents attributes
// source (a URI-reference) and dataschema (a URI) are checked with it.
func checkURIReference(v string, absolute bool) error {
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '%':
			if i+2 >= len(v) || !isHex(v[i+1]) || !isHex(v[i+2]) {
				return fmt.Errorf("%q at byte %d is not a percent-encoded octet", v[i:min(i+3, len(v))], i)
			}
			i += 2
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			strings.IndexByte("-._~:/?#[]@!$&'()*+,;=", c) >= 0:
		default:
			// Name the character, not its first byte read as Latin-1
			// ("/café" said 'Ã').
			if r, size := utf8.DecodeRuneInString(v[i:]); r != utf8.RuneError || size > 1 {
				return fmt.Errorf("character %q at byte %d is not allowed (percent-encode it)", r, i)
			}
			return fmt.Errorf("byte 0x%02x at byte %d is not allowed (percent-encode it)", c, i)
		}
	}
	u, err := url.Parse(v)
	if err != nil {
		return errors.Unwrap(err)
	}
	if absolute && u.Scheme == "" {
		return errors.New("it has no scheme")
	}
	return nil
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// checkExtensionValue refuses an extension attribute's JSON value that is
// none of the CloudEvents types the JSON format maps (section 2.2): a
// string (String, URI, Timestamp, Binary … are strings), true or false
// (Boolean), or an integer from -2^31 to 2^31-1 (Integer). Objects,
// arrays and other numbers are not attribute values.
func checkExtensionValue(v json.RawMessage, field string) *Error {
	switch t := bytes.TrimSpace(v); {
	case len(t) == 0:
		return unprocessable(field, "an extension attribute needs a value")
	case t[0] == '"', string(t) == "true", string(t) == "false":
		return nil
	case t[0] == '{' || t[0] == '[':
		return unprocessable(field, "an extension attribute is a string, a boolean or an integer, not a JSON object or array")
	default:
		if n, err := strconv.ParseInt(string(t), 10, 32); err != nil || strconv.FormatInt(n, 10) != string(t) {
			return unprocessable(field, "an extension attribute's number must be an integer from -2147483648 to 2147483647 (the CloudEvents Integer), got %s", t)
		}
		return nil
	}
}
