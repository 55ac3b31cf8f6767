package schema_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/schema"
)

const (
	v1 = `{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number"}},"required":["id","total"],"additionalProperties":false}`
	v2 = `{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number"},"note":{"type":"string"}},"required":["id","total"],"additionalProperties":false}`
	// v3 drops the required total: not BACKWARD (closed model), not FORWARD.
	v3 = `{"type":"object","properties":{"id":{"type":"string"},"note":{"type":"string"}},"required":["id"],"additionalProperties":false}`
)

func TestRegistryLifecycle(t *testing.T) {
	ctx := context.Background()
	_, pool := testenv.NewMigratedDatabase(t)
	r := schema.New(pool, schema.Config{}, nil)
	steps := []struct {
		name    string
		do      func() (any, error)
		want    string // in the result or the error
		wantErr bool
	}{
		{"register v1", func() (any, error) { return r.Register(ctx, "OrderPlaced", []byte(v1), schema.RegisterOptions{}) }, "Version:1 Compatibility:BACKWARD Existing:false", false},
		{"same document again, other spacing", func() (any, error) {
			return r.Register(ctx, "OrderPlaced", []byte(strings.ReplaceAll(v1, ",", ", ")), schema.RegisterOptions{})
		}, "Version:1 Compatibility:BACKWARD Existing:true", false},
		{"v2 adds an optional property to a closed model", func() (any, error) {
			return r.Register(ctx, "OrderPlaced", []byte(v2), schema.RegisterOptions{})
		}, "Version:2", false},
		{"v3 breaks BACKWARD", func() (any, error) { return r.Register(ctx, "OrderPlaced", []byte(v3), schema.RegisterOptions{}) },
			"v3 of OrderPlaced breaks BACKWARD compatibility: v3 removes property `total` from a closed content model", true},
		{"v3 under FORWARD names the readers", func() (any, error) {
			return r.Register(ctx, "OrderPlaced", []byte(v3), schema.RegisterOptions{Compatibility: schema.Forward, DryRun: true})
		}, "v3 removes required property `total` that v2 readers need", true},
		{"invalid schema", func() (any, error) {
			return r.Register(ctx, "OrderPlaced", []byte(`{"type":"strin"}`), schema.RegisterOptions{})
		}, "invalid JSON Schema", true},
		{"invalid event type", func() (any, error) { return r.Register(ctx, "order placed", []byte(v1), schema.RegisterOptions{}) }, "[A-Za-z0-9][A-Za-z0-9._-]{0,127}", true},
		{"NONE accepts v3", func() (any, error) {
			return r.Register(ctx, "OrderPlaced", []byte(v3), schema.RegisterOptions{Compatibility: schema.None})
		}, "Version:3 Compatibility:NONE", false},
		{"delete v3", func() (any, error) { return r.Delete(ctx, "OrderPlaced", 3, false) }, "[3]", false},
		{"delete v3 again", func() (any, error) { return r.Delete(ctx, "OrderPlaced", 3, false) }, "no schema version 3", true},
		{"the next version is 4, never 3 again", func() (any, error) {
			return r.Register(ctx, "OrderPlaced", []byte(`{"type":"object"}`), schema.RegisterOptions{})
		}, "Version:4", false},
		{"show the latest", func() (any, error) { s, err := r.Get(ctx, "OrderPlaced", 0); return string(s.Schema), err }, `{"type":"object"}`, false},
		{"show v1 byte for byte", func() (any, error) { s, err := r.Get(ctx, "OrderPlaced", 1); return string(s.Schema), err }, v1, false},
		{"show unknown", func() (any, error) { return r.Get(ctx, "Nope", 0) }, "Nope has no registered schema", true},
		{"list", func() (any, error) { return r.Types(ctx) }, "EventType:OrderPlaced Compatibility:NONE Versions:[1 2 4] Latest:4", false},
		{"check a candidate", func() (any, error) { return r.Check(ctx, "OrderPlaced", []byte(v2)) }, "Compatible:true", false},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			got, err := st.do()
			if (err != nil) != st.wantErr {
				t.Fatalf("err = %v, want error %v (result %+v)", err, st.wantErr, got)
			}
			text := strings.TrimSpace(strings.ReplaceAll(sprint(got), "\n", " "))
			if err != nil {
				text = err.Error()
			}
			if !strings.Contains(text, st.want) {
				t.Fatalf("got %s, want it to contain %s", text, st.want)
			}
		})
	}
	var ie *schema.IncompatibleError
	_, err := r.Register(ctx, "Other", []byte(v1), schema.RegisterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(ctx, "Other", []byte(v3), schema.RegisterOptions{}); !errors.As(err, &ie) || ie.Version != 2 || len(ie.Reasons) == 0 {
		t.Fatalf("incompatible: %#v", err)
	}
}

