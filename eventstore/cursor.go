package eventstore

import (
	"fmt"
	"strconv"
	"strings"
)

// Cursor names, for every shard of a store, the position a reader of the
// log has read through (docs/eventstore.md#reading-the-log-across-shards):
// every position of shard s up to Position(s) is settled (committed or
// abandoned, never to change) and the reader has seen those of its events
// it asked for. Log reads after a cursor and returns the next one, so a
// reader that resumes with any cursor it was given loses nothing and sees
// nothing twice.
//
// Its text form (String, ParseCursor) is versioned and has one spelling
// per cursor:
//
//   - one shard: the position itself in decimal ("0", "42") — a position
//     of the log as it was before shards, byte for byte;
//   - N >= 2 shards: "v1.N.P0.P1…PN-1", the version, the number of shards
//     and each shard's position, in decimal without leading zeros,
//     separated by dots ("v1.4.120.98.131.0").
//
// Only digits, 'v' and '.' occur, so a cursor goes unescaped into a URL
// query, an HTTP header (Last-Event-ID) and an SSE "id:" line. It is at
// most 6 + 20·N bytes (1,286 at N = 64, with every position at 19
// digits; positions below a million keep it under 450).
//
// The zero Cursor has no shards: Log reads it as the beginning of every
// shard.
type Cursor struct {
	pos []int64
}

// cursorVersion is the prefix of the multi-shard text form.
const cursorVersion = "v1"

// maxCursorLen bounds the text a parser reads: the longest cursor of
// MaxShards shards ("v1." 4 digits, then 20 bytes a shard).
const maxCursorLen = len(cursorVersion) + 1 + 4 + MaxShards*20

// StartCursor is the cursor before the first position of every one of
// shards shards (shards < 1 is read as 1).
func StartCursor(shards int) Cursor {
	return Cursor{pos: make([]int64, max(shards, 1))}
}

// CursorOf returns the cursor naming these positions, shard 0 first. It
// panics on a negative position or more than MaxShards shards (a
// programming error: cursors from outside go through ParseCursor).
func CursorOf(positions ...int64) Cursor {
	if len(positions) > MaxShards {
		panic(fmt.Sprintf("eventstore: a cursor of %d shards (at most %d)", len(positions), MaxShards))
	}
	for _, p := range positions {
		if p < 0 {
			panic(fmt.Sprintf("eventstore: a cursor with the negative position %d", p))
		}
	}
	return Cursor{pos: append([]int64(nil), positions...)}
}

// IsZero reports whether c is the zero Cursor (no shards).
func (c Cursor) IsZero() bool { return len(c.pos) == 0 }

// Shards is the number of shards the cursor names (0 for the zero Cursor).
func (c Cursor) Shards() int { return len(c.pos) }

// Position is the position of shard the cursor names (0 beyond its
// shards).
func (c Cursor) Position(shard int) int64 {
	if shard < 0 || shard >= len(c.pos) {
		return 0
	}
	return c.pos[shard]
}

// Positions returns a copy of the positions, shard 0 first.
func (c Cursor) Positions() []int64 { return append([]int64(nil), c.pos...) }

// With returns a copy of c with shard's position set to pos (c itself is
// never changed). It panics when shard is not one of c's shards.
func (c Cursor) With(shard int, pos int64) Cursor {
	if shard < 0 || shard >= len(c.pos) {
		panic(fmt.Sprintf("eventstore: shard %d of a cursor of %d shards", shard, len(c.pos)))
	}
	out := Cursor{pos: append([]int64(nil), c.pos...)}
	out.pos[shard] = pos
	return out
}

// Equal reports whether two cursors name the same positions.
func (c Cursor) Equal(d Cursor) bool {
	if len(c.pos) != len(d.pos) {
		return false
	}
	for i := range c.pos {
		if c.pos[i] != d.pos[i] {
			return false
		}
	}
	return true
}

