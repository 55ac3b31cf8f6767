// Command skipcheck reads the `go test -json` events of a full run
// (gotestsum --jsonfile) and fails when the set of skipped tests differs
// from internal/testskip/allowlist.txt. `make test` runs it after test-go.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/sluicehq/sluice/internal/testskip"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: skipcheck EVENTS.json")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "skipcheck:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var skipped []testskip.Skipped
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct{ Action, Package, Test string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Action != "skip" || ev.Test == "" {
			continue
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(ev.Package, testskip.Module), "/")
		if pkg == "" {
			pkg = "."
		}
		skipped = append(skipped, testskip.Skipped{Package: pkg, Test: ev.Test})
	}
	if err := sc.Err(); err != nil {
		return err
	}
	entries, err := testskip.Allowlist()
	if err != nil {
		return err
	}
	if diffs := testskip.Check(entries, skipped, os.Getenv); len(diffs) > 0 {
		return fmt.Errorf("the skipped tests differ from internal/testskip/allowlist.txt:\n  %s", strings.Join(diffs, "\n  "))
	}
	fmt.Printf("skipcheck: %d skips, all on the allowlist; every expected skip happened\n", len(skipped))
	return nil
}
