package testenv

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer collects what a process or an in-process worker writes (its
// logs, its output) while the test reads it: an io.Writer safe for
// concurrent writers and readers.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Contains reports whether s was written.
func (l *Buffer) Contains(s string) bool { return strings.Contains(l.String(), s) }

// Count returns how many times s was written.
func (l *Buffer) Count(s string) int { return strings.Count(l.String(), s) }
