package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
)

func emptyConfig(t *testing.T) *sluiceconfig.Config {
	t.Helper()
	cfg, err := sluiceconfig.Load(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// sluice dev makes an operator token when none is configured: random,
// kept in the data dir with mode 0600, reused by the next run, printed
// with the console's URL; a configured token wins and is never printed.
func TestDevAdminToken(t *testing.T) {
	dir := t.TempDir()
	cfg := emptyConfig(t)
	tok, err := devAdminToken(cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(tok.Token) || tok.Reused || cfg.API.AdminToken.Value() != tok.Token {
		t.Fatalf("made token %+v, config %q", tok, cfg.API.AdminToken.Value())
	}
	file := filepath.Join(dir, devAdminTokenFile)
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v %v, want mode 0600", file, st, err)
	}
	var out bytes.Buffer
	printConsoleAccess(&out, "http://127.0.0.1:8080", tok)
	if !strings.Contains(out.String(), "http://127.0.0.1:8080/console/") || !strings.Contains(out.String(), "admin token: "+tok.Token) {
		t.Errorf("printed:\n%s", out.String())
	}

	// The next run reuses it (an open console keeps working), and puts
	// the mode back.
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg2 := emptyConfig(t)
	again, err := devAdminToken(cfg2, dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Token != tok.Token || !again.Reused || cfg2.API.AdminToken.Value() != tok.Token {
		t.Errorf("second run: %+v, want the first token reused", again)
	}
	if st, _ := os.Stat(file); st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v after reuse, want 0600", st.Mode().Perm())
	}

	// SLUICE_ADMIN_TOKEN set: nothing made, nothing written or printed.
	other := t.TempDir()
	cfg3, err := sluiceconfig.Load(map[string]string{"SLUICE_ADMIN_TOKEN": "mine-and-secret"})
	if err != nil {
		t.Fatal(err)
	}
	own, err := devAdminToken(cfg3, other)
	if err != nil {
		t.Fatal(err)
	}
	if own.Token != "" || cfg3.API.AdminToken.Value() != "mine-and-secret" {
		t.Errorf("with SLUICE_ADMIN_TOKEN: %+v, config %q", own, cfg3.API.AdminToken.Value())
	}
	if _, err := os.Stat(filepath.Join(other, devAdminTokenFile)); !os.IsNotExist(err) {
		t.Errorf("token file written although SLUICE_ADMIN_TOKEN is set: %v", err)
	}
	out.Reset()
	printConsoleAccess(&out, "http://x", own)
	if strings.Contains(out.String(), "mine-and-secret") {
		t.Errorf("printed the configured token:\n%s", out.String())
	}
}

// The api service's routes (sluice api, not dev) make no token: without
// SLUICE_ADMIN_TOKEN the admin API answers 401 to everything; with the
// token dev would make, it answers.
func TestAPIServiceAdminClosedWithoutToken(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	for _, dev := range []bool{false, true} {
		cfg := emptyConfig(t)
		tok := devToken{}
		if dev {
			var err error
			if tok, err = devAdminToken(cfg, t.TempDir()); err != nil {
				t.Fatal(err)
			}
		}
		cfg.EventStore.Backend, cfg.EventStore.FileDir = "file", t.TempDir()
		bucket, err := backend.Open(context.Background(), cfg.EventStore)
		if err != nil {
			t.Fatal(err)
		}
		store, err := eventstore.New(cfg.EventStore, eventstore.Deps{Pool: pool, Bucket: bucket})
		if err != nil {
			t.Fatal(err)
		}
		routes, _, closeRoutes, err := apiRoutes(pipeline.Deps{Config: cfg, Pool: pool, StorePool: pool, RegistryPool: pool, Bucket: bucket, Store: store, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		for p, h := range routes {
			mux.Handle(p, h)
		}
		for _, auth := range []string{"", "Bearer ", "Bearer " + tok.Token} {
			req := httptest.NewRequest("GET", "/admin/v1/audit", nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, req)
			want := http.StatusUnauthorized
			if dev && auth == "Bearer "+tok.Token {
				want = http.StatusOK
			}
			if w.Code != want {
				t.Errorf("dev token %t, auth %q: %d %s, want %d", dev, auth, w.Code, w.Body.String(), want)
			}
		}
		closeRoutes()
		_ = store.Close()
	}
}
