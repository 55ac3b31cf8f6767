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

// Settings lists every variable of v (a section or a composition, or a
// pointer to one) with the value it holds, in declaration order, for
// `sluice config show`. A credential set (DATABASE_URL, passwords, keys,
// tokens) shows as [redacted], never its value; NAME_FILE variables are not
// listed (their content is NAME's).
func Settings(v any) []Setting {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	var out []Setting
	fields(rv.Type(), "", nil, func(_ reflect.StructField, key, _ string, index []int) {
		out = append(out, Setting{Key: key, Value: showValue(rv.FieldByIndex(index))})
	})
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
