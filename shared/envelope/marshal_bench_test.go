package envelope

import "testing"

// BenchmarkMarshal is the encoding of a parsed 1 KiB envelope (allocs/op
// and B/op are the figures to compare, docs/benchmarks.md).
func BenchmarkMarshal(b *testing.B) {
	e, err := Parse(benchEnvelope(1<<10), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Marshal(e); err != nil {
			b.Fatal(err)
		}
	}
}
