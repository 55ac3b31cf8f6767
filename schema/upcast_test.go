package schema_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/schema/schematest"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/failure"
)

// TestParseUpcaster: an upcaster file that does not parse or compile is
// refused with the file, line and column of the fault.
func TestParseUpcaster(t *testing.T) {
	const ex = "examples:\n  - data: {id: a}\n"
	cases := []struct{ name, file, want string }{
		{"no event type", "from: 1\n" + ex, "u.yaml:1:1: event_type is required"},
		{"no from", "event_type: A\n" + ex, "from is required"},
		{"from 0", "event_type: A\nfrom: 0\n" + ex, "u.yaml:2:7: from must be"},
		{"no examples", "event_type: A\nfrom: 1\n", "examples is required"},
		{"unknown key", "event_type: A\nfrom: 1\nrename: {a: b}\n" + ex, `u.yaml:3:1: unknown key "rename"`},
		{"CEL error points into the expression", "event_type: A\nfrom: 1\nset:\n  b: event.data.a + + 1\n" + ex,
			`u.yaml:4:21: set b: expression "event.data.a + + 1", line 1 column 16: Syntax error`},
		{"undeclared variable", "event_type: A\nfrom: 1\nset:\n  b: doc.a\n" + ex, "undeclared reference to 'doc'"},
		{"overlapping fields", "event_type: A\nfrom: 1\nset:\n  a.b: '1'\nunset: [a]\n" + ex, `u.yaml:5:9: field "a" overlaps "a.b"`},
		{"bad path", "event_type: A\nfrom: 1\nunset: [a..b]\n" + ex, `field "a..b" must be a dotted path`},
		{"example without data", "event_type: A\nfrom: 1\nexamples:\n  - want: {id: a}\n", "an example needs data:"},
		{"example not an object", "event_type: A\nfrom: 1\nexamples:\n  - data: [1]\n", "data must be an object"},
		{"two documents", "event_type: A\nfrom: 1\n" + ex + "---\nevent_type: B\n", "a file holds one upcaster"},
		{"bad event type", "event_type: 'a b'\nfrom: 1\n" + ex, "u.yaml:1:13:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := schema.ParseUpcaster("u.yaml", []byte(tc.file))
			var ue *schema.UpcasterError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want an *UpcasterError containing %q", err, tc.want)
			}
		})
	}
}

