package main

import (
	"errors"
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
