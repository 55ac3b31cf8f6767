package testenv

import (
	"os"
	"strconv"
)

// GrowthMaxEnv caps the sizes of the growth benchmarks (rows, aggregates,
// events in the store): sizes above it are left out. Unset, the cap is
// DefaultGrowthMax, which keeps `make bench` under its time budget; set it
// to 10000000 for the largest sizes (docs/benchmarks.md).
const GrowthMaxEnv = "SLUICE_BENCH_GROWTH_MAX"

// DefaultGrowthMax is the cap of the growth benchmarks' sizes when
// SLUICE_BENCH_GROWTH_MAX is unset.
const DefaultGrowthMax = 1_000_000

// GrowthSizes returns the sizes not above the cap (GrowthMaxEnv), in order.
func GrowthSizes(sizes ...int) []int {
	limit := DefaultGrowthMax
	if v, err := strconv.Atoi(os.Getenv(GrowthMaxEnv)); err == nil && v > 0 {
		limit = v
	}
	var out []int
	for _, n := range sizes {
		if n <= limit {
			out = append(out, n)
		}
	}
	return out
}

// SizeName is n for a sub-benchmark's name: 10k, 1M, 10M, or the number.
func SizeName(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}