func mustCompile(t *testing.T, raw string) *schema.Compiled {
	t.Helper()
	c, err := schema.Compile([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readExample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(schematest.ExampleDir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestUpcasterApply: the result is the input with the unset fields
// removed and the set ones set, every expression seeing the input; the
// fields carried over keep their bytes (a large integer keeps its digits).
func TestUpcasterApply(t *testing.T) {
	u, err := schema.ParseUpcaster("u.yaml", []byte(`event_type: A
from: 1
set:
  amount: event.data.total
  address: '{"city": event.data.city, "zip": event.data.zip}'
  meta.note: '"v" + string(event.schema_version) + " " + event.metadata.region'
unset: [total, city, zip]
examples:
  - data: {total: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, data, want, err string
	}{
		{"rename, nest, new object", `{"id":12345678901234567890,"total":2.50,"city":"Oslo","zip":"0150"}`,
			`{"address":{"city":"Oslo","zip":"0150"},"amount":2.5,"id":12345678901234567890,"meta":{"note":"v1 eu"}}`, ""},
		{"existing object is extended", `{"total":1,"city":"x","zip":"y","meta":{"keep":true}}`,
			`{"address":{"city":"x","zip":"y"},"amount":1,"meta":{"keep":true,"note":"v1 eu"}}`, ""},
		{"a missing field fails the expression", `{"city":"x","zip":"y"}`, "", `set amount at u.yaml:4:11: expression "event.data.total" failed: no such key: total`},
		{"a non-object in the way", `{"total":1,"city":"x","zip":"y","meta":3}`, "", `set meta.note (u.yaml:6:14): "meta" is not an object`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			md := envelope.Metadata{}
			md.SetString("region", "eu")
			out, err := u.Apply(envelope.Envelope{EventType: "A", SchemaVersion: 1, Data: []byte(tc.data), Metadata: md})
			if tc.err != "" {
				var ae *schema.ApplyError
				if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want an *ApplyError containing %q", err, tc.err)
				}
				return
			}
			if err != nil || string(out) != tc.want {
				t.Fatalf("got %s, %v\nwant %s", out, err, tc.want)
			}
		})
	}
}

// TestUpcasterCheckExamples: the example's upcasters hold; an upcaster
// whose output breaks the next version, whose example input is not valid
// data of its version, or whose output differs from want is caught.
func TestUpcasterCheckExamples(t *testing.T) {
	v2 := mustCompile(t, string(readExample(t, "v2.json")))
	v3 := mustCompile(t, string(readExample(t, "v3.json")))
	good := readExample(t, "upcast-v2.yaml")
	cases := []struct {
		name string
		file string
		want []string // reasons; none: it holds
	}{
		{"the example", string(good), nil},
		{"forgets to remove total: v3 is closed", strings.Replace(string(good), "unset: [total]\n", "", 1),
			[]string{"example 1 (upcast-v2.yaml:10:5): the upcast data", "is not valid v3 data: at (the data object): additional properties 'total' not allowed (keyword additionalProperties)"}},
		{"forgets the currency v3 requires", strings.Replace(string(good), `has(event.data.currency) ? event.data.currency : "USD"`, `event.data.currency`, 1),
			[]string{"example 2 (upcast-v2.yaml:13:5): the upcaster fails: set currency", "no such key: currency"}},
		{"an input that is no v2 data", string(good) + "  - data: {order_id: o-3}\n",
			[]string{"example 3 (upcast-v2.yaml:15:5): its data is not valid v2 data: at (the data object): missing property 'total' (keyword required)"}},
		{"want differs", strings.Replace(string(good), "want: {order_id: o-2, amount: 3, currency: USD}", "want: {order_id: o-2, amount: 4, currency: USD}", 1),
			[]string{`example 2 (upcast-v2.yaml:13:5): upcast to {"amount":3,"currency":"USD","order_id":"o-2"}, want {"amount":4,"currency":"USD","order_id":"o-2"}`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u, err := schema.ParseUpcaster("upcast-v2.yaml", []byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(u.CheckExamples(v2, v3), "\n")
			if len(tc.want) == 0 && got != "" {
				t.Fatalf("reasons %q, want none", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Fatalf("reasons %q, want %q", got, w)
				}
			}
		})
	}
}

func orderEvent(version int, data string) envelope.Envelope {
	return envelope.Envelope{EventID: "00000000-0000-4000-8000-000000000001", EventType: "OrderPlaced", Kind: envelope.KindDomain,
		AggregateType: "Order", AggregateID: "o-1", SequenceNumber: 1, Position: 1, SchemaVersion: version, Data: []byte(data)}
}

// TestLatest: events are brought to the latest version through every
// step of the chain (v1→v2→v3); what needs no upcasting passes unchanged;
// a failing step or a result that breaks the latest schema is an
// *UpcastError naming the type, the versions and the upcaster.
func TestLatest(t *testing.T) {
	ctx := context.Background()
	_, pool := testenv.NewMigratedDatabase(t)
	r := schema.New(pool, schema.Config{}, nil)
	schematest.RegisterOrderPlaced(t, r)
	// Shipped's upcaster reads a field some v1 events lack.
	if _, err := r.Register(ctx, "Shipped", []byte(`{"type":"object"}`), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(ctx, "Shipped", []byte(`{"type":"object","required":["carrier"]}`), schema.RegisterOptions{Compatibility: schema.None,
		Upcaster: []byte("event_type: Shipped\nfrom: 1\nset:\n  carrier: event.data.via\nunset: [via]\nexamples:\n  - data: {via: dhl}\n"), UpcasterSource: "shipped.yaml"}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		in      envelope.Envelope
		want    string // data
		version int
		err     string
	}{
		{"v1 through both steps", orderEvent(1, `{"order_id":"o-1","total":12.5}`), `{"amount":12.5,"currency":"EUR","order_id":"o-1"}`, 3, ""},
		{"v2 without currency", orderEvent(2, `{"order_id":"o-2","total":3}`), `{"amount":3,"currency":"USD","order_id":"o-2"}`, 3, ""},
		{"v2 with currency", orderEvent(2, `{"order_id":"o-3","total":4,"currency":"GBP"}`), `{"amount":4,"currency":"GBP","order_id":"o-3"}`, 3, ""},
		{"v3 is latest: unchanged bytes", orderEvent(3, `{"order_id":"o-4", "amount":1,"currency":"EUR"}`), `{"order_id":"o-4", "amount":1,"currency":"EUR"}`, 3, ""},
		{"no recorded version: unchanged", orderEvent(0, `{"total":1}`), `{"total":1}`, 0, ""},
		{"unregistered type: unchanged", func() envelope.Envelope { e := orderEvent(1, `{"x":1}`); e.EventType = "order.shipped"; return e }(), `{"x":1}`, 1, ""},
		{"a failing upcaster", func() envelope.Envelope {
			e := orderEvent(1, `{"by":"ups"}`)
			e.EventType = "Shipped"
			return e
		}(), "", 0, "event 00000000-0000-4000-8000-000000000001 of Shipped cannot be upcast from schema v1 to v2: upcaster Shipped v1→v2 (shipped.yaml) failed: set carrier at shipped.yaml:4:12: expression \"event.data.via\" failed: no such key: via"},
		{"a result that breaks the latest schema", orderEvent(1, `{"order_id":"o-5","total":-1}`), "",
			0, "cannot be upcast from schema v1 to v3: the upcast data does not match schema v3: at /amount: minimum: got -1, want 0 (keyword minimum)"},
		// Every upcast result is validated against the latest schema on
		// read; a result that breaks it is refused with the validator's
		// reason (docs/schemas.md#upcasting-on-read).
		{"a result on the bound is valid", orderEvent(1, `{"order_id":"o-6","total":0}`), `{"amount":0,"currency":"EUR","order_id":"o-6"}`, 3, ""},
		{"a result just below the bound", orderEvent(1, `{"order_id":"o-7","total":-0.0000000000000000000001}`), "",
			0, "the upcast data does not match schema v3: at /amount: minimum: got -1×10⁻²², want 0 (keyword minimum)"},
		{"a result breaking the pattern", orderEvent(2, `{"order_id":"o-8","total":4,"currency":"eur"}`), "",
			0, `the upcast data does not match schema v3: at /currency: 'eur' does not match pattern '^[A-Z]{3}$' (keyword pattern)`},
		{"a result with a field v3 does not have", orderEvent(1, `{"order_id":"o-9","total":4,"note":"gift"}`), "",
			0, `the upcast data does not match schema v3: at (the data object): additional properties 'note' not allowed (keyword additionalProperties)`},
		{"a result with the wrong type", orderEvent(1, `{"order_id":9,"total":4}`), "",
			0, `the upcast data does not match schema v3: at /order_id: got number, want string (keyword type)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := r.Latest(ctx, tc.in)
			if tc.err != "" {
				var ue *schema.UpcastError
				if !errors.As(err, &ue) || !strings.HasSuffix(err.Error(), tc.err) {
					t.Fatalf("err %v,\nwant an *UpcastError %q", err, tc.err)
				}
				if failure.Classify(ctx, err) == failure.Outage {
					t.Fatal("an upcast failure is no outage")
				}
				return
			}
			if err != nil || string(out.Data) != tc.want || out.SchemaVersion != tc.version {
				t.Fatalf("got v%d %s, %v; want v%d %s", out.SchemaVersion, out.Data, err, tc.version, tc.want)
			}
			if tc.in.SchemaVersion != 0 && string(tc.in.Data) == tc.want && &out.Data[0] != &tc.in.Data[0] {
				t.Fatal("an event that needs no upcasting is copied")
			}
		})
	}
}

// TestUpcasterRegistry: SetUpcaster and Register --upcaster check the
// examples against the versions they join; another process sees a change
// after its refresh; deleting a version deletes the upcasters from and
// into it; a registry that never loaded reports an outage.
func TestUpcasterRegistry(t *testing.T) {
	ctx := context.Background()
	_, pool := testenv.NewMigratedDatabase(t)
	r := schema.New(pool, schema.Config{}, nil)
	other := schema.New(pool, schema.Config{RefreshInterval: 1}, nil) // another process: asks every time
	v1, v2, v3 := readExample(t, "v1.json"), readExample(t, "v2.json"), readExample(t, "v3.json")
	up1, up2 := readExample(t, "upcast-v1.yaml"), readExample(t, "upcast-v2.yaml")
	ev1 := orderEvent(1, `{"order_id":"o-1","total":12.5}`)
	steps := []struct {
		name string
		do   func() (any, error)
		want string // in the result or the error
		err  bool
	}{
		{"register v1", func() (any, error) { return r.Register(ctx, "OrderPlaced", v1, schema.RegisterOptions{}) }, "Version:1", false},
		{"an upcaster into a version not registered", func() (any, error) { return r.SetUpcaster(ctx, up1, schema.UpcasterOptions{Source: "upcast-v1.yaml"}) },
			"OrderPlaced has no schema version 2 for the upcaster to produce", true},
		{"register v2 with the wrong upcaster", func() (any, error) {
			return r.Register(ctx, "OrderPlaced", v2, schema.RegisterOptions{Upcaster: up2, UpcasterSource: "upcast-v2.yaml"})
		}, "the upcaster reads v2, but the version registered is v2: its from must be 1", true},
		{"nothing was stored by the refusal", func() (any, error) { return r.Types(ctx) }, "Versions:[1] Latest:1 Upcasters:[]", false},
		{"register v2 with its upcaster", func() (any, error) {
			res, err := r.Register(ctx, "OrderPlaced", v2, schema.RegisterOptions{Upcaster: up1, UpcasterSource: "upcast-v1.yaml"})
			if res.Upcaster == nil {
				return res, err
			}
			return *res.Upcaster, err
		}, "{EventType:OrderPlaced From:1 To:2 Replaced:false Existing:false Examples:1 DryRun:false}", false},
		{"the other process reads v1 as v2", func() (any, error) { e, err := other.Latest(ctx, ev1); return string(e.Data), err },
			`{"currency":"EUR","order_id":"o-1","total":12.5}`, false},
		{"v3 under BACKWARD is refused even with an upcaster", func() (any, error) {
			return r.Register(ctx, "OrderPlaced", v3, schema.RegisterOptions{Upcaster: up2})
		}, "breaks BACKWARD", true},
		{"v3 with an upcaster that breaks it", func() (any, error) {
			return r.Register(ctx, "OrderPlaced", v3, schema.RegisterOptions{Compatibility: schema.None,
				Upcaster: []byte(strings.Replace(string(up2), "unset: [total]\n", "", 1)), UpcasterSource: "upcast-v2.yaml"})
		}, "the upcaster of OrderPlaced v2→v3 breaks its examples: example 1 (upcast-v2.yaml:10:5): the upcast data", true},
		{"nothing was stored by that refusal either", func() (any, error) { return r.Types(ctx) }, "Versions:[1 2] Latest:2 Upcasters:[1]", false},
		{"v3 with its upcaster", func() (any, error) {
			return r.Register(ctx, "OrderPlaced", v3, schema.RegisterOptions{Compatibility: schema.None, Upcaster: up2, UpcasterSource: "upcast-v2.yaml"})
		}, "Version:3 Compatibility:NONE", false},
		{"the other process reads v1 as v3", func() (any, error) { e, err := other.Latest(ctx, ev1); return string(e.Data), err },
			`{"amount":12.5,"currency":"EUR","order_id":"o-1"}`, false},
		{"a stored upcaster that no longer compiles breaks its step, never skips it", func() (any, error) {
			if _, err := pool.Exec(ctx, `UPDATE sluice.event_schema_upcasters SET spec = replace(spec, 'event.data.total', 'event.data.total +') WHERE from_version = 2`); err != nil {
				return nil, err
			}
			if _, err := pool.Exec(ctx, `UPDATE sluice.event_schema_types SET rev = nextval('sluice.event_schema_rev')`); err != nil {
				return nil, err
			}
			_, err := other.Latest(ctx, ev1)
			return nil, err
		}, "upcaster OrderPlaced v2→v3 failed: the stored upcaster does not compile (set it again or delete it with sluice schema upcaster): upcast-v2.yaml:7:29: set amount", true},
		{"setting it again repairs it", func() (any, error) { return r.SetUpcaster(ctx, up2, schema.UpcasterOptions{Source: "upcast-v2.yaml"}) }, "Replaced:true", false},
		{"the same upcaster again", func() (any, error) { return r.SetUpcaster(ctx, up2, schema.UpcasterOptions{Source: "upcast-v2.yaml"}) }, "Existing:true", false},
		{"replace v1's upcaster (dry run)", func() (any, error) {
			return r.SetUpcaster(ctx, []byte(strings.Replace(string(up1), "# OrderPlaced v1 → v2.", "# OrderPlaced v1 → v2 (edited).", 1)), schema.UpcasterOptions{DryRun: true})
		}, "Replaced:true Existing:false Examples:1 DryRun:true", false},
		{"a dry run changes nothing", func() (any, error) { e, err := other.Latest(ctx, ev1); return string(e.Data), err }, `"currency":"EUR"`, false},
		{"show", func() (any, error) { return r.GetUpcaster(ctx, "OrderPlaced", 2) }, "Source:upcast-v2.yaml", false},
		{"delete v1's upcaster", func() (any, error) { return nil, r.DeleteUpcaster(ctx, "OrderPlaced", 1, false) }, "", false},
		{"v1 now reads like v2: the US default", func() (any, error) { e, err := other.Latest(ctx, ev1); return string(e.Data), err }, `"currency":"USD"`, false},
		{"delete it again", func() (any, error) { return nil, r.DeleteUpcaster(ctx, "OrderPlaced", 1, false) }, "no upcaster from version 1", true},
		{"deleting v3 deletes the upcaster into it", func() (any, error) { return r.Delete(ctx, "OrderPlaced", 3, false) }, "[3]", false},
		{"gone", func() (any, error) { return r.Types(ctx) }, "Versions:[1 2] Latest:2 Upcasters:[]", false},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			got, err := st.do()
			text := fmt.Sprintf("%+v", got)
			if err != nil {
				text = err.Error()
			}
			if (err != nil) != st.err || !strings.Contains(text, st.want) {
				t.Fatalf("got %s (err %v), want %q (error: %v)", text, err, st.want, st.err)
			}
		})
	}
	t.Run("a registry that never loaded is an outage", func(t *testing.T) {
		_, pool := testenv.NewMigratedDatabase(t)
		pool.Close()
		_, err := schema.New(pool, schema.Config{}, nil).Latest(ctx, ev1)
		var ue *schema.UnavailableError
		if !errors.As(err, &ue) || failure.Classify(ctx, err) != failure.Outage {
			t.Fatalf("err %v, want an *UnavailableError classified as an outage", err)
		}
	})
}

// BenchmarkLatest is the cost of bringing one event to its type's latest
// version, per event: the example's v1 event through both upcasters
// (v1 → v2 → v3) and the validation of the result against v3 — what a
// read with as=latest or a projection with upcast: latest adds per event
// stored two versions back (docs/benchmarks.md).
func BenchmarkLatest(b *testing.B) {
	_, pool := testenv.NewMigratedDatabase(b)
	r := schema.New(pool, schema.Config{}, nil)
	schematest.RegisterOrderPlaced(b, r)
	ctx := context.Background()
	ev := orderEvent(1, `{"order_id":"o-1","total":12.5}`)
	if _, err := r.Latest(ctx, ev); err != nil { // the registry loads once per process
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		out, err := r.Latest(ctx, ev)
		if err != nil || out.SchemaVersion != 3 {
			b.Fatal(out.SchemaVersion, err)
		}
	}
}
