package testenv

import "testing"

// Step runs one named step of a long test script as the subtest name, so
// that a failure names its step. The steps of a script share its state
// and run in order: a step that stops with t.Fatal (or t.FailNow, t.Skip
// after a failure) stops the script there, as it would without subtests;
// t.Error lets the script go on. A step that -run leaves out is passed
// over, and the steps after it may then fail for want of what it did.
func Step(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	finished := false
	if !t.Run(name, func(t *testing.T) {
		fn(t)
		finished = true
	}) && !finished {
		t.FailNow()
	}
}
