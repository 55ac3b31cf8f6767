// Package suggest names what an operator probably meant when a name they
// gave (a consumer group, a topic, a projection, an aggregate type) does
// not exist: the one "not found; did you mean X?" of every command and of
// the admin API (issue 36.3).
package suggest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// NotFoundError is a name that does not exist, with the nearest one that
// does, if any is near enough.
type NotFoundError struct {
	Kind    string // "consumer group", "topic", "projection", …
	Name    string // what was asked for
	Nearest string // the closest existing name; empty when none is close
	Note    string // optional: why it does not exist, what to do
}

func (e *NotFoundError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q not found", e.Kind, e.Name)
	if e.Note != "" {
		b.WriteString(" (" + e.Note + ")")
	}
	if e.Nearest != "" {
		fmt.Fprintf(&b, "; did you mean %q?", e.Nearest)
	}
	return b.String()
}

// IsNotFound reports whether err is or wraps a *NotFoundError.
func IsNotFound(err error) bool {
	var nf *NotFoundError
	return errors.As(err, &nf)
}

// NotFound returns the error for name of kind, naming the nearest of
// existing.
func NotFound(kind, name string, existing []string) *NotFoundError {
	return &NotFoundError{Kind: kind, Name: name, Nearest: Nearest(name, existing)}
}

// Nearest returns the existing name closest to name, or "" when none is
// close. Ranked: a name equal but for case; a name that ends or starts
// with it after or before a separator (the group prefix: instance-worker →
// sluice.instance-worker), shortest first; then the smallest edit
// distance (EditDistance: a swap of two neighbours is one edit) up to a third of the longer name, at least 2.
// Ties go to the lexically smaller name, so the answer is stable.
func Nearest(name string, existing []string) string {
	if name == "" {
		return ""
	}
	cands := append([]string(nil), existing...)
	sort.Strings(cands)
	for _, c := range cands {
		if c != name && strings.EqualFold(c, name) {
			return c
		}
	}
	best := ""
	for _, c := range cands {
		if c == name {
			continue
		}
		if affix(c, name) && (best == "" || len(c) < len(best)) {
			best = c
		}
	}
	if best != "" {
		return best
	}
	bestD := -1
	for _, c := range cands {
		if c == name {
			continue
		}
		d := EditDistance(strings.ToLower(name), strings.ToLower(c))
		if d <= max(2, max(len(name), len(c))/3) && (bestD < 0 || d < bestD) {
			best, bestD = c, d
		}
	}
	return best
}

// affix reports whether c is name with a prefix or a suffix added,
// separated from it by '.', '-' or '_'.
func affix(c, name string) bool {
	long, short := c, name
	if len(short) < 3 || len(long) <= len(short) {
		return false
	}
	if strings.HasSuffix(long, short) && strings.ContainsRune(".-_", rune(long[len(long)-len(short)-1])) {
		return true
	}
	return strings.HasPrefix(long, short) && strings.ContainsRune(".-_", rune(long[len(short)]))
}

// EditDistance is the optimal-string-alignment distance of a and b:
// insertions, deletions, substitutions and transpositions of adjacent
// characters count one each (DATABSE_URL is one edit from DATABASE_URL,
// histroy from history). The one edit distance of sluice: the configuration
// check and the names of the CLI hints use it.
func EditDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range cur {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
