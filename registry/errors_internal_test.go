package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"starting up", &pgconn.PgError{Code: "57P03"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"read-only standby", &pgconn.PgError{Code: "25006"}, true},
		{"deadlock after retries", &pgconn.PgError{Code: "40P01"}, true},
		{"check violation", &pgconn.PgError{Code: "23514"}, false},
		{"undefined table", &pgconn.PgError{Code: "42P01"}, false},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"eof", fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), true},
		{"op timeout", fmt.Errorf("acquire: %w", context.DeadlineExceeded), true},
		{"conn closed", fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
		{"logic", errors.New("claim returned 3 results for 4 requests"), false},
	} {
		if got := isUnavailable(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTruncateAndClean(t *testing.T) {
	s := cleanText("a\x00b\xffc" + string(make([]byte, 0)))
	if s != "a\uFFFDb\uFFFDc" {
		t.Fatalf("%q", s)
	}
	long := ""
	for len(long) < 3000 {
		long += "é"
	}
	if got := truncate(long, 2047); len(got) > 2047 || got[len(got)-2:] != "é" {
		t.Fatalf("cut inside a rune: %d", len(got))
	}
	if !validUUID(newUUID()) || validUUID("nope") {
		t.Fatal("uuid")
	}
}
