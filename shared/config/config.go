// Package config is the mechanism of sluice's environment-based
// configuration. Each component declares its own settings, once, as a Go
// struct (a section) in its own package: the variable, its default, its
// one-line documentation and whether it is a credential are field tags, and
// its checks are the section's Validate method. A process composes the
// sections it runs (pipeline/sluiceconfig for the sluice binary) and Parse reads
// them all, so that a bad value stops the process at start-up with an error
// naming the variable (invalid values never start a half-configured
// service), and Vars and Markdown render the same declarations as
// docs/configuration.md, which therefore cannot drift from the code.
//
// The field tags:
//
//	env:"NAME"          the variable
//	envDefault:"value"  its default (parsed like a set value)
//	doc:"..."           one line for docs/configuration.md
//	docDefault:"..."    shown instead of envDefault when the default is computed
//	file:"true"         a credential: NAME_FILE may name a file holding it
//	section:"Title"     on a composition's field: the section's heading
//
// A section may implement Deriver (defaults that depend on other values)
// and Validator (checks, with Checker); so may a composition, for rules
// across sections. Durations accept Go duration strings ("250ms", "2m") and
// bare numbers, which mean seconds ("30", "0.5"), so the *_SECONDS knobs
// read naturally. Secrets use the Secret type, which never prints its
// value, and every credential can be read from a mounted file instead
// (NAME_FILE, see ReadSecretFiles).
package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// Secret is a string that never prints its value: fmt, slog and JSON see
// "[redacted]" (docs/architecture.md#security-and-bad-input: secrets never appear in logs or errors).
type Secret string

// String implements fmt.Stringer.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// MarshalText implements encoding.TextMarshaler (used by JSON and slog).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Value returns the secret itself, for handing to a client library.
func (s Secret) Value() string { return string(s) }

// VarError says which variable is wrong and why.
type VarError struct {
	Var    string
	Value  string
	Reason string
}

func (e *VarError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("config: %s: %s", e.Var, e.Reason)
	}
	return fmt.Sprintf("config: %s=%q: %s", e.Var, e.Value, e.Reason)
}

// EnvironOS is the process environment as Parse takes it.
func EnvironOS() map[string]string { return env.ToMap(os.Environ()) }

// Deriver is implemented by a section (or a composition of sections) whose
// defaults depend on other values: Parse calls Derive after the variables
// are read, sections first, then the composition.
type Deriver interface{ Derive() }

// Validator is implemented by a section (or a composition) that checks its
// values: Parse calls Validate after Derive and joins every error. Errors
// should be *VarError (Checker builds them).
type Validator interface{ Validate() error }

// Parse reads dst, a pointer to a section (a struct of env-tagged fields)
// or to a composition of sections (a struct of such structs, nested to any
// depth), from environ (variable → value): NAME_FILE credentials resolved
// (ReadSecretFiles), defaults applied, Derive and Validate run on every
// section and then on dst itself. Every problem is reported, each naming
// its variable, joined into one error whose parts are *VarError; a
// credential's value is never part of it.
func Parse(dst any, environ map[string]string) error {
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("config: Parse needs a pointer to a struct, not %T", dst)
	}
	vars := Vars(dst)
	environ, err := ReadSecretFiles(vars, environ)
	if err != nil {
		return err
	}
	err = env.ParseWithOptions(dst, env.Options{
		Environment: environ,
		FuncMap:     map[reflect.Type]env.ParserFunc{reflect.TypeOf(time.Duration(0)): parseDuration},
	})
	if err != nil {
		return translate(err, vars, environ)
	}
	secs := sections(rv.Elem())
	for _, s := range secs {
		if d, ok := s.Addr().Interface().(Deriver); ok {
			d.Derive()
		}
	}
	if d, ok := dst.(Deriver); ok && !isSection(rv.Elem().Type()) {
		d.Derive()
	}
	var errs []error
	for _, s := range secs {
		if v, ok := s.Addr().Interface().(Validator); ok {
			errs = append(errs, v.Validate())
		}
	}
	if v, ok := dst.(Validator); ok && !isSection(rv.Elem().Type()) {
		errs = append(errs, v.Validate())
	}
	return redact(errors.Join(errs...), vars)
}

// sections returns the section structs under v (v itself when it is one),
// depth first, as addressable values.
func sections(v reflect.Value) []reflect.Value {
	if isSection(v.Type()) {
		return []reflect.Value{v}
	}
	var out []reflect.Value
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Struct && v.Type().Field(i).IsExported() {
			out = append(out, sections(f)...)
		}
	}
	return out
}

// isSection reports whether t declares variables itself (an env-tagged
// field) rather than composing sections.
func isSection(t reflect.Type) bool {
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("env") != "" {
			return true
		}
	}
	return false
}

// redact blanks the value of every *VarError about a credential, so that
// not even a wrong one is echoed (docs/architecture.md#security-and-bad-input).
func redact(err error, vars []Var) error {
	if err == nil {
		return nil
	}
	secret := map[string]bool{}
	for _, v := range vars {
		if v.Secret {
			secret[v.Key] = true
		}
	}
	var walk func(error)
	walk = func(e error) {
		if ve, ok := e.(*VarError); ok && secret[ve.Var] {
			ve.Value = ""
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	return err
}

func parseDuration(v string) (any, error) {
	v = strings.TrimSpace(v)
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return nil, fmt.Errorf("not a duration (use seconds like 30 or a Go duration like 250ms)")
	}
	return d, nil
}

func translate(err error, vars []Var, environ map[string]string) error {
	keys := map[string]string{} // Go field → variable, for env's errors
	secret := map[string]bool{}
	for _, v := range vars {
		if v.field != "" {
			keys[v.field] = v.Key
		}
		secret[v.Key] = v.Secret
	}
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return fmt.Errorf("config: %w", err)
	}
	var out []error
	for _, e := range agg.Errors {
		var pe env.ParseError
		var fe env.LoadFileContentError
		switch {
		case errors.As(e, &pe):
			key := keys[pe.Name]
			reason := pe.Err.Error()
			var pve env.ParseValueError
			if errors.As(pe.Err, &pve) && pve.Err != nil {
				reason = pve.Err.Error()
			}
			value := environ[key]
			if secret[key] {
				value = "" // never echoed (docs/architecture.md#security-and-bad-input)
			}
			out = append(out, &VarError{Var: key, Value: value, Reason: "invalid value: " + reason})
		case errors.As(e, &fe):
			out = append(out, &VarError{Var: fe.Key, Reason: "cannot read file: " + fe.Err.Error()})
		default:
			out = append(out, fmt.Errorf("config: %w", e))
		}
	}
	return errors.Join(out...)
}
