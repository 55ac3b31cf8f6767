package main

import (
	"strings"
	"testing"
)

// auth key create refuses, as a usage error naming the flag (exit 2) and
// before it connects, what auth.Keys.Create would refuse after: an admin
// operation on a pattern other than * and a description Postgres cannot
// hold or longer than 1000 bytes. They were exit 1 with an error that
// named no flag.
func TestAuthKeyCreateFlagRefusals(t *testing.T) {
	// No database: a refusal that connected first fails differently.
	setEnvConfig(t, map[string]string{"DATABASE_URL": "postgres:///nosuch?host=/nonexistent&connect_timeout=1"})
	tests := []struct {
		name string
		args []string
		says string
	}{
		{"admin_act on a db", []string{"--grant", "admin_act=db:orders"}, "--grant: grant on \"db:orders\": admin_act applies to the pattern * only"},
		{"admin_read on a stream, with read", []string{"--grant", "read,admin_read=stream:Order"}, "--grant: grant on \"stream:Order\": admin_read"},
		{"NUL in the description", []string{"--grant", "read=*", "--description", "a\x00b"}, "--description: the description must be UTF-8 text without NUL"},
		{"description not UTF-8", []string{"--grant", "read=*", "--description", "a\xffb"}, "--description"},
		{"description too long", []string{"--grant", "read=*", "--description", strings.Repeat("d", 1001)}, "--description: the description is longer than 1000 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, append([]string{"auth", "key", "create", "--principal", "p"}, tc.args...)...)
			if exitCode(err) != exitUsage || err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("exit %d (%v), want %d saying %q", exitCode(err), err, exitUsage, tc.says)
			}
		})
	}
}
