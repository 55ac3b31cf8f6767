package worker

import (
	"errors"
	"fmt"
	"testing"
)

func TestClassify(t *testing.T) {
	base := errors.New("x")
	tests := []struct {
		err  error
		want string
	}{
		{base, ClassRetryable},
		{Retryable(base), ClassRetryable},
		{Permanent(base), ClassPermanent},
		{fmt.Errorf("wrapped: %w", Permanent(base)), ClassPermanent},
		{ConflictErr("already applied", nil), ClassConflict},
		{Permanent(Retryable(base)), ClassPermanent},
		{Outage("elasticsearch", base), ClassOutage},
		{&PanicError{Value: "boom"}, ClassRetryable},
	}
	for _, tt := range tests {
		if got := Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}
