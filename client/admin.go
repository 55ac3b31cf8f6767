package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
)

// AdminGet reads one endpoint of the admin API (docs/console.md, "Admin
// API"): GET /admin/v1/{path}?{query} with the admin token
// (WithAdminToken; the read token suffices), decoding the JSON reply into
// out (a *json.RawMessage keeps it as is). path is below /admin/v1/ and
// already escaped ("overview", "consumers/sluice-instances",
// "dlq/letter"). Reads are retried like every read; the admin API's
// actions (POST) are left to the CLI and the console, which confirm them.
func (c *Client) AdminGet(ctx context.Context, path string, query url.Values, out any) error {
	res, err := c.do(ctx, request{method: http.MethodGet, path: "/admin/v1/" + strings.TrimLeft(path, "/"), query: query, idempotent: true, admin: true})
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	return decode(res, out)
}

// AdminOverview returns GET /admin/v1/overview: the store head, relay,
// worker lags, registry, dead letters, projections and jobs, as the
// console shows them.
func (c *Client) AdminOverview(ctx context.Context) (json.RawMessage, error) {
	var raw json.RawMessage
	if err := c.AdminGet(ctx, "overview", nil, &raw); err != nil {
		return nil, err
	}
	return raw, nil
}
