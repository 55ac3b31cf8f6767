package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Which failures are retried, and after how long the server asked.
func TestRetryable(t *testing.T) {
	apiErr := func(status int, after time.Duration) error {
		return fmt.Errorf("wrapped: %w", typed(&Error{Status: status, Code: "x", RetryAfter: after}))
	}
	lost := &transportError{err: errors.New("connection reset by peer")}
	cases := []struct {
		name       string
		err        error
		idempotent bool
		wantRetry  bool
		wantWait   time.Duration
	}{
		{"429, idempotent", apiErr(429, 2*time.Second), true, true, 2 * time.Second},
		{"429, not idempotent: nothing was stored", apiErr(429, 0), false, true, 0},
		{"503, idempotent", apiErr(503, time.Second), true, true, time.Second},
		{"503, not idempotent: the outcome is unknown", apiErr(503, time.Second), false, false, 0},
		{"502", apiErr(502, 0), true, true, 0},
		{"504", apiErr(504, 0), true, true, 0},
		{"500", apiErr(500, 0), true, false, 0},
		{"400", apiErr(400, 0), true, false, 0},
		{"401", apiErr(401, 0), true, false, 0},
		{"404", apiErr(404, 0), true, false, 0},
		{"409", apiErr(409, 0), true, false, 0},
		{"422", apiErr(422, 0), true, false, 0},
		{"lost reply, idempotent", lost, true, true, 0},
		{"lost reply, not idempotent", lost, false, false, 0},
		{"another error", errors.New("encode"), true, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wait, retry := retryable(tc.err, tc.idempotent)
			if retry != tc.wantRetry || wait != tc.wantWait {
				t.Fatalf("retryable = %s, %v; want %s, %v", wait, retry, tc.wantWait, tc.wantRetry)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"1", time.Second},
		{" 120 ", 2 * time.Minute},
		{"-1", 0},
		{"soon", 0},
		{now.Add(3 * time.Second).Format(http.TimeFormat), 3 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
	}
	for _, tc := range cases {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			if got := parseRetryAfter(tc.in, now); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// expected_sequence goes out as the API wants it: a number as a JSON
// number, the other forms as strings.
func TestExpectedSequenceJSON(t *testing.T) {
	cases := []struct {
		in   ExpectedSequence
		want string
	}{
		{"", `"any"`},
		{AnySequence, `"any"`},
		{NoStream, `"no_stream"`},
		{StreamExists, `"exists"`},
		{AtSequence(0), `0`},
		{AtSequence(42), `42`},
	}
	for _, tc := range cases {
		t.Run(string(tc.in), func(t *testing.T) {
			b, err := json.Marshal(tc.in)
			if err != nil || string(b) != tc.want {
				t.Fatalf("got %s, %v; want %s", b, err, tc.want)
			}
		})
	}
}

// Ids are one path segment whatever they hold; the base URL's prefix is
// kept.
func TestURLs(t *testing.T) {
	cases := []struct {
		base, path, want string
	}{
		{"http://h:8080", streamPath("Device", "a/b %c:d") + "/events", "http://h:8080/v1/streams/Device/a%2Fb%20%25c:d/events"},
		{"http://h/prefix/", instancesPath("shop", "order") + "/" + seg("café"), "http://h/prefix/v1/dbs/shop/classes/order/instances/caf%C3%A9"},
		{"https://h", "/v1/commands/" + seg("k?x#y"), "https://h/v1/commands/k%3Fx%23y"},
		{"http://h", instancesPath("shop", "order") + "/" + seg("."), "http://h/v1/dbs/shop/classes/order/instances/%2E"},
		{"http://h", streamPath("Device", "..") + "/events", "http://h/v1/streams/Device/%2E%2E/events"},
		{"http://h", instancesPath("shop", "order") + "/" + seg("..."), "http://h/v1/dbs/shop/classes/order/instances/..."},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			c, err := New(tc.base)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.url(tc.path, nil); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"", "localhost:8080", "ftp://h", "http://"} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%q): want an error", bad)
		}
	}
}

// The package links alone: no package of the module is imported outside
// the tests (docs/architecture.md, "Floors": client is on the foundation
// floor so that anything may use it).
func TestImportsNoModulePackage(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "github.com/sluicehq/sluice") {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}
