package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	neturl "net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/observability"
)

// newHealthcheckCmd is the container health probe: the image has no shell
// or curl, so compose and kubelet exec probes call the binary itself.
// Without --url it probes the /readyz of this environment's health server
// (SLUICE_HTTP_ADDR), as the service beside it serves it.
func newHealthcheckCmd() *cobra.Command {
	var url string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "healthcheck",
		Short: "Probe a sluice health endpoint (for container health checks); exit 0 when it answers 2xx",
		Long: `healthcheck probes a health endpoint and exits 0 when it answers 2xx. Without --url it
probes /readyz of the health server SLUICE_HTTP_ADDR names (":9090" is http://127.0.0.1:9090/readyz;
a host of 0.0.0.0 or :: is probed on the loopback); SLUICE_HTTP_ADDR=off serves none, so the
probe needs --url then (exit code 2).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return usage("--timeout %s: want a positive duration", timeout)
			}
			if cmd.Flags().Changed("url") {
				// A URL that names no server failed as a probe (exit 1).
				if u, err := neturl.Parse(url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return usage("--url %q: want an http:// or https:// URL with a host", url)
				}
			} else {
				var h observability.HTTPConfig
				if err := config.Parse(&h, config.EnvironOS()); err != nil {
					return err
				}
				u, err := healthcheckURL(h.Addr)
				if err != nil {
					return err
				}
				url = u
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("healthcheck %s: %w", url, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				return fmt.Errorf("healthcheck %s: %s", url, resp.Status)
			}
			cmd.Printf("healthcheck %s: %s\n", url, resp.Status)
			return nil
		},
	}
	c.Flags().StringVar(&url, "url", "", "endpoint to probe (default: /readyz on SLUICE_HTTP_ADDR, http://127.0.0.1:9090/readyz unless set)")
	c.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "probe timeout")
	return c
}

// healthcheckURL is the /readyz URL of the health server listening on addr
// (SLUICE_HTTP_ADDR after Derive: "" is off): an unspecified host is
// probed on the loopback.
func healthcheckURL(addr string) (string, error) {
	if addr == "" {
		return "", usage("SLUICE_HTTP_ADDR is off: this environment serves no health endpoint; give --url")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", usage("SLUICE_HTTP_ADDR %q is not host:port (%w); give --url", addr, err)
	}
	switch host {
	case "", "0.0.0.0", "::":
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz", nil
}
