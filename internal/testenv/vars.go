package testenv

import "maps"

// MergeVars returns a new map of base's variables with extra's laid over
// them: a test's configuration with one run's overrides.
func MergeVars(base, extra map[string]string) map[string]string {
	m := maps.Clone(base)
	if m == nil {
		m = map[string]string{}
	}
	maps.Copy(m, extra)
	return m
}

// HelperEnv is the environment of a helper process (StartHelperProcess):
// first as given, then MergeVars(base, extra) as KEY=value.
func HelperEnv(base, extra map[string]string, first ...string) []string {
	env := append([]string(nil), first...)
	for k, v := range MergeVars(base, extra) {
		env = append(env, k+"="+v)
	}
	return env
}
