package worker

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/shared/failure"
)

// statusErr is a dependency's answer with an HTTP status.
type statusErr int

func (s statusErr) Error() string   { return fmt.Sprintf("status %d", int(s)) }
func (s statusErr) HTTPStatus() int { return int(s) }

// TestClassified: a dependency's failure becomes the runtime class
// shared/failure gives it, wrapping the error, with the dependency named
// on an outage.
func TestClassified(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want string
	}{
		{"connection refused is an outage", context.Background(), fmt.Errorf("dial: %w", syscall.ECONNREFUSED), ClassOutage},
		{"503 is an outage", context.Background(), statusErr(503), ClassOutage},
		{"429 is an outage", context.Background(), statusErr(429), ClassOutage},
		{"400 is permanent", context.Background(), statusErr(400), ClassPermanent},
		{"500 is retryable", context.Background(), statusErr(500), ClassRetryable},
		{"the caller's own cancellation is retryable", cancelled, context.Canceled, ClassRetryable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Classified(tc.ctx, failure.Elasticsearch, tc.err)
			if c := Classify(got); c != tc.want {
				t.Fatalf("Classify(Classified(%v)) = %s, want %s", tc.err, c, tc.want)
			}
			if !errors.Is(got, tc.err) {
				t.Fatalf("Classified(%v) = %v does not wrap the error", tc.err, got)
			}
			var oe *OutageError
			if tc.want == ClassOutage && (!errors.As(got, &oe) || oe.Dependency != failure.Elasticsearch) {
				t.Fatalf("outage %v does not name the dependency", got)
			}
		})
	}
	if Classified(context.Background(), failure.Elasticsearch, nil) != nil {
		t.Fatal("nil must stay nil")
	}
}
