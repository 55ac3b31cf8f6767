package migrations_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/shared/config"
)

// Each role defaults to DATABASE_URL; roles on one URL are one database
// (one pool, one migration run), named by the variables that set it.
func TestDatabasesGroupRolesByURL(t *testing.T) {
	const a, b = "postgres://u@a/db", "postgres://u@b/db"
	type db struct {
		vars  string
		roles []migrations.Role
	}
	for _, tc := range []struct {
		name string
		cfg  migrations.PostgresConfig
		want []db
	}{
		{"DATABASE_URL alone: one database, as before the split",
			migrations.PostgresConfig{URL: a},
			[]db{{"DATABASE_URL", migrations.Roles()}}},
		{"the registry elsewhere",
			migrations.PostgresConfig{URL: a, RegistryURL: b},
			[]db{{"DATABASE_URL", []migrations.Role{migrations.RoleMain, migrations.RoleStore}}, {"REGISTRY_DATABASE_URL", []migrations.Role{migrations.RoleRegistry}}}},
		{"a role set to DATABASE_URL's own value",
			migrations.PostgresConfig{URL: a, StoreURL: a, RegistryURL: b},
			[]db{{"DATABASE_URL, EVENT_STORE_DATABASE_URL", []migrations.Role{migrations.RoleMain, migrations.RoleStore}}, {"REGISTRY_DATABASE_URL", []migrations.Role{migrations.RoleRegistry}}}},
		{"store and registry together elsewhere",
			migrations.PostgresConfig{URL: a, StoreURL: b, RegistryURL: b},
			[]db{{"DATABASE_URL", []migrations.Role{migrations.RoleMain}}, {"EVENT_STORE_DATABASE_URL, REGISTRY_DATABASE_URL", []migrations.Role{migrations.RoleStore, migrations.RoleRegistry}}}},
		{"nothing set", migrations.PostgresConfig{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.cfg.Databases()
			if len(got) != len(tc.want) {
				t.Fatalf("%d databases %+v, want %d", len(got), got, len(tc.want))
			}
			for i, d := range got {
				if d.Vars() != tc.want[i].vars || !slices.Equal(d.Roles, tc.want[i].roles) {
					t.Errorf("database %d: %s %v, want %s %v", i, d.Vars(), d.Roles, tc.want[i].vars, tc.want[i].roles)
				}
				for _, r := range d.Roles {
					if tc.cfg.URLOf(r) != d.URL {
						t.Errorf("URLOf(%s) = %q, the database's is %q", r, tc.cfg.URLOf(r), d.URL)
					}
				}
			}
		})
	}
}

// A role's URL is checked like DATABASE_URL and named by its own variable,
// never echoed.
func TestRoleURLsAreValidated(t *testing.T) {
	for _, name := range []string{"EVENT_STORE_DATABASE_URL", "REGISTRY_DATABASE_URL"} {
		t.Run(name, func(t *testing.T) {
			var c migrations.PostgresConfig
			err := config.Parse(&c, map[string]string{"DATABASE_URL": "postgres://u@a/db", name: "mysql://u:pa55word@h/db"})
			var ve *config.VarError
			if !errors.As(err, &ve) || ve.Var != name {
				t.Fatalf("want a *config.VarError naming %s, got %v", name, err)
			}
			if strings.Contains(err.Error(), "pa55word") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

// OpenPools opens one pool per distinct database of the roles asked for,
// gives roles on one URL the same pool, and refuses a role without a URL
// by its variable.
func TestOpenPoolsOnePoolPerDatabase(t *testing.T) {
	const a, b = "postgres://u@a/db", "postgres://u@b/db"
	cfg := migrations.PostgresConfig{URL: a, RegistryURL: b}
	var opened []string
	open := func(_ context.Context, d migrations.Database) (*pgxpool.Pool, error) {
		opened = append(opened, d.Vars())
		pc, err := pgxpool.ParseConfig(d.URL)
		if err != nil {
			return nil, err
		}
		return pgxpool.NewWithConfig(context.Background(), pc) // lazy: connects on first use
	}
	ps, err := migrations.OpenPools(context.Background(), cfg, open)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	if !slices.Equal(opened, []string{"DATABASE_URL", "REGISTRY_DATABASE_URL"}) {
		t.Errorf("opened %v", opened)
	}
	if ps.Main == nil || ps.Main != ps.Store || ps.Registry == nil || ps.Registry == ps.Main {
		t.Errorf("pools main %p store %p registry %p: want main = store, registry its own", ps.Main, ps.Store, ps.Registry)
	}
	opened = nil
	only, err := migrations.OpenPools(context.Background(), cfg, open, migrations.RoleRegistry)
	if err != nil {
		t.Fatal(err)
	}
	defer only.Close()
	if !slices.Equal(opened, []string{"REGISTRY_DATABASE_URL"}) || only.Main != nil || only.Store != nil {
		t.Errorf("asked for the registry only: opened %v, main %p store %p", opened, only.Main, only.Store)
	}
	if _, err := migrations.OpenPools(context.Background(), migrations.PostgresConfig{}, open, migrations.RoleStore); err == nil ||
		!strings.Contains(err.Error(), "EVENT_STORE_DATABASE_URL is not set, nor DATABASE_URL") {
		t.Errorf("no URL: %v", err)
	}
}
