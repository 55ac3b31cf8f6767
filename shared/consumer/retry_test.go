package consumer

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	for n := range 40 {
		d := backoff(100*time.Millisecond, 2*time.Second, n)
		full := min(2*time.Second, 100*time.Millisecond<<min(n, 20))
		if d < full/2 || d >= full {
			t.Errorf("backoff(%d) = %s, want in [%s, %s)", n, d, full/2, full)
		}
	}
}
