package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/shared/envelope"
)

// TestUsageErrorsKeepTheirCause: a usage error made from a package's
// typed error (exit 2) still carries it (wrapped with %w), so a caller can
// branch on what was wrong, not only on the message. Refused before any
// connection is tried.
func TestUsageErrorsKeepTheirCause(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		is   func(error) bool
	}{
		{"verify --db", []string{"verify", "--db", "BAD!", "--class", "orders"}, func(err error) bool {
			var ve *envelope.ValidationError
			return errors.As(err, &ve) && ve.Field == "db"
		}},
		{"verify --class", []string{"verify", "--db", "shop", "--class", "BAD!"}, func(err error) bool {
			var ve *envelope.ValidationError
			return errors.As(err, &ve)
		}},
		{"store cat --cursor", []string{"store", "cat", "--cursor", "zzz"}, func(err error) bool {
			var ce *eventstore.CursorError
			return errors.As(err, &ce)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, tc.args...)
			if exitCode(err) != exitUsage {
				t.Fatalf("exit %d (%v), want %d", exitCode(err), err, exitUsage)
			}
			if !tc.is(err) {
				t.Errorf("%v: the usage error does not wrap the typed cause", err)
			}
		})
	}
}

// TestFlagValueRefusalsExit2: flag values a command refuses before it
// connects to anything are usage errors (exit 2) like the others of
// docs/operator-commands.md#flags-a-command-cannot-honour: a --grant or
// --principal that does not parse, a --compatibility that is no mode
// (they exited 1, as a failure of the command, while a missing --grant
// exited 2).
func TestFlagValueRefusalsExit2(t *testing.T) {
	dir := t.TempDir()
	schemaFile := filepath.Join(dir, "v1.json")
	if err := os.WriteFile(schemaFile, []byte(`{"type":"object"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"a grant without =", []string{"auth", "key", "create", "--principal", "p", "--grant", "read"}, "--grant"},
		{"a grant of an unknown operation", []string{"auth", "key", "create", "--principal", "p", "--grant", "bogus=*"}, "--grant"},
		{"a grant of a bad pattern", []string{"auth", "key", "create", "--principal", "p", "--grant", "read=nosuch:x"}, "--grant"},
		{"a principal that is not one", []string{"auth", "key", "create", "--principal", "has space", "--grant", "read=*"}, "--principal"},
		{"schema check of an unknown mode", []string{"schema", "check", schemaFile, "--compatibility", "SIDEWAYS"}, "--compatibility"},
		{"schema register of an unknown mode", []string{"schema", "register", "Order", schemaFile, "--compatibility", "SIDEWAYS"}, "--compatibility"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, tc.args...)
			if code := exitCode(err); code != exitUsage || !strings.Contains(fmt.Sprint(err), tc.says) {
				t.Errorf("exit %d (%v), want %d naming %s", code, err, exitUsage, tc.says)
			}
		})
	}
}
