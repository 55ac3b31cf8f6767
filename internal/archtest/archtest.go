// Package archtest holds the architecture checks of the module: the
// layering of its packages into floors, the ownership of its Postgres
// tables and the length of its functions, the esserver module's too
// (docs/architecture.md, "Floors", "Table ownership", "Long functions"). Its tests
// run them on the real module (go list, the migrations and every .go
// file); the checks themselves are plain functions so that the tests can
// also show them failing on synthetic violations.
package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
)

// Module is the module path of sluice.
const Module = "github.com/sluicehq/sluice"

// ESModule is the ES test server's own module (esserver/, required by a
// replace directive): a test tool, not part of the product.
const ESModule = Module + "/esserver"

// esImporters are the only non-test packages of the product module that
// may import the ES server module: the dev command's wiring (sluice dev
// serves it on :9200) and the test helpers.
var esImporters = map[string]bool{
	Module + "/cmd/sluice":            true,
	Module + "/internal/testenv":      true,
	Module + "/pipeline/pipelinetest": true,
}

// CheckESServer returns every non-test import of the ES server module
// outside esImporters.
func CheckESServer(pkgs []Package) []Violation {
	var out []Violation
	for _, p := range pkgs {
		if p.TestOnly || esImporters[p.Path] {
			continue
		}
		for _, imp := range p.Imports {
			if imp == ESModule || strings.HasPrefix(imp, ESModule+"/") {
				out = append(out, Violation{From: p.Path, To: imp, Reason: "the product imports the ES server module (only sluice dev and test helpers may)"})
			}
		}
	}
	return out
}

// CheckRuntime returns every import of a worker (a package named
// *worker, such as instanceworker) by the runtime, worker/…: the runtime
// knows its handlers only through its own interfaces.
func CheckRuntime(pkgs []Package) []Violation {
	var out []Violation
	for _, p := range pkgs {
		r, in := rel(p.Path)
		if !in || (r != "worker" && !strings.HasPrefix(r, "worker/")) {
			continue
		}
		for _, imp := range p.Imports {
			ir, in := rel(imp)
			if !in || ir == "worker" || strings.HasPrefix(ir, "worker/") {
				continue
			}
			if strings.HasSuffix(strings.SplitN(ir, "/", 2)[0], "worker") {
				out = append(out, Violation{From: p.Path, To: imp, Reason: "the runtime imports a worker"})
			}
		}
	}
	return out
}

// Floor numbers. A package imports (outside its tests) only packages of a
// lower floor, or of its own component; on the floors above Foundation,
// two components of one floor never import each other.
const (
	// Foundation: shared/…, migrations, internal/…: what several services
	// use. Packages of this floor may import each other.
	Foundation = 0
	// Stores: eventstore, registry and auth, the owners of the Postgres tables
	// and the objects. None imports another.
	Stores = 1
	// Services: relay, the workers and api, which run on the stores.
	Services = 2
	// Tools: the packages behind the operator commands (dlq, inspect, console)
	// and the table of services (pipeline),
	// which read across the services.
	Tools = 3
	// Admin: the admin API, which serves the tools over HTTP (it calls
	// dlq and the services' operator functions).
	Admin = 4
	// Commands: cmd/…, flags, wiring and printing.
	Commands = 5
	// TestOnly marks a package without non-test Go files (acceptance,
	// deploy, docs): it is never linked into a binary and may import
	// anything.
	TestOnly = -1
)

// floors maps a module-relative path prefix to its floor. The longest
// matching prefix wins; a package that matches none is an error, so that a
// new top-level package gets a floor on purpose.
func floors() map[string]int {
	return map[string]int{
		"shared":           Foundation,
		"worker":           Foundation,
		"readmodel":        Foundation,
		"migrations":       Foundation,
		"internal":         Foundation,
		"client":           Foundation, // the Go client: imports no package of the module
		"eventstore":       Stores,
		"registry":         Stores,
		"auth":             Stores,
		"schema":           Stores,
		"relay":            Services,
		"instanceworker":   Services,
		"projectionworker": Services,
		"api":              Services,
		"dlq":              Tools,
		"pipeline":         Tools,
		"inspect":          Tools,
		"console":          Tools,
		"admin":            Admin,
		"cmd":              Commands,
		"acceptance":       TestOnly,
		"deploy":           TestOnly,
		"docs":             TestOnly,
	}
}

