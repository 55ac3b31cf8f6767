package filestore_test

import (
	"fmt"
	"testing"
)

// BenchmarkListAfterLast is the relay's LIST close behind the head: a page
// after the last segment of a folder of segments=N. Its cost grows with N
// only by reading the folder's names; before, every entry was lstat'd.
func BenchmarkListAfterLast(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("segments=%d", n), func(b *testing.B) {
			bk := newBucket(b)
			key := func(i int) string { return fmt.Sprintf("segments/%020d-%020d.jsonl", i, i) }
			for i := 1; i <= n; i++ {
				if _, err := bk.Create(b.Context(), key(i), []byte("x\n")); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := bk.List(b.Context(), "segments/", key(n-2), 200); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
