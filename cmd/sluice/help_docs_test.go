package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/docs"
)

// TestHelpCitesTheRepository renders the help of every command and checks
// what users read: no section of a file outside the repository (the external SPEC's section sign)
// is cited, and every docs/<page>.md#<anchor> it names resolves.
func TestHelpCitesTheRepository(t *testing.T) {
	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	checker := docs.NewChecker("../../docs")
	var visit func(c *cobra.Command)
	commands := 0
	visit = func(c *cobra.Command) {
		commands++
		var help strings.Builder
		help.WriteString(c.Short + "\n" + c.Long + "\n" + c.Example + "\n")
		help.WriteString(c.Flags().FlagUsages() + c.PersistentFlags().FlagUsages())
		text := help.String()
		if strings.Contains(text, "SPEC "+"§") {
			t.Errorf("%s: help cites a section of a file outside the repository:\n%s", c.CommandPath(), text)
		}
		for _, err := range checker.CheckText(text) {
			t.Errorf("%s: %v", c.CommandPath(), err)
		}
		for _, sub := range c.Commands() {
			visit(sub)
		}
	}
	visit(root)
	if commands < 20 {
		t.Fatalf("visited only %d commands", commands)
	}
}
