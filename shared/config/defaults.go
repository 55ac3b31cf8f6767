package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// Defaults sets every field of the section dst (a pointer to it) that
// declares an envDefault to that default, parsed as Parse parses it with
// the variable unset; fields without one are left as they are, and
// neither Derive nor Validate runs. The tags are the one place a default
// is written: a package's DefaultConfig reads them with Defaults instead of
// restating them. A default that does not parse is a programming error and
// panics.
func Defaults(dst any) {
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("config: Defaults needs a pointer to a struct, not %T", dst))
	}
	err := env.ParseWithOptions(dst, env.Options{
		Environment: map[string]string{},
		FuncMap:     map[reflect.Type]env.ParserFunc{reflect.TypeOf(time.Duration(0)): parseDuration},
	})
	if err != nil {
		panic(fmt.Sprintf("config: the envDefault tags of %T do not parse: %v", dst, err))
	}
}

// FillZero sets every field of the section dst (a pointer to it) that is
// zero and declares an envDefault to that default, except the fields of the
// variables named in keep (those whose zero value means something, such as
// an interval of 0 that turns a feature off). It is for the library and
// test callers of a package that leave part of its section unset: they get
// the defaults a process gets, declared once, in the tags.
func FillZero(dst any, keep ...string) {
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("config: FillZero needs a pointer to a struct, not %T", dst))
	}
	def := reflect.New(rv.Elem().Type())
	Defaults(def.Interface())
	fillZero(rv.Elem(), def.Elem(), keep)
}

func fillZero(dst, def reflect.Value, keep []string) {
	t := dst.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("env")
		if tag == "" {
			if f.Type.Kind() == reflect.Struct {
				fillZero(dst.Field(i), def.Field(i), keep)
			}
			continue
		}
		if _, ok := f.Tag.Lookup("envDefault"); !ok {
			continue
		}
		if key, _, _ := strings.Cut(tag, ","); slices.Contains(keep, key) || !dst.Field(i).IsZero() {
			continue
		}
		dst.Field(i).Set(def.Field(i))
	}
}