// Package is what the layering check needs of one package of the module.
type Package struct {
	// Path is the import path.
	Path string
	// Imports are the package's imports outside its tests.
	Imports []string
	// TestOnly is set for a package that has test files only.
	TestOnly bool
}

// Violation is one import that breaks the layering.
type Violation struct {
	From, To string
	Reason   string
}

func (v Violation) String() string {
	if v.To == "" {
		return v.From + ": " + v.Reason
	}
	return fmt.Sprintf("%s imports %s: %s", v.From, v.To, v.Reason)
}

// rel returns path relative to the module ("" for the module root, ok false
// outside it).
func rel(path string) (string, bool) {
	if path == ESModule || strings.HasPrefix(path, ESModule+"/") {
		return "", false // another module (CheckESServer)
	}
	if path == Module {
		return "", true
	}
	r, ok := strings.CutPrefix(path, Module+"/")
	return r, ok
}

// FloorOf returns the floor and the component of a module package (the
// component is the first path element, or shared/<name> on the shared
// floor). ok is false for a package no rule places.
func FloorOf(path string) (floor int, component string, ok bool) {
	r, in := rel(path)
	if !in {
		return 0, "", false
	}
	best, rules := "", floors()
	for prefix := range rules {
		if (r == prefix || strings.HasPrefix(r, prefix+"/")) && len(prefix) > len(best) {
			best = prefix
		}
	}
	if best == "" {
		return 0, "", false
	}
	parts := strings.Split(r, "/")
	component = parts[0]
	if (component == "shared" || component == "internal") && len(parts) > 1 {
		component += "/" + parts[1]
	}
	return rules[best], component, true
}

// CheckLayering returns every import among pkgs that breaks the floors,
// sorted. Imports outside the module are not checked.
func CheckLayering(pkgs []Package) []Violation {
	var out []Violation
	for _, p := range pkgs {
		if _, in := rel(p.Path); !in {
			continue
		}
		ff, fc, ok := FloorOf(p.Path)
		if !ok {
			out = append(out, Violation{From: p.Path, Reason: "the package has no floor: add its path to floors in internal/archtest and to docs/architecture.md"})
			continue
		}
		if p.TestOnly || ff == TestOnly {
			continue
		}
		for _, imp := range p.Imports {
			if _, in := rel(imp); !in {
				continue
			}
			tf, tc, ok := FloorOf(imp)
			switch {
			case !ok:
				out = append(out, Violation{From: p.Path, To: imp, Reason: "the imported package has no floor"})
			case tf == TestOnly:
				out = append(out, Violation{From: p.Path, To: imp, Reason: "a test-only package is imported by a production package"})
			case tc == fc:
				// within one component
			case tf > ff:
				out = append(out, Violation{From: p.Path, To: imp, Reason: fmt.Sprintf("upward import (floor %d imports floor %d)", ff, tf)})
			case tf == ff && ff != Foundation:
				out = append(out, Violation{From: p.Path, To: imp, Reason: fmt.Sprintf("sibling import on floor %d (%s imports %s)", ff, fc, tc)})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// ListPackages runs `go list -json ./...` in dir (the module root) and
// returns the module's packages.
func ListPackages(dir string) ([]Package, error) {
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("archtest: go list: %w: %s", err, stderr.String())
	}
	var out []Package
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			GoFiles    []string
			CgoFiles   []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("archtest: go list output: %w", err)
		}
		out = append(out, Package{Path: p.ImportPath, Imports: p.Imports, TestOnly: len(p.GoFiles)+len(p.CgoFiles) == 0})
	}
	return out, nil
}
