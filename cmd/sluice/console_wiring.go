package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/inspect"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/readmodel"
)

// newInspector opens the trace and aggregate views for the api process:
// the workers are the instance worker and the projections SLUICE_PROJECTIONS
// names (default history, as `sluice projection-worker`).
func newInspector(cfg *config.Config, pool *pgxpool.Pool, store *eventstore.Store, bucket objstore.Bucket, reg *registry.Registry) (*inspect.Inspector, error) {
	es, err := readmodel.NewClient(cfg.Elasticsearch)
	if err != nil {
		return nil, err
	}
	hs := []inspect.Handler{{Name: instanceworker.HandlerName, Group: instanceworker.GroupName, Kind: envelope.KindCommand}}
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
		hs = append(hs, inspect.Handler{Name: projectionworker.HandlerName(n, v), Group: projectionworker.GroupName(n, v), Kind: envelope.KindDomain})
	}
	return inspect.NewFromConfig(cfg, inspect.Deps{Pool: pool, Store: store, Bucket: bucket, Registry: reg,
		Sequences: store, ES: es, Handlers: hs})
}

// consoleRoutes are the console (static, public) and the inspect
// endpoints (behind the admin tokens), served beside the API.
func consoleRoutes(in *inspect.Inspector) map[string]http.Handler {
	ch := console.Handler()
	auth := adminReadAuth(adminTokensFromEnv())
	return map[string]http.Handler{
		console.Path:                          ch,
		strings.TrimSuffix(console.Path, "/"): ch,
		inspect.TracePath:                     auth(in.Handler()),
		inspect.AggregatePath:                 auth(in.Handler()),
	}
}

// adminTokens are the SHA-256 sums of the accepted admin tokens.
type adminTokens [][sha256.Size]byte

// adminTokensFromEnv reads SLUICE_ADMIN_TOKEN (operator) and
// SLUICE_ADMIN_READ_TOKEN (read-only), each also as *_FILE. Both roles may
// read. Interim: the admin API's own token handling replaces this when it
// lands.
func adminTokensFromEnv() adminTokens {
	var out adminTokens
	for _, name := range []string{"SLUICE_ADMIN_TOKEN", "SLUICE_ADMIN_READ_TOKEN"} {
		v := os.Getenv(name)
		if v == "" {
			if f := os.Getenv(name + "_FILE"); f != "" {
				if b, err := os.ReadFile(f); err == nil {
					v = strings.TrimRight(string(b), "\r\n")
				}
			}
		}
		if v != "" {
			out = append(out, sha256.Sum256([]byte(v)))
		}
	}
	return out
}

// adminReadAuth answers 401 unless the request bears one of the tokens;
// with no token configured every request is refused (never open by
// default).
func adminReadAuth(tokens adminTokens) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if ok {
				sum := sha256.Sum256([]byte(strings.TrimSpace(bearer)))
				for _, t := range tokens {
					if subtle.ConstantTimeCompare(sum[:], t[:]) == 1 {
						next.ServeHTTP(w, r)
						return
					}
				}
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-admin"`)
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "urn:sluice:problem:unauthorized", "title": "Unauthorized",
				"status": http.StatusUnauthorized, "code": "unauthorized", "detail": "the admin API needs a bearer token (SLUICE_ADMIN_TOKEN or SLUICE_ADMIN_READ_TOKEN)"})
		})
	}
}
