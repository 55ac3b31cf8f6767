package filestore

import (
	"strings"
	"testing"
)

// The listing compares a folder's key prefix and an entry's name with the
// prefix and startAfter without joining them; every split of every pair
// of these strings must answer as the joined key does.
func TestJoinedComparisons(t *testing.T) {
	words := []string{"", "s", "segments", "segments/", "segments/0001", "segments/0001-0002.jsonl",
		"segments/0002", "segments-", "segments/n4/", "segments/n4/0000-1", "t", "a/b/c"}
	for _, key := range words {
		for cut := 0; cut <= len(key); cut++ {
			a, b := key[:cut], key[cut:]
			for _, s := range words {
				if got, want := compareJoined(a, b, s), strings.Compare(key, s); got != want {
					t.Errorf("compareJoined(%q, %q, %q) = %d, want %d", a, b, s, got, want)
				}
				if got, want := hasPrefixOf(a, b, s), strings.HasPrefix(key, s); got != want {
					t.Errorf("hasPrefixOf(%q, %q, %q) = %v, want %v", a, b, s, got, want)
				}
			}
		}
	}
}