// String is the cursor's text form ("" for the zero Cursor).
func (c Cursor) String() string {
	switch len(c.pos) {
	case 0:
		return ""
	case 1:
		return strconv.FormatInt(c.pos[0], 10)
	}
	b := make([]byte, 0, len(cursorVersion)+6+len(c.pos)*8)
	b = append(b, cursorVersion...)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(len(c.pos)), 10)
	for _, p := range c.pos {
		b = append(b, '.')
		b = strconv.AppendInt(b, p, 10)
	}
	return string(b)
}

// CursorError: a text that is not a cursor (ParseCursor).
type CursorError struct {
	// Cursor is the text given, cut to 100 bytes.
	Cursor string
	// Reason says what is wrong.
	Reason string
}

func (e *CursorError) Error() string {
	return fmt.Sprintf("eventstore: %q is not a log cursor: %s (a position for one shard, or v1.N.P0.…PN-1 for N shards; docs/eventstore.md#the-cursor)",
		e.Cursor, e.Reason)
}

// CursorShardsError: a cursor names another number of shards than the
// store has.
type CursorShardsError struct {
	// Cursor is the number of shards the cursor names; Store the store's.
	Cursor, Store int
}

func (e *CursorShardsError) Error() string {
	return fmt.Sprintf("eventstore: the cursor names %d shard(s) but the store has %d: a cursor is valid only for the store it came from "+
		"(a one-shard store's cursor is a plain position; a store of N shards uses v1.N.P0.…PN-1)", e.Cursor, e.Store)
}

// ParseCursor reads a cursor's text form strictly: exactly one of the two
// forms of String, canonical (no sign, no leading zero, no space), every
// position at most 2^63-1, and as many positions as the form's number of
// shards (2 to MaxShards). Anything else is a *CursorError.
func ParseCursor(s string) (Cursor, error) {
	bad := func(format string, args ...any) (Cursor, error) {
		shown := s
		if len(shown) > 100 {
			shown = shown[:100] + "…"
		}
		return Cursor{}, &CursorError{Cursor: shown, Reason: fmt.Sprintf(format, args...)}
	}
	if s == "" {
		return bad("empty")
	}
	if len(s) > maxCursorLen {
		return bad("%d bytes, longer than any cursor (%d)", len(s), maxCursorLen)
	}
	if !strings.ContainsRune(s, '.') {
		p, ok := parseCanonical(s)
		if !ok {
			return bad("a one-shard cursor is a position: decimal digits without a leading zero, at most 9223372036854775807")
		}
		return Cursor{pos: []int64{p}}, nil
	}
	rest, ok := strings.CutPrefix(s, cursorVersion+".")
	if !ok {
		return bad("a cursor of several shards starts with %q", cursorVersion+".")
	}
	ns, rest, ok := strings.Cut(rest, ".")
	if !ok {
		return bad("no position after the number of shards")
	}
	n, ok := parseCanonical(ns)
	if !ok || n < 2 || n > MaxShards {
		return bad("the number of shards %q is not an integer in 2..%d without a leading zero", ns, MaxShards)
	}
	pos := make([]int64, 0, n)
	for part := range strings.SplitSeq(rest, ".") {
		if int64(len(pos)) == n {
			return bad("more than the %d positions it declares", n)
		}
		p, ok := parseCanonical(part)
		if !ok {
			return bad("position %d (%q) is not decimal digits without a leading zero, at most 9223372036854775807", len(pos), part)
		}
		pos = append(pos, p)
	}
	if int64(len(pos)) != n {
		return bad("%d position(s) where it declares %d shards", len(pos), n)
	}
	return Cursor{pos: pos}, nil
}

// parseCanonical reads a non-negative decimal integer spelled the way
// strconv.FormatInt spells it.
func parseCanonical(s string) (int64, bool) {
	if s == "" || len(s) > 19 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// ForStore checks that c names shards shards: the zero Cursor becomes
// StartCursor(shards); another number of shards is a *CursorShardsError.
func (c Cursor) ForStore(shards int) (Cursor, error) {
	shards = max(shards, 1)
	if c.IsZero() {
		return StartCursor(shards), nil
	}
	if len(c.pos) != shards {
		return Cursor{}, &CursorShardsError{Cursor: len(c.pos), Store: shards}
	}
	return c, nil
}
