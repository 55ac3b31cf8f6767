// Package pipelinebench holds the benchmarks of the pipeline as it is
// deployed (issue #34): the api, the relay, the instance worker and the
// projection worker as separate processes of the real `sluice` binary, with
// Kafka (kfake) and the Elasticsearch test server as processes of their
// own, Postgres the running local server (a fresh database per run), and
// the event store on the file backend or on MinIO. It measures what a user
// of the deployment sees — commands made readable per second, the time from
// a request to its document being readable — and what it costs, the
// machine's CPU per readable command by process, read from each process's
// own counters (/proc). It also holds the growth benchmarks that need the
// whole deployment: patch latency on a long aggregate and service start-up
// with a large store.
//
// It is a package of benchmarks: `go test` runs only the unit tests of its
// CPU accounting here, and the binary is built only when a benchmark is
// selected (TestMain). The test
// binary also plays Kafka and the Elasticsearch server: re-executed with
// SLUICE_PIPELINEBENCH_ROLE set, it serves that role instead of running
// benchmarks, so that neither is part of the product CLI and each runs in
// a process whose CPU is counted apart. See docs/benchmarks.md.
package pipelinebench

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Environment variables between TestMain, the benchmarks and the role
// processes (no package-level mutable state).
const (
	envRole   = "SLUICE_PIPELINEBENCH_ROLE" // kafka or elasticsearch: serve that role
	envAddr   = "SLUICE_PIPELINEBENCH_ADDR" // the role's listen address
	envDir    = "SLUICE_PIPELINEBENCH_DIR"  // the role's data folder
	envBinary = "SLUICE_PIPELINEBENCH_BIN"  // the sluice binary TestMain built
	// envUseBinary names a sluice binary to measure instead of building
	// this tree's: another revision's, built by the user, so that two
	// revisions are measured by the same harness on the same machine.
	envUseBinary = "SLUICE_BENCH_BINARY"
)

func TestMain(m *testing.M) {
	switch os.Getenv(envRole) {
	case "":
	case roleKafka:
		sluiceRuntime()
		os.Exit(serveKafka(os.Getenv(envAddr), os.Getenv(envDir)))
	case roleES:
		sluiceRuntime()
		os.Exit(serveES(os.Getenv(envAddr), os.Getenv(envDir)))
	default:
		fmt.Fprintf(os.Stderr, "pipelinebench: unknown %s %q\n", envRole, os.Getenv(envRole))
		os.Exit(2)
	}
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run()) // no benchmark selected: nothing to build
	}
	os.Exit(runBenchmarks(m))
}

// runBenchmarks builds the real binary once (without -race: the product as
// shipped, with the Makefile's flags), or takes SLUICE_BENCH_BINARY, and
// runs the benchmarks.
func runBenchmarks(m *testing.M) int {
	if bin := os.Getenv(envUseBinary); bin != "" {
		_ = os.Setenv(envBinary, bin)
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "sluice-pipelinebench-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipelinebench:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/sluice")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "pipelinebench: go build ./cmd/sluice: %v\n%s", err, out)
		return 1
	}
	_ = os.Setenv(envBinary, bin)
	return m.Run()
}

// binary returns the path of the binary TestMain built.
func binary(b testing.TB) string {
	b.Helper()
	p := os.Getenv(envBinary)
	if p == "" {
		b.Fatal("pipelinebench: the sluice binary was not built (run with -bench, through TestMain)")
	}
	return p
}
