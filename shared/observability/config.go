package observability

import (
	"math"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/shared/config"
)

// LogConfig configures structured logging.
type LogConfig struct {
	Level  string `env:"SLUICE_LOG_LEVEL" envDefault:"info" doc:"Minimum log level: debug, info, warn or error."`
	Format string `env:"SLUICE_LOG_FORMAT" envDefault:"json" doc:"Log format: json (one JSON object per line) or text."`
}

// Validate checks the section; every problem is a *config.VarError.
func (c LogConfig) Validate() error {
	k := &config.Checker{}
	k.OneOf("SLUICE_LOG_LEVEL", c.Level, "debug", "info", "warn", "error")
	k.OneOf("SLUICE_LOG_FORMAT", c.Format, "json", "text")
	return k.Err()
}

// HTTPConfig configures the per-process observability server.
type HTTPConfig struct {
	Addr string `env:"SLUICE_HTTP_ADDR" envDefault:":9090" doc:"Listen address of the /metrics, /livez and /readyz server of every service. off disables it (an empty value means the default)."`
}

// Derive applies "off" (an empty address disables the server).
func (h *HTTPConfig) Derive() {
	if strings.EqualFold(h.Addr, "off") {
		h.Addr = ""
	}
}

// RuntimeConfig configures the Go runtime of a sluice process. The Go runtime
// reads these variables itself at start-up; sluice applies GOGC's default
// when it is unset (GCPercent).
type RuntimeConfig struct {
	GOGC       string `env:"GOGC" envDefault:"400" doc:"Garbage-collector target of the Go runtime: a collection starts when the heap has grown by this percentage over the live heap (off: never). Go's own default is 100; sluice's is 400, which took about a quarter off the pipeline's p99 at 1,000 commands/s for about 100 MB more memory in sluice dev (docs/benchmarks.md). Bound the heap with GOMEMLIMIT."`
	GOMAXPROCS string `env:"GOMAXPROCS" doc:"Number of goroutines the Go runtime runs at once (its threads running Go code), read by the runtime itself: a positive integer. Unset, Go takes the fewer of the CPUs the process may use and the container's CPU limit, rounded up and raised to at least 2 (so 2 under a limit of one CPU on a larger host). The Kubernetes manifests set it to the container's CPU limit through the downward API (docs/deploy.md): under a limit of one CPU a second thread only adds wake-ups and throttling."`
	GOMEMLIMIT string `env:"GOMEMLIMIT" doc:"Soft memory limit of the Go runtime, read by the runtime itself: a byte count (536870912) or one with a B, KiB, MiB, GiB or TiB suffix (900MiB), or off. Near it the collector runs more often, whatever GOGC says. The Kubernetes manifests set it to the container's memory limit through the downward API (docs/deploy.md)."`
}

// GCPercent is GOGC as debug.SetGCPercent takes it (-1 for off, or any
// negative value). It expects a validated configuration.
func (r RuntimeConfig) GCPercent() int {
	n, err := strconv.Atoi(r.GOGC)
	if err != nil || n < 0 {
		return -1 // off
	}
	return n
}

// Validate checks the section; every problem is a *config.VarError.
func (c RuntimeConfig) Validate() error {
	k := &config.Checker{}
	if _, err := strconv.Atoi(c.GOGC); err != nil && c.GOGC != "off" {
		k.Fail("GOGC", c.GOGC, "must be a percentage (an integer; negative means off) or off, as the Go runtime reads it")
	}
	if p := c.GOMAXPROCS; p != "" && !validMaxProcs(p) {
		k.Fail("GOMAXPROCS", p, "must be a positive integer, as the Go runtime reads it (what the Kubernetes downward API gives for limits.cpu with divisor 1); the runtime ignores anything else")
	}
	if m := c.GOMEMLIMIT; m != "" && !validMemLimit(m) {
		k.Fail("GOMEMLIMIT", m, "must be a byte count as the Go runtime reads it: an integer number of bytes (536870912, what the Kubernetes downward API gives with divisor 1), optionally with a B, KiB, MiB, GiB or TiB suffix (900MiB), or off")
	}
	return k.Err()
}

// validMaxProcs reports whether the Go runtime uses s as GOMAXPROCS: as
// it parses the variable (strconv.ParseInt(s, 10, 32) in schedinit), a
// decimal number from 1 to 2^31-1, a leading + allowed, no space. The
// runtime ignores any other value without a word, which would leave an
// operator's setting silently unapplied, so sluice refuses it.
// TestGOMAXPROCSAsTheRuntimeReadsIt holds it to the toolchain's runtime.
func validMaxProcs(s string) bool {
	n, err := strconv.ParseInt(s, 10, 32)
	return err == nil && n >= 1
}

// validMemLimit reports whether the Go runtime accepts s as GOMEMLIMIT
// (runtime.parseByteCount, plus "off"): a non-negative integer number of
// bytes (a leading + allowed), optionally followed by B, KiB, MiB, GiB or
// TiB, without spaces. deploy's TestGOMEMLIMITAsTheRuntimeReadsIt holds it
// to the runtime of the built binary.
// An unparsable GOMEMLIMIT makes the runtime abort before main.
func validMemLimit(s string) bool {
	if s == "off" {
		return true
	}
	num, mult := s, int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	if num == "" {
		return false
	}
	n, err := strconv.ParseInt(num, 10, 64)
	return err == nil && n >= 0 && n <= math.MaxInt64/mult
}
