package eventstore

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestCursorText(t *testing.T) {
	t.Run("one shard is the plain position", func(t *testing.T) {
		for _, p := range []int64{0, 1, 42, math.MaxInt64} {
			c := CursorOf(p)
			if got, want := c.String(), strconv.FormatInt(p, 10); got != want {
				t.Fatalf("CursorOf(%d) = %q, want %q", p, got, want)
			}
		}
	})
	t.Run("several shards", func(t *testing.T) {
		if got := CursorOf(120, 98, 131, 0).String(); got != "v1.4.120.98.131.0" {
			t.Fatalf("got %q", got)
		}
		if got := StartCursor(3).String(); got != "v1.3.0.0.0" {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("64 shards fit a header", func(t *testing.T) {
		pos := make([]int64, 64)
		for i := range pos {
			pos[i] = math.MaxInt64
		}
		s := CursorOf(pos...).String()
		if len(s) > 6+20*64 {
			t.Fatalf("%d bytes", len(s))
		}
		if strings.Trim(s, "0123456789v.") != "" {
			t.Fatalf("%q holds characters a URL or header must escape", s)
		}
	})
	valid := []string{"0", "7", "9223372036854775807", "v1.2.0.0", "v1.4.1.2.3.4", "v1.1024." + strings.Repeat("5.", 1023) + "5"}
	for _, s := range valid {
		t.Run("parses "+s[:min(len(s), 20)], func(t *testing.T) {
			c, err := ParseCursor(s)
			if err != nil {
				t.Fatal(err)
			}
			if c.String() != s {
				t.Fatalf("round trip %q -> %q", s, c.String())
			}
		})
	}
	invalid := []struct{ text, reason string }{
		{"", "empty"},
		{"-1", "a one-shard cursor is a position"},
		{"+1", "a one-shard cursor is a position"},
		{"007", "a one-shard cursor is a position"},
		{" 7", "a one-shard cursor is a position"},
		{"9223372036854775808", "a one-shard cursor is a position"},
		{"12a", "a one-shard cursor is a position"},
		{"v2.2.0.0", `starts with "v1."`},
		{"V1.2.0.0", `starts with "v1."`},
		{"v1.1.5", "the number of shards"},
		{"v1.02.0.0", "the number of shards"},
		{"v1.1025." + strings.Repeat("0.", 1024) + "0", "the number of shards"},
		{"v1.2", "no position"},
		{"v1.2.0", "1 position(s) where it declares 2"},
		{"v1.2.0.0.0", "more than the 2 positions"},
		{"v1.2.0.", "position 1"},
		{"v1.2..0", "position 0"},
		{"v1.2.01.0", "position 0"},
		{"v1.2.0.-1", "position 1"},
		{"v1.2.0.9223372036854775808", "position 1"},
		{strings.Repeat("1", maxCursorLen+1), "longer than any cursor"},
	}
	for _, tc := range invalid {
		t.Run("refuses "+tc.text[:min(len(tc.text), 20)], func(t *testing.T) {
			_, err := ParseCursor(tc.text)
			var ce *CursorError
			if !errors.As(err, &ce) {
				t.Fatalf("ParseCursor(%q) = %v, want a *CursorError", tc.text, err)
			}
			if !strings.Contains(ce.Reason, tc.reason) {
				t.Fatalf("reason %q, want it to say %q", ce.Reason, tc.reason)
			}
		})
	}
}

func TestCursorForStore(t *testing.T) {
	t.Run("zero is the start", func(t *testing.T) {
		c, err := Cursor{}.ForStore(4)
		if err != nil || !c.Equal(StartCursor(4)) {
			t.Fatalf("got %v, %v", c, err)
		}
	})
	t.Run("another number of shards names both", func(t *testing.T) {
		_, err := CursorOf(5).ForStore(4)
		var se *CursorShardsError
		if !errors.As(err, &se) || se.Cursor != 1 || se.Store != 4 {
			t.Fatalf("got %v", err)
		}
		if !strings.Contains(err.Error(), "names 1 shard(s) but the store has 4") {
			t.Fatalf("message %q", err)
		}
	})
	t.Run("With copies", func(t *testing.T) {
		a := CursorOf(1, 2)
		b := a.With(1, 9)
		if a.Position(1) != 2 || b.Position(1) != 9 || b.Position(0) != 1 {
			t.Fatalf("a=%v b=%v", a, b)
		}
	})
}

// FuzzParseCursor: ParseCursor never panics; what it accepts it spells
// back byte for byte, and what String spells it reads back equal.
func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"0", "42", "v1.2.0.0", "v1.4.120.98.131.0", "v1.2.01.0", "v1.3.1.2", "", "v1..", "v1.2.0.0."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCursor(s)
		if err != nil {
			var ce *CursorError
			if !errors.As(err, &ce) {
				t.Fatalf("ParseCursor(%q): %T, want *CursorError", s, err)
			}
			return
		}
		if c.String() != s {
			t.Fatalf("ParseCursor(%q).String() = %q", s, c.String())
		}
		back, err := ParseCursor(c.String())
		if err != nil || !back.Equal(c) {
			t.Fatalf("round trip of %q: %v, %v", s, back, err)
		}
		if c.Shards() < 1 || c.Shards() > MaxShards {
			t.Fatalf("%q: %d shards", s, c.Shards())
		}
	})
}
