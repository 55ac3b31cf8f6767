package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/inspect"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/envelope"
)

// newInspector opens the trace and aggregate views for the api process:
// the workers are the instance worker and the projections SLUICE_PROJECTIONS
// names (default history, as `sluice projection-worker`).
func newInspector(cfg *sluiceconfig.Config, pool *pgxpool.Pool, store *eventstore.Store, bucket objstore.Bucket, reg *registry.Registry) (*inspect.Inspector, error) {
	es, err := readmodel.NewClient(cfg.Elasticsearch)
	if err != nil {
		return nil, err
	}
	workers, err := configuredWorkers(cfg)
	if err != nil {
		return nil, err
	}
	hs := make([]inspect.Handler, 0, len(workers))
	for i, w := range workers {
		kind := envelope.KindDomain
		if i == 0 {
			kind = envelope.KindCommand
		}
		hs = append(hs, inspect.Handler{Name: w.Handler, Group: w.Group, Kind: kind})
	}
	return inspect.New(inspect.Config{Kafka: cfg.Kafka, Relay: cfg.Relay, Elasticsearch: cfg.Elasticsearch}, inspect.Deps{Pool: pool, Store: store, Bucket: bucket, Registry: reg,
		Sequences: store, ES: es, Handlers: hs})
}

// configuredWorkers are the worker groups the deployment runs: the
// instance worker first, then the projections SLUICE_PROJECTIONS names
// (default history, as `sluice projection-worker`).
func configuredWorkers(cfg *sluiceconfig.Config) ([]admin.Worker, error) {
	ws := []admin.Worker{{Handler: instanceworker.HandlerName, Group: cfg.Kafka.Group(instanceworker.GroupName)}}
	list := os.Getenv(projectionsEnv)
	if list == "" {
		list = "history"
	}
	specs, err := parseProjections(list)
	if err != nil {
		return nil, err
	}
	for _, s := range specs {
		n, v := s.Projection.Name(), s.Projection.Version()
		ws = append(ws, admin.Worker{Handler: projectionworker.HandlerName(n, v), Group: cfg.Kafka.Group(projectionworker.GroupName(n, v))})
	}
	return ws, nil
}

// consoleRoutes are the console's static files (public: every piece of
// data the page shows comes from the admin API, which checks the token).
func consoleRoutes() map[string]http.Handler {
	ch := console.Handler()
	return map[string]http.Handler{console.Path: ch, strings.TrimSuffix(console.Path, "/"): ch}
}

// devAdminTokenFile is where `sluice dev` keeps the admin token it made,
// in its data directory (mode 0600).
const devAdminTokenFile = "admin-token"

// devToken is the operator token `sluice dev` runs with.
type devToken struct {
	// Token is the token made or reused by sluice dev ("" when it came
	// from SLUICE_ADMIN_TOKEN, which sluice dev never prints).
	Token string
	// File holds Token; Reused says it was read from there, not made now.
	File   string
	Reused bool
}

// devAdminToken gives `sluice dev` an operator token when
// SLUICE_ADMIN_TOKEN (or its _FILE) is unset: the one a previous run left
// in the data directory, else 32 random bytes, hex, written there with
// mode 0600. It sets cfg's token. Only runDev calls it: the service
// commands (sluice api) never make a token, so there the admin API stays
// closed (401) until one is configured.
func devAdminToken(cfg *sluiceconfig.Config, dataDir string) (devToken, error) {
	if cfg.API.AdminToken.Value() != "" {
		return devToken{}, nil
	}
	t := devToken{File: filepath.Join(dataDir, devAdminTokenFile)}
	if b, err := os.ReadFile(t.File); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		t.Token, t.Reused = strings.TrimSpace(string(b)), true
		if err := os.Chmod(t.File, 0o600); err != nil {
			return t, fmt.Errorf("admin token file: %w", err)
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return t, fmt.Errorf("admin token file: %w", err)
	} else {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return t, err
		}
		t.Token = hex.EncodeToString(b)
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return t, err
		}
		// Remove first: WriteFile keeps the mode of a file that exists.
		_ = os.Remove(t.File)
		if err := os.WriteFile(t.File, []byte(t.Token+"\n"), 0o600); err != nil {
			return t, fmt.Errorf("admin token file: %w", err)
		}
	}
	cfg.API.AdminToken = config.Secret(t.Token)
	return t, nil
}

// printConsoleAccess prints where the console is and which token opens it.
func printConsoleAccess(out io.Writer, apiURL string, t devToken) {
	fmt.Fprintf(out, "Console: %s/console/\n", apiURL)
	switch {
	case t.Token == "":
		fmt.Fprintf(out, "  admin token: the one in SLUICE_ADMIN_TOKEN\n\n")
	case t.Reused:
		fmt.Fprintf(out, "  admin token: %s\n  (made by an earlier sluice dev, kept in %s; set SLUICE_ADMIN_TOKEN to choose your own)\n\n", t.Token, t.File)
	default:
		fmt.Fprintf(out, "  admin token: %s\n  (made now, kept in %s with mode 0600; set SLUICE_ADMIN_TOKEN to choose your own)\n\n", t.Token, t.File)
	}
}
