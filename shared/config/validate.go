package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Checker collects the *VarErrors of a section's Validate. Parse blanks the
// value of any error about a credential, so a wrong one is never echoed.
type Checker struct {
	errs []error
}

// Fail records that variable name with value is wrong, and why.
func (k *Checker) Fail(name, value, format string, args ...any) {
	k.errs = append(k.errs, &VarError{Var: name, Value: value, Reason: fmt.Sprintf(format, args...)})
}

// OneOf checks that v is one of allowed.
func (k *Checker) OneOf(name, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	k.Fail(name, v, "must be one of %s", strings.Join(allowed, ", "))
}

// AtLeast checks that v is at least minimum.
func (k *Checker) AtLeast(name string, v, minimum int64) {
	if v < minimum {
		k.Fail(name, strconv.FormatInt(v, 10), "must be at least %d", minimum)
	}
}

// Positive checks that d is greater than zero.
func (k *Checker) Positive(name string, d time.Duration) {
	if d <= 0 {
		k.Fail(name, d.String(), "must be greater than zero")
	}
}

// Err joins what was recorded (nil when nothing was).
func (k *Checker) Err() error { return errors.Join(k.errs...) }
