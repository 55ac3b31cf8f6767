package archtest

import (
	"strings"
	"testing"
)

// The module's packages keep the floors of docs/architecture.md.
func TestLayering(t *testing.T) {
	pkgs, err := ListPackages("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages: not the module", len(pkgs))
	}
	for _, v := range CheckLayering(pkgs) {
		t.Error(v)
	}
}

// The check fails on each kind of violation (synthetic import graphs).
func TestLayeringViolations(t *testing.T) {
	m := func(s string) string { return Module + "/" + s }
	for _, tc := range []struct {
		name string
		pkgs []Package
		want []string // substrings of the violations, in order; none: clean
	}{
		{"downward imports are fine", []Package{
			{Path: m("cmd/sluice"), Imports: []string{m("api"), m("relay"), m("dlq"), m("shared/config"), "fmt"}},
			{Path: m("api"), Imports: []string{m("eventstore"), m("registry"), m("shared/envelope")}},
			{Path: m("registry"), Imports: []string{m("shared/claim")}},
		}, nil},
		{"shared siblings and one component's subpackages", []Package{
			{Path: m("worker"), Imports: []string{m("shared/claim"), m("shared/envelope")}},
			{Path: m("eventstore/objstore/backend"), Imports: []string{m("eventstore/objstore"), m("eventstore/objstore/s3store")}},
		}, nil},
		{"the runtime imports the registry (upward)", []Package{
			{Path: m("worker"), Imports: []string{m("registry")}},
		}, []string{"worker imports " + m("registry") + ": upward import (floor 0 imports floor 1)"}},
		{"a store imports a service", []Package{
			{Path: m("eventstore"), Imports: []string{m("relay")}},
		}, []string{"upward import (floor 1 imports floor 2)"}},
		{"stores are siblings", []Package{
			{Path: m("eventstore"), Imports: []string{m("registry")}},
		}, []string{"sibling import on floor 1 (eventstore imports registry)"}},
		{"services are siblings", []Package{
			{Path: m("api"), Imports: []string{m("instanceworker")}},
		}, []string{"sibling import on floor 2 (api imports instanceworker)"}},
		{"a service imports a command", []Package{
			{Path: m("relay"), Imports: []string{m("cmd/sluice")}},
		}, []string{"upward import (floor 2 imports floor 5)"}},
		{"a production package imports a test-only one", []Package{
			{Path: m("api"), Imports: []string{m("acceptance")}},
		}, []string{"test-only package"}},
		{"test-only packages import anything", []Package{
			{Path: m("acceptance"), Imports: []string{m("cmd/sluice"), m("relay")}, TestOnly: true},
			{Path: m("relay/relaytest"), Imports: []string{m("api")}, TestOnly: true},
		}, nil},
		{"an unplaced package", []Package{
			{Path: m("newthing"), Imports: []string{m("shared/config")}},
		}, []string{"newthing: the package has no floor"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckLayering(tc.pkgs)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d violations %v, want %d %v", len(got), got, len(tc.want), tc.want)
			}
			for i, v := range got {
				if !strings.Contains(v.String(), tc.want[i]) {
					t.Errorf("violation %d = %q, want it to contain %q", i, v, tc.want[i])
				}
			}
		})
	}
}

// The runtime never imports a worker; the product never imports the ES
// server module except sluice dev and the test helpers.
func TestRuntimeAndESServer(t *testing.T) {
	pkgs, err := ListPackages("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range append(CheckRuntime(pkgs), CheckESServer(pkgs)...) {
		t.Error(v)
	}
	m := func(s string) string { return Module + "/" + s }
	if got := CheckRuntime([]Package{{Path: m("worker"), Imports: []string{m("shared/claim"), m("instanceworker")}}}); len(got) != 1 || !strings.Contains(got[0].String(), "the runtime imports a worker") {
		t.Errorf("runtime importing instanceworker: got %v", got)
	}
	if got := CheckRuntime([]Package{{Path: m("worker"), Imports: []string{m("projectionworker/sub")}}}); len(got) != 1 {
		t.Errorf("runtime importing projectionworker/sub: got %v", got)
	}
	if got := CheckESServer([]Package{
		{Path: m("api"), Imports: []string{ESModule}},
		{Path: m("cmd/sluice"), Imports: []string{ESModule}},
		{Path: m("acceptance"), Imports: []string{ESModule}, TestOnly: true},
	}); len(got) != 1 || !strings.Contains(got[0].String(), "api imports") {
		t.Errorf("api importing esserver: got %v", got)
	}
}
