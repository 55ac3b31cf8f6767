package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sluicehq/sluice/relay"
)

// Exit codes of the destructive-command guards (docs/operator-commands.md).
const (
	// exitNeedsConfirmation: a destructive command ran without --yes or
	// --dry-run and stdin is not a terminal to ask on; nothing changed.
	exitNeedsConfirmation = 6
	// exitUnsafe: the guard refused the target itself (past the head,
	// below the lease timeout, a live writer, an older projection version);
	// nothing changed, and --yes does not override it.
	exitUnsafe = 7
)

// guardFlags are the --dry-run and --yes flags every destructive command
// takes: --dry-run prints exactly what would change and changes nothing;
// acting needs --yes, or a "yes" typed on a terminal.
type guardFlags struct {
	dryRun bool
	yes    bool
}

func (g *guardFlags) register(cmd *cobra.Command, dryRunDefault bool) {
	help := "print exactly what would change; change nothing"
	if dryRunDefault {
		help += " (the default without --yes)"
	}
	cmd.Flags().BoolVar(&g.dryRun, "dry-run", false, help)
	cmd.Flags().BoolVar(&g.yes, "yes", false, "act without asking (required when stdin is not a terminal)")
}

// confirm decides whether the command acts, after its plan was printed:
// false with a nil error on --dry-run; true on --yes; on a terminal it asks
// "what" and acts on y/yes; otherwise it refuses with exitNeedsConfirmation.
func (g *guardFlags) confirm(cmd *cobra.Command, what string) (bool, error) {
	if g.dryRun {
		return false, nil
	}
	if g.yes {
		return true, nil
	}
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s? type yes to proceed: ", what)
		line, err := bufio.NewReader(in).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return false, fmt.Errorf("read confirmation: %w", err)
		}
		if a := strings.ToLower(strings.TrimSpace(line)); a == "y" || a == "yes" {
			return true, nil
		}
		return false, &exitError{code: exitNeedsConfirmation, err: errors.New("not confirmed: nothing changed")}
	}
	return false, &exitError{code: exitNeedsConfirmation,
		err: fmt.Errorf("refusing to %s without confirmation: stdin is not a terminal; pass --yes to act or --dry-run to see the plan (nothing changed)", what)}
}

// unsafe wraps a guard refusal with exitUnsafe.
func unsafe(err error) error { return &exitError{code: exitUnsafe, err: err} }

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress is a progress bar drawn on stderr when stdout and stderr are
// terminals; a nil *progress (scripts, pipes: they use --json) does
// nothing.
type progress struct{ bar *progressbar.ProgressBar }

// newProgress returns a bar over total units (total <= 0: set later with
// setMax), nil when not on a terminal.
func newProgress(cmd *cobra.Command, total int64, desc, unit string) *progress {
	if !isTerminal(cmd.OutOrStdout()) || !isTerminal(cmd.ErrOrStderr()) {
		return nil
	}
	return &progress{bar: progressbar.NewOptions64(max(total, 1),
		progressbar.OptionSetWriter(cmd.ErrOrStderr()),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString(unit),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionFullWidth(),
	)}
}

func (p *progress) set(n int64) {
	if p != nil {
		_ = p.bar.Set64(n)
	}
}

func (p *progress) add(n int64) {
	if p != nil {
		_ = p.bar.Add64(n)
	}
}

func (p *progress) setMax(n int64) {
	if p != nil && n > 0 && p.bar.GetMax64() != n {
		p.bar.ChangeMax64(n)
	}
}

func (p *progress) describe(s string) {
	if p != nil {
		p.bar.Describe(s)
	}
}

func (p *progress) finish() {
	if p != nil {
		_ = p.bar.Finish()
	}
}

// writeSummary prints v as one indented JSON document (the --json summary).
func writeSummary(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printCheckpointPlan prints what `sluice relay checkpoint set` would do.
func printCheckpointPlan(cmd *cobra.Command, p relay.CheckpointPlan) {
	cur := fmt.Sprint(p.From)
	if !p.Found {
		cur += " (no checkpoint yet)"
	}
	cmd.Printf("checkpoint %s: %s -> %d (head %d, retention floor %d)\n", p.Key, cur, p.To, p.Head, p.Floor)
	switch {
	case p.Republish > 0:
		cmd.Printf("  %d positions (%d..%d) are published again; consumers absorb the duplicates\n", p.Republish, p.To+1, p.From)
	case p.Skip > 0:
		cmd.Printf("  %d positions (%d..%d) are skipped and never published\n", p.Skip, p.From+1, p.To)
	default:
		cmd.Printf("  no position changes\n")
	}
	if p.DroppedGaps > 0 {
		cmd.Printf("  %d pending gaps above %d are dropped (walked again)\n", p.DroppedGaps, p.To)
	}
	if p.Skip > 0 || p.Republish > 0 {
		cmd.Printf("  the recent-event-id set is cleared\n")
	}
}
