package observability

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// childGOMAXPROCS makes the test binary, started by
// TestGOMAXPROCSAsTheRuntimeReadsIt, print the GOMAXPROCS its runtime chose.
const childGOMAXPROCS = "SLUICE_TEST_PRINT_GOMAXPROCS"

// gomaxprocsOf runs this test binary with GOMAXPROCS=v (unset for "") and
// returns the GOMAXPROCS its runtime runs with.
func gomaxprocsOf(t *testing.T, v string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGOMAXPROCSAsTheRuntimeReadsIt$", "-test.count=1")
	env := []string{childGOMAXPROCS + "=1"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			env = append(env, kv)
		}
	}
	if v != "" {
		env = append(env, "GOMAXPROCS="+v)
	}
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("GOMAXPROCS=%q: %v", v, err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	n, err := strconv.Atoi(strings.TrimPrefix(line, "gomaxprocs="))
	if err != nil {
		t.Fatalf("GOMAXPROCS=%q: output %q", v, out)
	}
	return n
}

// RuntimeConfig accepts a GOMAXPROCS exactly when the Go runtime of this
// toolchain uses it: a value it ignores (the runtime then takes its
// default without a word) is refused, and a value it uses is accepted.
func TestGOMAXPROCSAsTheRuntimeReadsIt(t *testing.T) {
	if os.Getenv(childGOMAXPROCS) == "1" {
		fmt.Printf("gomaxprocs=%d\n", runtime.GOMAXPROCS(0))
		return
	}
	def := gomaxprocsOf(t, "")
	n := def + 1 // a value the runtime takes only from the variable
	s := strconv.Itoa(n)
	for _, v := range []string{
		s, "+" + s, "0" + s, "00" + s, " " + s, s + " ", s + ".0", "0x" + s, s + "_0", "-" + s, "0", "+0", "-0", "", "one", s + "m",
	} {
		t.Run(v, func(t *testing.T) {
			runtimeUses := v != "" && gomaxprocsOf(t, v) == n
			validErr := RuntimeConfig{GOGC: "100", GOMAXPROCS: v}.Validate()
			if v == "" {
				if validErr != nil {
					t.Errorf("unset GOMAXPROCS refused: %v", validErr)
				}
				return
			}
			if configOK := validErr == nil; configOK != runtimeUses {
				t.Errorf("GOMAXPROCS=%q: the Go runtime uses it: %v (default %d); sluice's validation accepts it: %v (%v)", v, runtimeUses, def, configOK, validErr)
			}
		})
	}
}
