package envelope

import (
	"strconv"
	"strings"
	"testing"
)

func benchEnvelope(dataBytes int) []byte {
	return []byte(`{"event_id":"0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e","event_type":"INSTANCE_UPDATED","kind":"domain",` +
		`"aggregate_type":"Instance","aggregate_id":"shop:orders:o-1","sequence_number":3,"position":17,` +
		`"occurred_at":"2026-11-21T10:00:00.123Z","data":{"items":[{"sku":"a-1","qty":2,"price":12.5}],"note":"` +
		strings.Repeat("n", dataBytes) + `"},"metadata":{"command_id":"c-1","correlation_id":"k","traceparent":"00-x"},"schema_version":1}`)
}

func BenchmarkParse(b *testing.B) {
	for _, n := range []int{1 << 10, 64 << 10} {
		in := benchEnvelope(n)
		b.Run(strconv.Itoa(len(in))+"B", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if _, err := Parse(in, Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkCanonicalHash(b *testing.B) {
	e, err := Parse(benchEnvelope(1<<10), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := CanonicalHash(e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScanJSONText is the text check Parse runs before tokenizing
// (utf8.Valid, which Parse ran before, plus the escape scan).
func BenchmarkScanJSONText(b *testing.B) {
	for _, n := range []int{1 << 10, 64 << 10} {
		in := benchEnvelope(n)
		b.Run(strconv.Itoa(len(in))+"B", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if _, _, ok := ScanJSONText(in); !ok {
					b.Fatal("invalid")
				}
			}
		})
	}
}

// BenchmarkValidate is Validate of an envelope built in Go (the instance
// worker's domain events, through Prepare): its data is walked once for
// depth and duplicate keys.
//
// Run: go test -run '^$' -bench BenchmarkValidate -benchmem -benchtime=20000x ./shared/envelope/
func BenchmarkValidate(b *testing.B) {
	e, err := Parse(benchEnvelope(1<<10), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := Validate(e, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
