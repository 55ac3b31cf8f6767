package crashpoint

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func TestCrashesOnceAtTheConfiguredPoint(t *testing.T) {
	dir := t.TempDir()
	var exits []int
	newC := func() *Crasher {
		c, err := New("relay:after_produce", dir)
		if err != nil {
			t.Fatal(err)
		}
		c.exit = func(code int) { exits = append(exits, code) }
		return c
	}
	c := newC()
	c.Hit("relay", "before_checkpoint")
	c.Hit("instanceworker", "after_produce")
	if len(exits) != 0 {
		t.Fatalf("crashed at the wrong point: %v", exits)
	}
	c.Hit("relay", "after_produce")
	if len(exits) != 1 || exits[0] != ExitCode {
		t.Fatalf("want one exit 42, got %v", exits)
	}
	// The restarted process (a new Crasher, same marker dir) runs through.
	newC().Hit("relay", "after_produce")
	if len(exits) != 1 {
		t.Fatalf("crashed twice: %v", exits)
	}
	var none *Crasher
	none.Hit("relay", "after_produce") // nil never crashes
}

func TestNewValidates(t *testing.T) {
	cases := []struct {
		spec, dir string
		wantErr   bool
	}{
		{"", "", false},
		{"relay", "/tmp", true},
		{"relay:", "/tmp", true},
		{"relay:after_produce", "", true},
		{"relay:after_produce", "/tmp", false},
	}
	for _, tc := range cases {
		if _, err := New(tc.spec, tc.dir); (err != nil) != tc.wantErr {
			t.Errorf("New(%q, %q): err=%v", tc.spec, tc.dir, err)
		}
	}
}

func TestFuncStopsInProcess(t *testing.T) {
	stop := errors.New("process killed")
	var seen []string
	c := Func(func(_ context.Context, w, p, detail string) error {
		seen = append(seen, w+":"+p+":"+detail)
		if p == "after_put" {
			return stop
		}
		return nil
	})
	if err := c.At(context.Background(), "eventstore", "after_reserve", "k"); err != nil {
		t.Fatal(err)
	}
	if err := c.At(context.Background(), "eventstore", "after_put", "k"); err != stop {
		t.Fatalf("At = %v, want the func's error", err)
	}
	c.Hit("relay", "after_produce") // never exits
	if want := []string{"eventstore:after_reserve:k", "eventstore:after_put:k", "relay:after_produce:"}; !slices.Equal(seen, want) {
		t.Fatalf("points %v, want %v", seen, want)
	}
	var none *Crasher
	if err := none.At(context.Background(), "eventstore", "after_put", "k"); err != nil {
		t.Fatal(err)
	}
}
