package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Draft2020 is the $schema of the one draft the registry takes; a schema
// without $schema is read as this draft.
const Draft2020 = "https://json-schema.org/draft/2020-12/schema"

// MaxSchemaBytes bounds a registered schema document.
const MaxSchemaBytes = 256 << 10

// Compiled is a schema ready to validate: compiled once, used by any
// number of goroutines.
type Compiled struct {
	sch *jsonschema.Schema
	// doc is the parsed document (json.Number numbers), the compatibility
	// checker's input.
	doc any
}

// noLoader refuses every external reference: a schema is one document,
// and a registry must not read files or URLs a schema names.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external $ref %q: a registered schema must be self-contained (use $defs)", url)
}

// resourceURL names the document being compiled; local $refs resolve in it.
const resourceURL = "urn:sluice:schema"

// Compile parses and compiles a JSON Schema document (draft 2020-12): the
// document is checked against the draft's metaschema, and external
// references are refused. The error says what is wrong.
func Compile(raw []byte) (*Compiled, error) {
	if len(raw) > MaxSchemaBytes {
		return nil, fmt.Errorf("schema of %d bytes exceeds %d bytes", len(raw), MaxSchemaBytes)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %v", err)
	}
	switch d := doc.(type) {
	case bool:
	case map[string]any:
		if s, ok := d["$schema"]; ok && s != Draft2020 && s != Draft2020+"#" {
			return nil, fmt.Errorf("$schema %v: the registry takes draft 2020-12 (%s) only", s, Draft2020)
		}
	default:
		return nil, errors.New("a schema is a JSON object (or true/false)")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource(resourceURL, doc); err != nil {
		return nil, fmt.Errorf("schema: %v", err)
	}
	sch, err := c.Compile(resourceURL)
	if err != nil {
		return nil, fmt.Errorf("invalid JSON Schema: %s", strings.ReplaceAll(err.Error(), resourceURL, "schema"))
	}
	return &Compiled{sch: sch, doc: doc}, nil
}

// DataError is why data does not validate against a schema version: the
// JSON pointer of the value at fault (into data), the keyword that refused
// it and a message.
type DataError struct {
	EventType string
	Version   int
	Pointer   string
	Keyword   string
	Message   string
}

func (e *DataError) Error() string {
	p := e.Pointer
	if p == "" {
		p = "(the data object)"
	}
	return fmt.Sprintf("data of %s does not match schema version %d at %s: %s (keyword %s)", e.EventType, e.Version, p, e.Message, e.Keyword)
}

var printer = message.NewPrinter(language.English)

// Validate checks data (one JSON value) against c. The error is a
// *DataError naming the deepest failure's pointer and keyword.
func (c *Compiled) Validate(data []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return &DataError{Keyword: "type", Message: "not valid JSON: " + err.Error()}
	}
	return c.validateValue(v)
}

func (c *Compiled) validateValue(v any) error {
	err := c.sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &DataError{Keyword: "", Message: err.Error()}
	}
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	kw := ve.ErrorKind.KeywordPath()
	keyword := ""
	if len(kw) > 0 {
		keyword = kw[len(kw)-1]
	}
	return &DataError{Pointer: pointer(ve.InstanceLocation), Keyword: keyword, Message: ve.ErrorKind.LocalizedString(printer)}
}

// pointer is the RFC 6901 JSON pointer of tokens.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

// Fingerprint is the registry's identity of a schema document: its
// compact form, so that white space alone makes no new version.
func Fingerprint(raw []byte) (string, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "", err
	}
	return b.String(), nil
}
