package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/relay"
)

// sluice auth key create|list|rotate|revoke: the secret is printed once
// and works; list never prints it; revoke asks for --yes; every change is
// in the admin audit log.
func TestAuthKeyCommands(t *testing.T) {
	ctx := context.Background()
	pool := envDatabase(t)
	out, _, err := run(t, "auth", "key", "create", "--principal", "team-orders", "--grant", "append,read=stream:Order/eu-*",
		"--grant", "command=db:orders", "--description", "orders service", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var created admin.KeyCreated
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	keys := auth.NewKeys(pool, auth.KeysOptions{})
	authn := auth.NewAuthenticator(auth.Options{Keys: keys, Required: true})
	p, err := authn.Authenticate(ctx, "Bearer "+created.Secret)
	if err != nil || p.Name != "team-orders" || !p.Allows(auth.OpCommand, auth.Resource{Type: "Instance", ID: "orders:c:1"}) {
		t.Fatalf("the new key: %+v %v", p, err)
	}
	out, _, err = run(t, "auth", "key", "list")
	if err != nil || !strings.Contains(out, created.Key.ID) || !strings.Contains(out, "append,read=stream:Order/eu-*") || strings.Contains(out, created.Secret) {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if _, _, err := run(t, "auth", "key", "create", "--principal", "x", "--grant", "drop=*"); err == nil {
		t.Fatal("an unknown operation was accepted")
	}
	out, _, err = run(t, "auth", "key", "rotate", created.Key.ID, "--grace", "1h")
	if err != nil || !strings.Contains(out, "replaces "+created.Key.ID+", which works until") {
		t.Fatalf("rotate: %v\n%s", err, out)
	}
	newSecret := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
	authn = auth.NewAuthenticator(auth.Options{Keys: auth.NewKeys(pool, auth.KeysOptions{}), Required: true})
	for _, s := range []string{created.Secret, newSecret} {
		if _, err := authn.Authenticate(ctx, "Bearer "+s); err != nil {
			t.Fatalf("during the grace period: %v", err)
		}
	}
	_, _, err = run(t, "auth", "key", "revoke", created.Key.ID)
	var ex *exitError
	if !errors.As(err, &ex) || ex.code != exitNeedsConfirmation {
		t.Fatalf("revoke without --yes: %v", err)
	}
	if _, _, err := run(t, "auth", "key", "revoke", created.Key.ID, "--yes"); err != nil {
		t.Fatal(err)
	}
	fresh := auth.NewAuthenticator(auth.Options{Keys: auth.NewKeys(pool, auth.KeysOptions{}), Required: true})
	if _, err := fresh.Authenticate(ctx, "Bearer "+created.Secret); !errors.Is(err, auth.ErrInvalid) {
		t.Fatalf("revoked key: %v", err)
	}
	recs := cliAudit(t, pool)
	var actions []string
	for _, r := range recs {
		actions = append(actions, r.Action)
		if strings.Contains(string(r.Detail), created.Secret) || strings.Contains(string(r.Detail), newSecret) {
			t.Fatalf("the audit log holds a secret: %s", r.Detail)
		}
	}
	if strings.Join(actions, " ") != "auth.key.create auth.key.rotate auth.key.revoke" {
		t.Fatalf("CLI audit records: %v", actions)
	}
}

// sluice auth key create refuses what would make a key other than the one
// asked for, and makes none: a negative --expires-in made a key that
// never expires.
func TestAuthKeyCreateRefusals(t *testing.T) {
	ctx := context.Background()
	pool := envDatabase(t)
	keys := auth.NewKeys(pool, auth.KeysOptions{})
	cases := []struct {
		name     string
		args     []string
		mentions string
	}{
		{"negative expiry", []string{"--grant", "read=*", "--expires-in", "-5h"}, "--expires-in"},
		{"unknown operation", []string{"--grant", "drop=*"}, "drop"},
		{"no grant", nil, "--grant"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			principal := "refused-" + strings.ReplaceAll(c.name, " ", "-")
			_, _, err := run(t, append([]string{"auth", "key", "create", "--principal", principal}, c.args...)...)
			if err == nil || !strings.Contains(err.Error(), c.mentions) {
				t.Fatalf("err %v, want a refusal naming %q", err, c.mentions)
			}
			made, err := keys.List(ctx, auth.ListFilter{Principal: principal, All: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(made) != 0 {
				t.Fatalf("a refused create made %d key(s): %+v", len(made), made)
			}
		})
	}
}

// A record that does not exist exits 3 like a missing group, letter or
// registry row (docs/operator-commands.md#names-that-do-not-exist): an
// API key end to end, and the errors of a missing parked record and event
// as the commands return them. They exited 1.
func TestMissingRecordsExitNotFound(t *testing.T) {
	envDatabase(t)
	_, _, err := run(t, "auth", "key", "revoke", "0000000000000000", "--yes")
	cases := []struct {
		name string
		err  error
	}{
		{"auth key revoke of a missing key", err},
		{"a missing parked record", fmt.Errorf("%w: relay default, position 5", relay.ErrParkedNotFound)},
		{"a missing event", missingEvent(fmt.Errorf("%w: event 00000000-0000-4000-8000-000000000000", eventstore.ErrNotFound))},
		{"a missing API key", fmt.Errorf("key x: %w", auth.ErrKeyNotFound)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.err == nil {
				t.Fatal("no error")
			}
			if code := exitCode(c.err); code != exitNotFound {
				t.Errorf("exit code %d for %v, want %d", code, c.err, exitNotFound)
			}
		})
	}
	// A segment missing under an indexed event is damage, not a name
	// that does not exist.
	t.Run("a missing segment", func(t *testing.T) {
		err := missingEvent(fmt.Errorf("%w: segment s: %w", eventstore.ErrNotFound, objstore.ErrNotFound))
		if code := exitCode(err); code != 1 {
			t.Errorf("exit code %d for %v, want 1", code, err)
		}
	})
}

// cliAudit reads the admin audit log through admin's Go API and returns
// the records of sluice commands (who cli:…), oldest first.
func cliAudit(t *testing.T, pool *pgxpool.Pool) []admin.AuditRecord {
	t.Helper()
	cfg, err := sluiceconfig.Load(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Config{Owner: "t"}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admin.New(admin.Config{Process: cfg}, admin.Deps{Pool: pool, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := adm.Audit(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []admin.AuditRecord
	for _, r := range slices.Backward(recs) {
		if strings.HasPrefix(r.Who, "cli:") {
			out = append(out, r)
		}
	}
	return out
}
