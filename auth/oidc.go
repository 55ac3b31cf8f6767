package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// OIDC verifies bearer JWTs of an OpenID Connect issuer
// (docs/security.md#oidc-bearer-tokens): the signature with a key of the
// issuer's JWKS (github.com/MicahParks/jwkset fetches and refreshes it,
// github.com/golang-jwt/jwt/v5 verifies; no crypto here), the issuer, the
// audience, exp (required), nbf and iat within the clock skew. The
// principal is oidc:{principal claim}; its grants are the grants claim.
type OIDC struct {
	c      Config
	keys   jwkset.Storage
	parser *jwt.Parser
}

// signingMethods are the algorithms accepted: asymmetric only, so that a
// public key can never serve as an HMAC secret.
var signingMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// unknownKIDRefresh bounds the JWKS reads a JWT with an unknown key id
// causes.
const unknownKIDRefresh = 10 * time.Second

// NewOIDC starts reading the JWKS (until ctx ends). A first read that
// fails is logged and retried at the refresh interval or on the first JWT
// (the API starts anyway; JWTs are refused until the keys are read).
func NewOIDC(ctx context.Context, c Config, client *http.Client, log *slog.Logger) (*OIDC, error) {
	if !c.OIDCEnabled() {
		return nil, errors.New("auth: OIDC is not configured (SLUICE_AUTH_OIDC_ISSUER)")
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	st, err := jwkset.NewStorageFromHTTP(c.OIDCJWKSURL, jwkset.HTTPClientStorageOptions{
		Client: client, Ctx: ctx, HTTPTimeout: 10 * time.Second, NoErrorReturnFirstHTTPReq: true,
		RefreshInterval: c.OIDCJWKSRefresh,
		RefreshErrorHandler: func(ctx context.Context, err error) {
			log.Warn("auth: reading the OIDC JWKS failed; the keys read last stay in use", "url", c.OIDCJWKSURL, "err", err)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("auth: OIDC JWKS: %w", err)
	}
	keys, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs:          map[string]jwkset.Storage{c.OIDCJWKSURL: st},
		RateLimitWaitMax:  time.Second,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(unknownKIDRefresh), 1),
	})
	if err != nil {
		return nil, fmt.Errorf("auth: OIDC JWKS: %w", err)
	}
	p := jwt.NewParser(jwt.WithValidMethods(signingMethods), jwt.WithIssuer(c.OIDCIssuer), jwt.WithAudience(c.OIDCAudience),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(c.OIDCClockSkew))
	return &OIDC{c: c, keys: keys, parser: p}, nil
}

// LooksLikeJWT reports whether tok has the three parts of a compact JWS.
func LooksLikeJWT(tok string) bool { return strings.Count(tok, ".") == 2 }

// Verify returns the principal of a JWT, or an error wrapping ErrInvalid
// that says why.
func (o *OIDC) Verify(ctx context.Context, tok string) (*Principal, error) {
	claims := jwt.MapClaims{}
	_, err := o.parser.ParseWithClaims(tok, claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			return nil, errors.New("the JWT names no key id (kid)")
		}
		k, err := o.keys.KeyRead(ctx, kid)
		if err != nil {
			return nil, fmt.Errorf("no key %q in the issuer's JWKS", kid)
		}
		if alg := k.Marshal().ALG.String(); alg != "" && alg != t.Method.Alg() {
			return nil, fmt.Errorf("key %q is for %s, the JWT is signed with %s", kid, alg, t.Method.Alg())
		}
		return k.Key(), nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	name, _ := claims[o.c.OIDCPrincipalClaim].(string)
	if name == "" || len(name) > 256 || strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return nil, fmt.Errorf("%w: the JWT's %s claim is missing or not a printable string of at most 256 bytes", ErrInvalid, o.c.OIDCPrincipalClaim)
	}
	p := &Principal{Name: "oidc:" + name}
	raw, ok := claims[o.c.OIDCGrantsClaim]
	if !ok {
		return p, nil // authenticated, granted nothing: every request is 403
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: the JWT's %s claim is not an array of grants", ErrInvalid, o.c.OIDCGrantsClaim)
	}
	for _, v := range list {
		s, _ := v.(string)
		g, err := ParseGrant(s)
		if err != nil {
			return nil, fmt.Errorf("%w: the JWT's %s claim: %v", ErrInvalid, o.c.OIDCGrantsClaim, err)
		}
		p.Grants = append(p.Grants, g)
	}
	return p, nil
}

func checkJWKSURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		host := u.Hostname()
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			return nil
		}
		return errors.New("the JWKS must be fetched over https (http only on localhost)")
	}
	return fmt.Errorf("scheme %q: want https", u.Scheme)
}
