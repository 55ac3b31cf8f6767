package acceptance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// Environment variables through which TestMain hands the built binary and
// the package's MinIO server to the tests (so the package keeps no mutable
// package-level state).
const (
	envBinary      = "SLUICE_ACCEPTANCE_BIN"
	envS3Endpoint  = "SLUICE_ACCEPTANCE_S3_ENDPOINT"
	envS3AccessKey = "SLUICE_ACCEPTANCE_S3_ACCESS_KEY"
	envS3SecretKey = "SLUICE_ACCEPTANCE_S3_SECRET_KEY"
)

// TestMain builds the real `sluice` binary once (without -race: the
// processes under test are the product as shipped), starts one MinIO server
// for the package and runs the scenarios.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sluice-acceptance-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "acceptance:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "acceptance: go build ./cmd/sluice: %v\n%s", err, out)
		return 1
	}
	return testenv.RunWithMinIO(m, func(mi *testenv.MinIO) {
		_ = os.Setenv(envBinary, bin)
		_ = os.Setenv(envS3Endpoint, mi.Endpoint)
		_ = os.Setenv(envS3AccessKey, mi.AccessKey)
		_ = os.Setenv(envS3SecretKey, mi.SecretKey)
	})
}

// binary returns the path of the binary TestMain built.
func binary(t testing.TB) string {
	t.Helper()
	b := os.Getenv(envBinary)
	if b == "" {
		t.Fatal("acceptance: the sluice binary was not built (run through TestMain)")
	}
	return b
}

// sharedMinIO returns the package's MinIO server.
func sharedMinIO(t testing.TB) *testenv.MinIO {
	t.Helper()
	ep := os.Getenv(envS3Endpoint)
	if ep == "" {
		t.Fatal("acceptance: MinIO was not started (run through TestMain)")
	}
	return &testenv.MinIO{Endpoint: ep, AccessKey: os.Getenv(envS3AccessKey), SecretKey: os.Getenv(envS3SecretKey)}
}
