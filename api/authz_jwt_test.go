package api

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/auth"
)

// OIDC bearer JWTs on the API: a valid one acts within the grants of its
// claim; an expired or wrong-audience one is 401 and stores nothing.
func TestAccessControlJWT(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{"kty": "RSA", "kid": "k1", "alg": "RS256",
			"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}}})
	}))
	t.Cleanup(jwks.Close)
	c := auth.DefaultConfig()
	c.OIDCIssuer, c.OIDCAudience, c.OIDCJWKSURL = "https://idp.example", "sluice", jwks.URL
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	oidc, err := auth.NewOIDC(ctx, c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := newAuthAPI(t, auth.Config{}, nil)
	h, err := New(Config{}, Deps{Store: a.store, Registry: a.reg, Sequences: a.store, Events: a.store,
		Auth: auth.NewAuthenticator(auth.Options{OIDC: oidc, Required: true})})
	if err != nil {
		t.Fatal(err)
	}
	a.h = h
	sign := func(mut func(jwt.MapClaims)) string {
		now := time.Now()
		cl := jwt.MapClaims{"iss": "https://idp.example", "aud": "sluice", "sub": "svc-orders", "iat": now.Unix(),
			"exp": now.Add(time.Hour).Unix(), "sluice_grants": []string{"append,read=stream:Order/a-*"}}
		if mut != nil {
			mut(cl)
		}
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, cl)
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return "Authorization: Bearer " + s
	}
	body := func() string { return appendBody("any", newEvents(1, "PLACED")...) }
	a.do("POST", "/v1/streams/Order/a-1/events", body(), sign(nil)).expect(t, 201, "")
	evs, _ := a.store.Stream(ctx, "Order", "a-1", 1, 0, "")
	if p, _ := evs[0].Envelope.Metadata.String("principal"); p != "oidc:svc-orders" {
		t.Fatalf("principal %q", p)
	}
	before := a.appendsCount()
	a.do("POST", "/v1/streams/Order/b-1/events", body(), sign(nil)).expect(t, 403, CodeForbidden)
	for name, h := range map[string]string{
		"expired":        sign(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-5 * time.Minute).Unix() }),
		"wrong audience": sign(func(c jwt.MapClaims) { c["aud"] = "another-api" }),
		"wrong issuer":   sign(func(c jwt.MapClaims) { c["iss"] = "https://other.example" }),
	} {
		r := a.do("POST", "/v1/streams/Order/a-1/events", body(), h)
		if r.code != 401 || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: %d %s", name, r.code, r.body)
		}
	}
	if n := a.appendsCount() - before; n != 0 {
		t.Fatalf("refused JWTs stored %d events", n)
	}
}
