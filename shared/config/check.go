package config

import (
	"regexp"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/shared/suggest"
)

// knownPrefixes are the prefixes of sluice's own variables: an unknown
// variable with one of them is a mistake (a typo or a variable of another
// version), whatever its distance to a known name.
var knownPrefixes = []string{
	"EVENT_STORE_", "EVENT_PUBLISHER_", "KAFKA_", "PROCESSED_EVENT_", "SLUICE_",
	"ELASTICSEARCH_", "INSTANCE_WORKER_", "PROJECTION_WORKER_", "DATABASE_",
}

// toolPrefixes are variables of sluice's test harness, benchmarks and
// build tooling (internal/testenv, the soak, make), which a developer's shell
// or CI sets next to a process's configuration: not typos.
var toolPrefixes = []string{
	"SLUICE_TEST_", "SLUICE_MINIO_", "SLUICE_SOAK", "SLUICE_BENCH_", "SLUICE_RELAY_TEST_",
	"SLUICE_ES_REST_SPEC_DIR", "SLUICE_CACHE_DIR",
}

// sdkPrefixes are variables read by libraries sluice embeds: the
// OpenTelemetry SDK reads the whole OTEL_* set (Tracing lists the main
// ones), so an OTEL_ variable sluice does not declare is not a typo.
var sdkPrefixes = []string{"OTEL_"}

// serviceLink matches the variables Kubernetes injects for every Service of
// the namespace (SLUICE_API_SERVICE_HOST, KAFKA_PORT_9092_TCP_ADDR, …) when
// a pod keeps enableServiceLinks: they are not sluice's and not typos.
var serviceLink = regexp.MustCompile(`^[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$`)

// UnknownVars returns a *VarError for every variable of environ that is not
// one of vars (what sluice reads) but that looks meant for it: one with a prefix of sluice's
// own (EVENT_STORE_, KAFKA_, SLUICE_, …) or within a typo's distance of a
// known name (EVENT_STORE_BAKEND, KAFKA_BROKER, DATABSE_URL). Each names the
// closest known variable. Other variables (PATH, HOME, Kubernetes service
// links) are left alone. The result is sorted by variable.
func UnknownVars(vars []Var, environ map[string]string) []error {
	known := make(map[string]bool, len(vars))
	fileOK := map[string]bool{}
	for _, v := range vars {
		known[v.Key] = true
		if v.FileOf != "" {
			fileOK[v.FileOf] = true
		}
	}
	names := make([]string, 0, len(environ))
	for name := range environ {
		names = append(names, name)
	}
	slices.Sort(names)
	var out []error
	for _, name := range names {
		if known[name] || serviceLink.MatchString(name) || slices.ContainsFunc(toolPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) ||
			slices.ContainsFunc(sdkPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		upper := strings.ToUpper(name)
		best, dist := "", -1
		for _, v := range vars {
			if d := suggest.EditDistance(upper, v.Key); dist < 0 || d < dist {
				best, dist = v.Key, d
			}
		}
		prefixed := false
		for _, p := range knownPrefixes {
			if strings.HasPrefix(upper, p) {
				prefixed = true
				break
			}
		}
		if !prefixed && dist > typoDistance(name) {
			continue
		}
		reason := "is not a variable sluice reads"
		switch base, isFile := strings.CutSuffix(upper, fileSuffix); {
		case upper != name && known[upper]:
			reason += "; variable names are upper case: did you mean " + upper + "?"
		case isFile && known[base] && !fileOK[base]:
			reason += "; only credentials can be read from a file, set " + base + " itself"
		case dist <= typoDistance(name) || prefixed:
			reason += "; did you mean " + best + "?"
		}
		out = append(out, &VarError{Var: name, Reason: reason + " (docs/configuration.md lists them)"})
	}
	return out
}

// typoDistance is the largest edit distance still taken for a typo of a
// name: one edit for short names (GOGC must not claim GOOS), two otherwise.
func typoDistance(name string) int {
	if len(name) < 8 {
		return 1
	}
	return 2
}
