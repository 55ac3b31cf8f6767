package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/auth"
)

// issuer is a local OIDC issuer: a JWKS endpoint whose keys can rotate.
type issuer struct {
	mu    sync.Mutex
	keys  map[string]*rsa.PrivateKey
	reads atomic.Int32
	srv   *httptest.Server
}

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	is := &issuer{keys: map[string]*rsa.PrivateKey{}}
	is.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		is.reads.Add(1)
		is.mu.Lock()
		defer is.mu.Unlock()
		var keys []map[string]string
		for kid, k := range is.keys {
			b64 := base64.RawURLEncoding.EncodeToString
			keys = append(keys, map[string]string{"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
				"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": keys})
	}))
	t.Cleanup(is.srv.Close)
	return is
}

func (is *issuer) addKey(t *testing.T, kid string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is.mu.Lock()
	is.keys[kid] = k
	is.mu.Unlock()
}

func (is *issuer) removeKey(kid string) {
	is.mu.Lock()
	delete(is.keys, kid)
	is.mu.Unlock()
}

func (is *issuer) sign(t *testing.T, kid string, claims jwt.MapClaims) string {
	t.Helper()
	is.mu.Lock()
	k := is.keys[kid]
	is.mu.Unlock()
	if k == nil {
		var err error
		if k, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			t.Fatal(err)
		}
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func oidcConfig(is *issuer) auth.Config {
	c := auth.DefaultConfig()
	c.OIDCIssuer, c.OIDCAudience, c.OIDCJWKSURL = "https://idp.example", "sluice", is.srv.URL
	return c
}

func claims(mut func(jwt.MapClaims)) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{"iss": "https://idp.example", "aud": "sluice", "sub": "alice", "iat": now.Unix(),
		"exp": now.Add(time.Hour).Unix(), "sluice_grants": []string{"append,read=stream:Order/a-*"}}
	if mut != nil {
		mut(c)
	}
	return c
}

// JWTs of a local issuer: accepted when signed by a key of its JWKS for
// the right issuer and audience and in time (within the clock skew);
// refused otherwise, with the reason; a key rotation of the issuer is
// picked up without a restart.
func TestOIDCBearerJWTs(t *testing.T) {
	is := newIssuer(t)
	is.addKey(t, "k1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o, err := auth.NewOIDC(ctx, oidcConfig(is), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	authn := auth.NewAuthenticator(auth.Options{OIDC: o, Tokens: []string{"static-token"}})
	p, err := authn.Authenticate(ctx, "Bearer "+is.sign(t, "k1", claims(nil)))
	if err != nil || p.Name != "oidc:alice" {
		t.Fatalf("valid JWT: %+v %v", p, err)
	}
	if !p.Allows(auth.OpAppend, auth.Resource{Type: "Order", ID: "a-1"}) || p.Allows(auth.OpAppend, auth.Resource{Type: "Order", ID: "b-1"}) {
		t.Fatal("grants of the claim not applied")
	}
	if p, err := authn.Authenticate(ctx, "Bearer static-token"); err != nil || p.Name != "api-token:1" {
		t.Fatalf("static token beside OIDC: %v", err)
	}
	past := time.Now().Add(-2 * time.Hour)
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(nil))
	hs.Header["kid"] = "k1"
	hsTok, _ := hs.SignedString([]byte("k1"))
	none := jwt.NewWithClaims(jwt.SigningMethodNone, claims(nil))
	none.Header["kid"] = "k1"
	noneTok, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	es := jwt.NewWithClaims(jwt.SigningMethodES256, claims(nil))
	es.Header["kid"] = "k1"
	esTok, _ := es.SignedString(ec)
	refused := map[string]string{
		"expired":          is.sign(t, "k1", claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-2 * time.Minute).Unix() })),
		"no exp":           is.sign(t, "k1", claims(func(c jwt.MapClaims) { delete(c, "exp") })),
		"not yet valid":    is.sign(t, "k1", claims(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(5 * time.Minute).Unix() })),
		"issued in future": is.sign(t, "k1", claims(func(c jwt.MapClaims) { c["iat"] = time.Now().Add(5 * time.Minute).Unix() })),
		"wrong audience":   is.sign(t, "k1", claims(func(c jwt.MapClaims) { c["aud"] = "someone-else" })),
		"wrong issuer":     is.sign(t, "k1", claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" })),
		"no subject":       is.sign(t, "k1", claims(func(c jwt.MapClaims) { delete(c, "sub") })),
		"bad grants":       is.sign(t, "k1", claims(func(c jwt.MapClaims) { c["sluice_grants"] = []string{"drop=*"} })),
		"old":              is.sign(t, "k1", claims(func(c jwt.MapClaims) { c["iat"], c["exp"] = past.Unix(), past.Add(time.Hour).Unix() })),
		"hmac with kid":    hsTok,
		"alg none":         noneTok,
		"es256 for rsa":    esTok,
		"tampered":         is.sign(t, "k1", claims(nil))[:40] + "x" + is.sign(t, "k1", claims(nil))[41:],
	}
	for name, tok := range refused {
		if p, err := authn.Authenticate(ctx, "Bearer "+tok); !errors.Is(err, auth.ErrInvalid) {
			t.Errorf("%s: accepted as %+v (%v)", name, p, err)
		}
	}
	// Within the clock skew (60 s) an expired token still passes.
	skewed := is.sign(t, "k1", claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-20 * time.Second).Unix() }))
	if _, err := authn.Authenticate(ctx, "Bearer "+skewed); err != nil {
		t.Fatalf("within the skew: %v", err)
	}
	// The issuer rotates: a new key k2 is published and k1 withdrawn. A
	// JWT of k2 makes the JWKS read again at once.
	is.addKey(t, "k2")
	is.removeKey("k1")
	if p, err := authn.Authenticate(ctx, "Bearer "+is.sign(t, "k2", claims(nil))); err != nil || p.Name != "oidc:alice" {
		t.Fatalf("JWT of the rotated key: %v", err)
	}
	if _, err := authn.Authenticate(ctx, "Bearer "+is.sign(t, "k1", claims(nil))); !errors.Is(err, auth.ErrInvalid) {
		t.Fatalf("a JWT of the withdrawn key: %v", err)
	}
	if _, err := authn.Authenticate(ctx, "Bearer "+is.sign(t, "k9", claims(nil))); !errors.Is(err, auth.ErrInvalid) {
		t.Fatalf("a JWT of an unknown key: %v", err)
	}
	if n := is.reads.Load(); n > 3 {
		t.Fatalf("%d JWKS reads: unknown key ids must not each cause one", n)
	}
}

func TestOIDCConfig(t *testing.T) {
	c := auth.DefaultConfig()
	c.OIDCIssuer = "https://idp.example"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "SLUICE_AUTH_OIDC_AUDIENCE") {
		t.Fatalf("issuer alone: %v", err)
	}
	c.OIDCAudience, c.OIDCJWKSURL = "sluice", "http://idp.example/jwks"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "https") {
		t.Fatalf("http JWKS: %v", err)
	}
	c.OIDCJWKSURL = "http://127.0.0.1:9/jwks"
	if err := c.Validate(); err != nil {
		t.Fatalf("local http JWKS: %v", err)
	}
}
