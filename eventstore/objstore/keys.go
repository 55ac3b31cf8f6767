package objstore

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key accepted, in bytes (the S3 limit).
const MaxKeyLen = 1024

// MaxSegmentLen is the longest '/'-separated key segment accepted, in bytes
// (the file-name limit of common file systems, so keys work on the file
// backend too).
const MaxSegmentLen = 255

// ReservedSegmentPrefix starts path segments that backends keep for their
// own bookkeeping (the file backend's temporary and lock files); no key may
// contain a segment with it.
const ReservedSegmentPrefix = ".objstore"

// ValidateKey reports whether key is safe on every backend, wrapping
// ErrInvalidKey if not. A valid key is 1..MaxKeyLen bytes of UTF-8 without
// control characters or backslashes, made of non-empty '/'-separated
// segments of at most MaxSegmentLen bytes, none of which is "." or ".." or
// starts with
// ReservedSegmentPrefix. Such a key maps to a path strictly below a
// directory, so it can never name anything outside a file backend's root.
func ValidateKey(key string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidKey, truncate(key), why)
	}
	switch {
	case key == "":
		return bad("empty")
	case len(key) > MaxKeyLen:
		return bad(fmt.Sprintf("longer than %d bytes", MaxKeyLen))
	case !utf8.ValidString(key):
		return bad("not valid UTF-8")
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return bad("contains a control character")
		}
		if r == '\\' {
			return bad("contains a backslash")
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch {
		case seg == "":
			return bad("empty path segment (leading, trailing or double '/')")
		case len(seg) > MaxSegmentLen:
			return bad(fmt.Sprintf("path segment longer than %d bytes", MaxSegmentLen))
		case seg == "." || seg == "..":
			return bad("'.' or '..' path segment")
		case strings.HasPrefix(seg, ReservedSegmentPrefix):
			return bad("path segment starts with the reserved " + ReservedSegmentPrefix)
		}
	}
	return nil
}

// truncate keeps error messages short for absurdly long keys.
func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
