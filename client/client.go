package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Client talks to one sluice API. It is safe for concurrent use; it holds
// no state between requests beyond its configuration and the HTTP
// client's connections.
type Client struct {
	base       *url.URL
	hc         *http.Client
	token      string
	adminToken string
	userAgent  string
	retry      RetryPolicy
	poll       RetryPolicy
	timeout    time.Duration
	maxBody    int64
}

// RetryPolicy shapes the retries of one request: exponential backoff
// with jitter (±50 %), from InitialInterval doubling up to MaxInterval, at
// most MaxAttempts attempts (the first included) and no retry that would
// start after MaxElapsed. A Retry-After of the server replaces the
// computed delay. The request's context bounds all of it.
type RetryPolicy struct {
	// MaxAttempts counts every attempt; 1 means no retry. 0 is the
	// default.
	MaxAttempts int
	// InitialInterval is the first delay, MaxInterval the largest.
	InitialInterval, MaxInterval time.Duration
	// MaxElapsed bounds the time from the first attempt to the start of
	// the last one; a negative value leaves it to MaxAttempts and the
	// context.
	MaxElapsed time.Duration
}

// DefaultRetryPolicy is the policy of a client built without WithRetry:
// 6 attempts, 200 ms doubling up to 10 s, within one minute.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 6, InitialInterval: 200 * time.Millisecond, MaxInterval: 10 * time.Second, MaxElapsed: time.Minute}
}

// DefaultPollPolicy is how WaitForCommand polls a command's status: from
// 50 ms doubling up to 2 s, with jitter, until the context ends
// (MaxAttempts and MaxElapsed are not used).
func DefaultPollPolicy() RetryPolicy {
	return RetryPolicy{InitialInterval: 50 * time.Millisecond, MaxInterval: 2 * time.Second}
}

func (p RetryPolicy) withDefaults(def RetryPolicy) RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = def.MaxAttempts
	}
	if p.InitialInterval <= 0 {
		p.InitialInterval = def.InitialInterval
	}
	if p.MaxElapsed == 0 {
		p.MaxElapsed = def.MaxElapsed
	}
	if p.MaxInterval < p.InitialInterval {
		p.MaxInterval = max(def.MaxInterval, p.InitialInterval)
	}
	return p
}

// backoff returns a fresh exponential backoff of the policy.
func (p RetryPolicy) backoff() *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval: p.InitialInterval, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: p.MaxInterval,
	}
	b.Reset()
	return b
}

// Option configures a Client (New).
type Option func(*Client)

// WithHTTPClient sets the HTTP client (default: a new http.Client without
// a timeout; each request is bounded by WithRequestTimeout and its
// context). Its Timeout, if set, also ends subscriptions, which then
// resume.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithToken sets the bearer token of the /v1 API (SLUICE_API_TOKENS).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithAdminToken sets the bearer token of the admin API
// (SLUICE_ADMIN_TOKEN or SLUICE_ADMIN_READ_TOKEN), used by AdminGet.
func WithAdminToken(token string) Option { return func(c *Client) { c.adminToken = token } }

// WithRetry sets the retry policy of requests; zero fields take
// DefaultRetryPolicy's values. WithRetry(RetryPolicy{MaxAttempts: 1})
// turns retries off.
func WithRetry(p RetryPolicy) Option {
	return func(c *Client) { c.retry = p.withDefaults(DefaultRetryPolicy()) }
}

// WithPollPolicy sets how WaitForCommand polls (and, with its intervals,
// how a subscription backs off between reconnections); zero fields take
// DefaultPollPolicy's values.
func WithPollPolicy(p RetryPolicy) Option {
	return func(c *Client) { c.poll = p.withDefaults(DefaultPollPolicy()) }
}

// WithRequestTimeout bounds each attempt of a request (default 30 s; 0 or
// less: only the context). An attempt that times out is retried like a
// lost reply. Subscriptions are not bounded by it.
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithUserAgent sets the User-Agent header (default "sluice-go-client").
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// New returns a client of the API at baseURL ("http://localhost:8080";
// a path prefix is kept, so a proxy's "/sluice" works too).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("sluice client: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("sluice client: base URL %q: want http(s)://host[:port][/prefix]", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	c := &Client{base: u, hc: &http.Client{}, userAgent: "sluice-go-client",
		retry: DefaultRetryPolicy(), poll: DefaultPollPolicy(), timeout: 30 * time.Second, maxBody: 64 << 20}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// request is one API call, repeatable: the body is bytes.