// TestNotFoundSaysWhatIsMissing: every not-found of the registry is
// ErrNotFound and a *NotFoundError naming what is missing, so the admin
// API names the part of the request at fault without reading the message.
func TestNotFoundSaysWhatIsMissing(t *testing.T) {
	ctx := context.Background()
	_, pool := testenv.NewMigratedDatabase(t)
	r := schema.New(pool, schema.Config{}, nil)
	if _, err := r.Register(ctx, "OrderPlaced", []byte(v1), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, missing, says string
		do                  func() error
	}{
		{"a type with no schema", schema.MissingType, "Nope has no registered schema", func() error { _, err := r.Get(ctx, "Nope", 0); return err }},
		{"a version not registered", schema.MissingVersion, "has no schema version 9", func() error { _, err := r.Get(ctx, "OrderPlaced", 9); return err }},
		{"delete of a version not registered", schema.MissingVersion, "has no schema version 9", func() error { _, err := r.Delete(ctx, "OrderPlaced", 9, true); return err }},
		{"delete of a type with no schema", schema.MissingType, "Nope has no registered schema", func() error { _, err := r.Delete(ctx, "Nope", 0, true); return err }},
		{"an upcaster not registered", schema.MissingUpcaster, "has no upcaster from version 1", func() error { _, err := r.GetUpcaster(ctx, "OrderPlaced", 1); return err }},
		{"delete of an upcaster not registered", schema.MissingUpcaster, "has no upcaster from version 1", func() error { return r.DeleteUpcaster(ctx, "OrderPlaced", 1, true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			var nf *schema.NotFoundError
			if !errors.Is(err, schema.ErrNotFound) || !errors.As(err, &nf) || nf.Missing != tc.missing {
				t.Fatalf("err = %#v, want ErrNotFound missing %q", err, tc.missing)
			}
			if !strings.HasPrefix(err.Error(), "schema: not found: ") || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("message %q, want it to say %q after schema: not found", err.Error(), tc.says)
			}
		})
	}
}

