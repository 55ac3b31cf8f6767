package migrations_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/migrations"
)

// Many processes may run `sluice migrate up` at once (a Job plus services at
// start-up): each migration must be applied exactly once and every runner
// must succeed; a second run applies nothing.
func TestUpIsLockedAndIdempotent(t *testing.T) {
	ctx := context.Background()
	url := testenv.NewDatabase(t)
	const runners = 6
	var wg sync.WaitGroup
	applied := make([]int, runners)
	errs := make([]error, runners)
	for i := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := migrations.Open(url)
			if err != nil {
				errs[i] = err
				return
			}
			defer db.Close()
			res, err := migrations.Up(ctx, db, nil)
			applied[i], errs[i] = len(res), err
		}()
	}
	wg.Wait()
	total := 0
	for i := range runners {
		if errs[i] != nil {
			t.Fatalf("runner %d: %v", i, errs[i])
		}
		total += applied[i]
	}
	db, err := migrations.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := migrations.StatusOf(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if total != len(st) {
		t.Fatalf("%d migrations applied across runners, want exactly %d (one each)", total, len(st))
	}
	for _, s := range st {
		if !s.Applied {
			t.Errorf("migration %d %s not applied", s.Version, s.Name)
		}
	}
	again, err := migrations.Up(ctx, db, nil)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Up applied %d, err %v", len(again), err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `select count(*) from sluice.schema_migrations where version_id > 0`).Scan(&n); err != nil || n != len(st) {
		t.Fatalf("version rows %d (want %d), err %v", n, len(st), err)
	}
}

func TestOpenRejectsBadURL(t *testing.T) {
	if _, err := migrations.Open("postgres://u:hunter2@host:notaport/db"); err == nil {
		t.Fatal("want an error")
	} else if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("password leaked: %v", err)
	}
}

// The event store's reservation rules live in Go: migration 00022 drops the
// functions that restated them in SQL, and a migrated schema has neither.
func TestReservationRulesAreNotInTheSchema(t *testing.T) {
	db := openDB(t)
	up(t, db)
	rows, err := db.QueryContext(context.Background(), `SELECT p.oid::regprocedure::text FROM pg_proc p
		WHERE p.pronamespace = 'sluice'::regnamespace AND p.proname IN ('eventstore_reserve', 'eventstore_slot_refusal')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		t.Errorf("the migrated schema still defines %s", name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
