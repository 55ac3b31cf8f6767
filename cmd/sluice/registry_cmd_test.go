package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/testenv"
)

func TestRegistryShowAndPrune(t *testing.T) {
	ctx := context.Background()
	url, pool := testenv.NewMigratedDatabase(t)
	t.Setenv("DATABASE_URL", url)
	reg, err := registry.New(pool, registry.Options{Owner: "cli-test"})
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	res, err := reg.Claim(ctx, registry.ClaimRequest{Handler: "instanceworker", EventID: id, AggregateID: "db:c:1", Seq: 1, Policy: registry.SkipStale})
	if err != nil || res.Kind != registry.Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	if err := reg.MarkDone(ctx, res.Lease, registry.Rejected("instance exists")); err != nil {
		t.Fatal(err)
	}

	out, _, err := run(t, "registry", "show", id)
	if err != nil {
		t.Fatalf("show: %v", err)
	}
	for _, want := range []string{"instanceworker", "done", "instance exists", id} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
	_, _, err = run(t, "registry", "show", uuid.NewString())
	var ex *exitError
	if !errors.As(err, &ex) || ex.code != 3 {
		t.Fatalf("show of an unknown event: want exit 3, got %v", err)
	}

	out, _, err = run(t, "registry", "prune")
	if err != nil || !strings.Contains(out, "0 rows") {
		t.Fatalf("prune with 7-day retention must keep a fresh row: %q %v", out, err)
	}
	out, _, err = run(t, "registry", "prune", "--older-than", "1ns")
	if err != nil || !strings.Contains(out, "1 rows") {
		t.Fatalf("prune --older-than 1ns: %q %v", out, err)
	}
	if rows, err := reg.Get(ctx, id); err != nil || len(rows) != 0 {
		t.Fatalf("after prune: %d rows, %v", len(rows), err)
	}
}
