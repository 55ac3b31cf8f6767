package readmodel

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestRetry(t *testing.T) {
	busy := &StatusError{Op: "bulk", Status: 429}
	down := &StatusError{Op: "bulk", Status: 503}
	bad := &StatusError{Op: "bulk", Status: 400}
	transport := errors.New("connection refused")
	r := Retry{Tries: 3, Base: time.Millisecond, Cap: 4 * time.Millisecond}
	for _, tc := range []struct {
		name  string
		errs  []error // answer of call i; nil after the list
		calls int
		want  error
	}{
		{"success at once", nil, 1, nil},
		{"429 then success", []error{busy}, 2, nil},
		{"503 and transport errors, then success", []error{down, transport, down}, 4, nil},
		{"transient beyond the tries", []error{busy, busy, busy, busy, busy}, 4, busy},
		{"permanent at once", []error{bad}, 1, bad},
		{"not found is an answer", []error{ErrNotFound}, 1, ErrNotFound},
		{"wrapped 429", []error{fmt.Errorf("write: %w", busy)}, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := r.Do(context.Background(), func(context.Context) error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return nil
			})
			if calls != tc.calls || !errors.Is(err, tc.want) {
				t.Fatalf("%d calls, error %v; want %d calls, %v", calls, err, tc.calls, tc.want)
			}
		})
	}
	// A cancelled context stops at once with the last error.
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := r.Do(ctx, func(context.Context) error { calls++; cancel(); return busy })
	if calls != 1 || !errors.Is(err, busy) {
		t.Fatalf("cancelled: %d calls, %v", calls, err)
	}
	for n := range 10 {
		if d := r.Delay(n); d < r.Base/2 || d > r.Cap {
			t.Fatalf("Delay(%d) = %s outside [%s, %s]", n, d, r.Base/2, r.Cap)
		}
	}
}
