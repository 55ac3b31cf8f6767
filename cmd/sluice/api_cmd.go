package main

import (
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pipeline"
)

// newAPICmd is `sluice api` (docs/api.md): the command API on SLUICE_API_ADDR,
// plus /metrics, /livez and /readyz on SLUICE_HTTP_ADDR like every service
// (the API's own port serves them too). It stops gracefully on SIGTERM:
// readiness red, SSE subscriptions ended at once, requests in flight
// finished within SHUTDOWN_TIMEOUT (docs/operations.md#rolling-restart-with-sse-subscribers).
func newAPICmd() *cobra.Command {
	var addr string
	c := &cobra.Command{
		Use:   "api",
		Short: "Serve the command API: create, patch and delete instances, command status, reads (docs/api.md)",
		Long: `sluice api serves the HTTP command API. Each accepted request is one command
appended to the event store (202 with its command id); the relay and the
instance worker do the rest. Access control (API keys, SLUICE_API_TOKENS, OIDC
JWTs, grants and limits) is in docs/security.md. The API is described at
/openapi.json and in docs/api.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runService(cmd, pipeline.API, pipeline.Options{APIAddr: addr}, func(d pipeline.Deps, r pipeline.Runner) {
				a := r.(*pipeline.APIRunner)
				d.Logger.Info("sluice api listening", "addr", a.Addr().String(), "auth", a.Auth, "tls", a.TLS)
				scheme := "http"
				if a.TLS {
					scheme = "https"
				}
				cmd.Printf("sluice api listening on %s://%s\n", scheme, a.Addr())
			})
		},
	}
	c.Flags().StringVar(&addr, "addr", "", "listen address (default SLUICE_API_ADDR, :8080)")
	return c
}