type request struct {
	method string
	// path is the escaped path below the base URL ("/v1/log").
	path   string
	query  url.Values
	body   []byte
	ctype  string
	header http.Header
	// idempotent says a repeat cannot write twice: retried on lost
	// replies and 502/503/504, not only on 429.
	idempotent bool
	admin      bool
}

// response is a 2xx reply, read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (c *Client) url(path string, q url.Values) string {
	u := *c.base
	u.RawPath = c.base.Path + path
	u.Path, _ = url.PathUnescape(u.RawPath)
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func (c *Client) newHTTPRequest(ctx context.Context, r request) (*http.Request, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.url(r.path, r.query), body)
	if err != nil {
		return nil, err
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	if r.ctype != "" {
		req.Header.Set("Content-Type", r.ctype)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	tok := c.token
	if r.admin {
		tok = c.adminToken
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req, nil
}

// do sends r, retrying as the policy and r.idempotent allow, and returns
// the 2xx reply or the error: an API error (*Error, or a typed error
// wrapping it), a transport error, or the context's error wrapping the
// last failure.
func (c *Client) do(ctx context.Context, r request) (*response, error) {
	what := r.method + " " + r.path
	b := c.retry.backoff()
	start := time.Now()
	for attempt := 1; ; attempt++ {
		res, err := c.once(ctx, r)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sluice client: %s: %w", what, errors.Join(context.Cause(ctx), err))
		}
		wait, retry := retryable(err, r.idempotent)
		if !retry {
			return nil, fmt.Errorf("sluice client: %s: %w", what, err)
		}
		if d := b.NextBackOff(); wait <= 0 {
			wait = d
		}
		if attempt >= c.retry.MaxAttempts || (c.retry.MaxElapsed > 0 && time.Since(start)+wait > c.retry.MaxElapsed) {
			return nil, fmt.Errorf("sluice client: %s: giving up after %d attempts: %w", what, attempt, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("sluice client: %s: %w", what, errors.Join(context.Cause(ctx), err))
		case <-t.C:
		}
	}
}

// once is one attempt.
func (c *Client) once(ctx context.Context, r request) (*response, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	req, err := c.newHTTPRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, &transportError{err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody))
	if err != nil {
		return nil, &transportError{err: fmt.Errorf("read the reply: %w", err)}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return &response{status: resp.StatusCode, header: resp.Header, body: body}, nil
	}
	return nil, typed(parseProblem(resp, body))
}

// transportError is a request that got no HTTP reply: connection refused
// or reset, a timeout, a reply cut short. The request may or may not have
// been served.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// retryable says whether err may be retried and after how long the server
// asked (0: the backoff decides). A 429 is always retried: the API answers
// it before reading the request. Lost replies and 502/503/504 are retried
// only for idempotent requests. No other status is.
func retryable(err error, idempotent bool) (time.Duration, bool) {
	var te *transportError
	if errors.As(err, &te) {
		return 0, idempotent
	}
	var ae *Error
	if !errors.As(err, &ae) {
		return 0, false
	}
	switch ae.Status {
	case http.StatusTooManyRequests:
		return ae.RetryAfter, true
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		if !idempotent {
			return 0, false
		}
		return ae.RetryAfter, true
	}
	return 0, false
}

// parseRetryAfter reads Retry-After: seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// decode unmarshals a reply body into v.
func decode(res *response, v any) error {
	if err := json.Unmarshal(res.body, v); err != nil {
		return fmt.Errorf("sluice client: decode the %d reply: %w", res.status, err)
	}
	return nil
}

// jsonBody marshals v without HTML escaping.
func jsonBody(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("sluice client: encode the request: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// seg escapes one path segment: every byte but unreserved ones, so "/",
// "%" and ":" in ids stay inside the segment, and the dots of a segment
// that is only "." or "..", which routers and URL resolution would remove
// as a dot segment (RFC 3986, 5.2.4).
func seg(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}