// TestValidateCachesAndRefreshes: Validate answers from memory, asks
// Postgres for the stamp at most once per refresh interval, sees another
// process's registration within the interval and its own at once.
func TestValidateCachesAndRefreshes(t *testing.T) {
	ctx := context.Background()
	url, pool := testenv.NewMigratedDatabase(t)
	var queries testenv.RoundTrips
	counted := testenv.TracedPool(t, url, &queries)
	const interval = 300 * time.Millisecond
	door := schema.New(counted, schema.Config{Mode: schema.ModeStrict, RefreshInterval: interval}, nil)
	admin := schema.New(pool, schema.Config{}, nil)

	var nre *schema.NotRegisteredError
	if _, err := door.Validate(ctx, "OrderPlaced", []byte(`{}`)); !errors.As(err, &nre) {
		t.Fatalf("strict, unregistered: %v", err)
	}
	if _, err := admin.Register(ctx, "OrderPlaced", []byte(v1), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	// A liveness budget the contract names (another process's change is
	// seen within the refresh interval), with room for a loaded machine.
	deadline := time.Now().Add(5 * interval)
	for {
		v, err := door.Validate(ctx, "OrderPlaced", []byte(`{"id":"a","total":1}`))
		if err == nil && v == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registration elsewhere was not seen within %v: %v", 5*interval, err)
		}
		time.Sleep(interval / 10)
	}
	// At most one stamp query per refresh interval begun during the loop
	// (the contract's own unit), however long 10000 validations take on a
	// loaded machine under -race: a bound that does not assume a speed.
	before, start := queries.N(), time.Now()
	for range 10000 {
		if _, err := door.Validate(ctx, "OrderPlaced", []byte(`{"id":"a","total":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	allowed := int64(time.Since(start)/interval) + 1
	if n := queries.N() - before; n > allowed {
		t.Fatalf("10000 validations made %d queries in %s, want at most %d (one per refresh interval); the cache must answer them", n, time.Since(start).Round(time.Millisecond), allowed)
	}
	_, err := door.Validate(ctx, "OrderPlaced", []byte(`{"id":"a","total":"x"}`))
	var de *schema.DataError
	if !errors.As(err, &de) || de.Pointer != "/total" || de.Keyword != "type" || de.Version != 1 {
		t.Fatalf("invalid data: %#v", err)
	}
	// Its own registration applies at once.
	if _, err := door.Register(ctx, "OrderPlaced", []byte(v2), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, err := door.Validate(ctx, "OrderPlaced", []byte(`{"id":"a","total":1,"note":"n"}`)); err != nil || v != 2 {
		t.Fatalf("after its own register: v%d %v", v, err)
	}
	// A delete elsewhere is seen after the interval.
	if _, err := admin.Delete(ctx, "OrderPlaced", 0, false); err != nil {
		t.Fatal(err)
	}
	// The same liveness budget, not a sleep: seen within the interval.
	for deadline := time.Now().Add(5 * interval); ; time.Sleep(interval / 10) {
		_, err := door.Validate(ctx, "OrderPlaced", []byte(`{}`))
		if errors.As(err, &nre) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delete elsewhere was not seen within %v: %v", 5*interval, err)
		}
	}
}

func sprint(v any) string { return fmt.Sprintf("%+v", v) }

// TestBrokenStoredSchemaRefusesOnlyItsType: a stored version that no
// longer compiles refuses its own type's events (unavailable, not
// unchecked) while every other type goes on validating.
func TestBrokenStoredSchemaRefusesOnlyItsType(t *testing.T) {
	ctx := context.Background()
	_, pool := testenv.NewMigratedDatabase(t)
	admin := schema.New(pool, schema.Config{}, nil)
	for _, typ := range []string{"OrderPlaced", "OrderShipped"} {
		if _, err := admin.Register(ctx, typ, []byte(v1), schema.RegisterOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.MustExec(t, pool, `UPDATE sluice.event_schemas SET schema = '{"type":"strin"}' WHERE event_type = 'OrderPlaced'`)
	door := schema.New(pool, schema.Config{}, nil) // a cold start: nothing compiled yet
	for _, tc := range []struct {
		typ     string
		wantErr bool
	}{{"OrderPlaced", true}, {"OrderShipped", false}, {"Unregistered", false}} {
		t.Run(tc.typ, func(t *testing.T) {
			_, err := door.Validate(ctx, tc.typ, []byte(`{"id":"a","total":1}`))
			var de *schema.DataError
			var nr *schema.NotRegisteredError
			switch {
			case tc.wantErr && (err == nil || errors.As(err, &de) || errors.As(err, &nr) || !strings.Contains(err.Error(), "does not compile")):
				t.Fatalf("broken type: %v, want a does-not-compile error", err)
			case !tc.wantErr && err != nil:
				t.Fatalf("%s: %v, want valid", tc.typ, err)
			}
		})
	}
}
