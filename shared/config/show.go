package config

import (
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Setting is one variable with the value a process runs with.
type Setting struct {
	Key   string
	Value string
}

// Settings lists every variable with its effective value (defaults and
// derived values applied), in declaration order, for `sluice config show`.
// A credential set (DATABASE_URL, passwords, keys, tokens) shows as
// [redacted], never its value; NAME_FILE variables are not listed (their
// content is NAME's).
func (c *Config) Settings() []Setting {
	var out []Setting
	v := reflect.ValueOf(*c)
	t := v.Type()
	for i := range t.NumField() {
		sec := v.Field(i)
		for j := range sec.NumField() {
			tag := sec.Type().Field(j).Tag.Get("env")
			if tag == "" {
				continue
			}
			key, _, _ := strings.Cut(tag, ",")
			out = append(out, Setting{Key: key, Value: showValue(sec.Field(j))})
		}
	}
	return out
}

func showValue(f reflect.Value) string {
	switch x := f.Interface().(type) {
	case Secret:
		return x.String()
	case []Secret:
		if len(x) == 0 {
			return ""
		}
		return Secret("x").String()
	case []string:
		return strings.Join(x, ",")
	case time.Duration:
		return x.String()
	default:
		return fmt.Sprint(x)
	}
}
