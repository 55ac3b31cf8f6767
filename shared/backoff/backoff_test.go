package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Cap: time.Second}
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{0, 100 * time.Millisecond}, {1, 200 * time.Millisecond}, {3, 800 * time.Millisecond}, {4, time.Second}, {40, time.Second}, {-1, 100 * time.Millisecond}} {
		t.Run(tc.want.String(), func(t *testing.T) {
			if got := p.Delay(tc.n); got != tc.want {
				t.Fatalf("Delay(%d) = %s, want %s", tc.n, got, tc.want)
			}
			j := Policy{Base: p.Base, Cap: p.Cap, Jitter: true}
			for range 100 {
				if got := j.Delay(tc.n); got < tc.want/2 || got >= tc.want {
					t.Fatalf("jittered Delay(%d) = %s, want in [%s, %s)", tc.n, got, tc.want/2, tc.want)
				}
			}
		})
	}
}

func TestBackoffNextReset(t *testing.T) {
	b := New(Policy{Base: 10 * time.Millisecond, Cap: 25 * time.Millisecond})
	var got []time.Duration
	for range 4 {
		got = append(got, b.Next())
	}
	b.Reset()
	got = append(got, b.Next())
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 25 * time.Millisecond, 25 * time.Millisecond, 10 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on an ended context: %v", err)
	}
	if err := Sleep(context.Background(), time.Microsecond); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
}
