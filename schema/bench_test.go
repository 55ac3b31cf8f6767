package schema

import "testing"

// BenchmarkValidate is the cost of checking one event's data against a
// compiled schema: the work the door adds per event (docs/benchmarks.md).
func BenchmarkValidate(b *testing.B) {
	c, err := Compile([]byte(`{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number","minimum":0},
		"lines":{"type":"array","items":{"type":"object","properties":{"qty":{"type":"integer","minimum":1}},"required":["qty"]}}},
		"required":["id","total"]}`))
	if err != nil {
		b.Fatal(err)
	}
	data := []byte(`{"id":"o-1-2","total":12.5,"lines":[{"qty":1},{"qty":3}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Validate(data); err != nil {
			b.Fatal(err)
		}
	}
}
