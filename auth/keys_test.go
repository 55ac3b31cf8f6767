package auth_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/internal/testenv"
)

func grants(t *testing.T, ss ...string) []auth.Grant {
	t.Helper()
	var out []auth.Grant
	for _, s := range ss {
		g, err := auth.ParseGrant(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	}
	return out
}

func TestKeysLifecycle(t *testing.T) {
	ctx := context.Background()
	_, pool := testenv.NewMigratedDatabase(t)
	keys := auth.NewKeys(pool, auth.KeysOptions{Refresh: time.Hour})
	authn := auth.NewAuthenticator(auth.Options{Keys: keys, Required: true})
	key, secret, err := keys.Create(ctx, auth.CreateRequest{Principal: "team-a", Grants: grants(t, "append,read=stream:Order/a-*"), By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, auth.KeyPrefix+key.ID+"_") {
		t.Fatalf("secret %q does not name key %s", secret, key.ID)
	}
	var stored []byte
	if err := pool.QueryRow(ctx, `SELECT secret_sha256 FROM sluice.auth_keys WHERE key_id = $1`, key.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(stored), secret[len(auth.KeyPrefix)+17:]) || len(stored) != 32 {
		t.Fatalf("the secret is stored in clear or not as SHA-256: %x", stored)
	}
	p, err := authn.Authenticate(ctx, "Bearer "+secret)
	if err != nil || p.Name != "team-a" || p.KeyID != key.ID {
		t.Fatalf("Authenticate: %+v, %v", p, err)
	}
	if !p.Allows(auth.OpAppend, auth.Resource{Type: "Order", ID: "a-1"}) || p.Allows(auth.OpAppend, auth.Resource{Type: "Order", ID: "b-1"}) {
		t.Error("grants not applied")
	}
	for _, bad := range []string{"", "Bearer " + secret + "x", "Bearer " + auth.KeyPrefix + "0123456789abcdef_" + secret[len(auth.KeyPrefix)+17:], "Basic " + secret} {
		if _, err := authn.Authenticate(ctx, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}

	// Rotation: the old secret works through the grace period, the new at once.
	rot, secret2, err := keys.Rotate(ctx, key.ID, time.Hour, "test")
	if err != nil {
		t.Fatal(err)
	}
	if rot.New.Principal != "team-a" || rot.New.RotatedFrom != key.ID || rot.Old.ExpiresAt == nil {
		t.Fatalf("rotation: %+v", rot)
	}
	for _, s := range []string{secret, secret2} {
		if p, err := authn.Authenticate(ctx, "Bearer "+s); err != nil || p.Name != "team-a" {
			t.Fatalf("after rotation %v", err)
		}
	}
	// Rotation without grace revokes the old key at once.
	rot2, secret3, err := keys.Rotate(ctx, rot.New.ID, 0, "test")
	if err != nil {
		t.Fatal(err)
	}
	if rot2.Old.RevokedAt == nil {
		t.Fatal("grace 0 did not revoke")
	}
	if _, err := authn.Authenticate(ctx, "Bearer "+secret2); !errors.Is(err, auth.ErrInvalid) {
		t.Fatalf("rotated-out key: %v", err)
	}
	if _, _, err := keys.Rotate(ctx, rot.New.ID, 0, "test"); !errors.Is(err, auth.ErrKeyRevoked) {
		t.Fatalf("rotating a revoked key: %v", err)
	}
	// Revocation is at once in this process.
	if _, err := keys.Revoke(ctx, rot2.New.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := authn.Authenticate(ctx, "Bearer "+secret3); !errors.Is(err, auth.ErrInvalid) {
		t.Fatalf("revoked key: %v", err)
	}
	if _, err := keys.Revoke(ctx, "0123456789abcdef", "test"); !errors.Is(err, auth.ErrKeyNotFound) {
		t.Fatalf("unknown key: %v", err)
	}
	active, err := keys.List(ctx, auth.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	all, err := keys.List(ctx, auth.ListFilter{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(active) != 1 || active[0].ID != key.ID || len(all) != 3 {
		t.Fatalf("list: %d active (%v), %d in all", len(active), active, len(all))
	}
}

// A key revoked by another process stops working within the refresh.
func TestKeysRefresh(t *testing.T) {
	ctx := context.Background()
	_, pool := testenv.NewMigratedDatabase(t)
	here := auth.NewKeys(pool, auth.KeysOptions{Refresh: 50 * time.Millisecond})
	other := auth.NewKeys(pool, auth.KeysOptions{})
	key, secret, err := other.Create(ctx, auth.CreateRequest{Principal: "p", Grants: grants(t, "read=*"), By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	id, sec, _ := auth.SplitKey(secret)
	if _, err := here.Lookup(ctx, id, sec); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Revoke(ctx, key.ID, "test"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := here.Lookup(ctx, id, sec); errors.Is(err, auth.ErrInvalid) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the revoked key still works after 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestKeysCreateRefuses(t *testing.T) {
	ctx := context.Background()
	_, pool := testenv.NewMigratedDatabase(t)
	keys := auth.NewKeys(pool, auth.KeysOptions{})
	for _, req := range []auth.CreateRequest{
		{Principal: "admin:operator", Grants: grants(t, "read=*")},
		{Principal: "Team", Grants: grants(t, "read=*")},
		{Principal: "ok"},
		{Principal: "ok", Grants: []auth.Grant{{Ops: []auth.Operation{"drop"}, Resource: "*"}}},
	} {
		if _, _, err := keys.Create(ctx, req); err == nil {
			t.Errorf("%+v accepted", req)
		}
	}
}

func TestLimiter(t *testing.T) {
	l := auth.NewLimiter(auth.Config{AppendRate: 1, MaxSubscriptions: 1})
	ok1, _ := l.Allow("a", auth.OpAppend)
	ok2, _ := l.Allow("a", auth.OpAppend)
	ok3, after := l.Allow("a", auth.OpAppend)
	if !ok1 || !ok2 || ok3 || after <= 0 {
		t.Errorf("burst 2 then a wait: %v %v %v %v", ok1, ok2, ok3, after)
	}
	if ok, _ := l.Allow("b", auth.OpAppend); !ok {
		t.Error("another principal is limited")
	}
	if ok, _ := l.Allow("a", auth.OpCommand); !ok {
		t.Error("commands are not limited")
	}
	release, ok := l.OpenSubscription("a")
	if !ok {
		t.Fatal("first subscription refused")
	}
	if _, ok := l.OpenSubscription("a"); ok {
		t.Error("second subscription allowed")
	}
	release()
	release()
	if _, ok := l.OpenSubscription("a"); !ok {
		t.Error("subscription refused after release")
	}
	if auth.NewLimiter(auth.Config{}) != nil {
		t.Error("no limits: want nil")
	}
}

// A new key may hold admin_read or admin_act on * only (the admin API is
// not scoped): such a grant on a db or a stream opened nothing.
func TestKeysCreateRefusesScopedAdminGrants(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	keys := auth.NewKeys(pool, auth.KeysOptions{})
	tests := []struct {
		grant string
		ok    bool
	}{
		{"admin_read=*", true},
		{"admin_read,admin_act=*", true},
		{"*=*", true},
		{"read,command=db:orders", true},
		{"admin_act=db:orders", false},
		{"admin_read=stream:Order/eu-*", false},
		{"*=db:orders", true},
		{"append,read,subscribe,command,admin_read=db:orders", false},
	}
	for _, tc := range tests {
		t.Run(tc.grant, func(t *testing.T) {
			_, _, err := keys.Create(t.Context(), auth.CreateRequest{Principal: "p", Grants: grants(t, tc.grant), By: "t"})
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok %t", err, tc.ok)
			}
		})
	}
}
