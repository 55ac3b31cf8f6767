// Command sluice is the single binary of the sluice event-sourcing pipeline:
// every service (api, relay, instance-worker, projection-worker, dev) and
// every operator action (migrate, store, relay, registry, …) is a
// subcommand (docs/architecture.md#the-parts, docs/operator-commands.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd(os.Stdout, os.Stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		if errors.Is(err, errStopped) {
			return // told to stop before it was up: a clean exit
		}
		var ex *exitError
		if errors.As(err, &ex) {
			os.Exit(ex.code)
		}
		os.Exit(1)
	}
}

// exitError carries a specific exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
