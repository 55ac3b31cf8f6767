package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// newHealthcheckCmd is the container health probe: the image has no shell
// or curl, so compose and kubelet exec probes call the binary itself.
func newHealthcheckCmd() *cobra.Command {
	var url string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "healthcheck",
		Short: "Probe a sluice health endpoint (for container health checks); exit 0 when it answers 2xx",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
	c.Flags().StringVar(&url, "url", "http://127.0.0.1:9090/readyz", "endpoint to probe")
	c.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "probe timeout")
	return c
}
