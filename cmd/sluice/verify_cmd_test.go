package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/instanceworker/instanceworkertest"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/envelope"
)

// runOps executes the CLI in-process like run, with the operator commands of
// this package added to the root when root.go does not wire them (yet).
func runOps(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	have := map[string]bool{}
	for _, c := range root.Commands() {
		have[c.Name()] = true
	}
	for _, c := range []*cobra.Command{newVerifyCmd(), newDLQCmd(), newConsumerCmd()} {
		if !have[c.Name()] {
			root.AddCommand(c)
		}
	}
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

// opExitCode returns the exit code main would use for err.
func opExitCode(err error) int {
	var ex *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ex):
		return ex.code
	default:
		return 1
	}
}

// newVerifyFixture is a file-backend event store on a fresh database plus
// an in-process Elasticsearch, both configured through the environment.
func newVerifyFixture(t *testing.T) *instanceworkertest.Verify {
	t.Helper()
	url, pool := testenv.NewMigratedDatabase(t)
	ts := httptest.NewServer(esserver.New())
	t.Cleanup(ts.Close)
	env := map[string]string{"DATABASE_URL": url, "EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": t.TempDir(),
		"ELASTICSEARCH_URLS": ts.URL, "SLUICE_LOG_LEVEL": "warn"}
	cfg := setEnvConfig(t, env)
	return instanceworkertest.OpenVerify(t, pool, cfg.EventStore, cfg.Elasticsearch)
}

// verify: the event store against Elasticsearch, with every kind of
// difference present once (and twice for mismatch), exact counts, exit code
// 4, the JSON report; a class where everything matches exits 0; the class
// name's LIKE metacharacters are escaped.
func TestVerifyReportsMissingStaleExtraMismatch(t *testing.T) {
	f := newVerifyFixture(t)
	dom := envelope.KindDomain
	// ok: created, document at slot 1.
	e := f.Event(t, dom, "INSTANCE_CREATED", "shop:orders:ok1", `{"n":1,"tags":["a"]}`)
	f.Doc(t, "orders", "ok1", e, false, `{"tags":["a"],"n":1}`)
	// ok: created + updated, document at slot 2 (instance id with ':').
	f.Event(t, dom, "INSTANCE_CREATED", "shop:orders:a:b", `{"n":1}`)
	e = f.Event(t, dom, "INSTANCE_UPDATED", "shop:orders:a:b", `{"n":2}`)
	f.Doc(t, "orders", "a:b", e, false, `{"n":2}`)
	// ok: created + deleted, tombstone at slot 2.
	f.Event(t, dom, "INSTANCE_CREATED", "shop:orders:gone", `{"n":1}`)
	e = f.Event(t, dom, "INSTANCE_DELETED", "shop:orders:gone", `{}`)
	f.Doc(t, "orders", "gone", e, true, `{}`)
	// missing: no document.
	f.Event(t, dom, "INSTANCE_CREATED", "shop:orders:missing1", `{"n":1}`)
	// stale: store at slot 2, document at slot 1.
	e = f.Event(t, dom, "INSTANCE_CREATED", "shop:orders:stale1", `{"n":1}`)
	f.Doc(t, "orders", "stale1", e, false, `{"n":1}`)
	f.Event(t, dom, "INSTANCE_UPDATED", "shop:orders:stale1", `{"n":2}`)
	// mismatch: deleted in the store, a live document at the same slot.
	f.Event(t, dom, "INSTANCE_CREATED", "shop:orders:delmis", `{"n":1}`)
	e = f.Event(t, dom, "INSTANCE_DELETED", "shop:orders:delmis", `{}`)
	f.Doc(t, "orders", "delmis", e, false, `{"n":1}`)
	// mismatch: same slot, different state.
	e = f.Event(t, dom, "INSTANCE_CREATED", "shop:orders:statediff", `{"n":1}`)
	f.Doc(t, "orders", "statediff", e, false, `{"n":2}`)
	// extra: a document without any domain event; and one whose aggregate
	// has only a (pending or rejected) command.
	f.Doc(t, "orders", "extra1", envelope.Envelope{SequenceNumber: 3, EventID: uuid.NewString()}, false, `{"n":9}`)
	f.Event(t, envelope.KindCommand, "CREATE_INSTANCE", "shop:orders:cmdonly", `{"db":"shop","class":"orders","data":{}}`)
	f.Doc(t, "orders", "cmdonly", envelope.Envelope{SequenceNumber: 1, EventID: uuid.NewString()}, false, `{}`)
	// Another class of the same db: ok, and not part of the orders report.
	e = f.Event(t, dom, "INSTANCE_CREATED", "shop:users:u1", `{"name":"x"}`)
	f.Doc(t, "users", "u1", e, false, `{"name":"x"}`)
	// Another db with the same class: not part of the report.
	f.Event(t, dom, "INSTANCE_CREATED", "shopx:orders:1", `{"n":1}`)

	out, errOut, err := runOps(t, "verify", "--db", "shop", "--class", "orders")
	if code := opExitCode(err); code != exitVerifyDiffers {
		t.Fatalf("exit code %d (%v), want 4\n%s\n%s", code, err, out, errOut)
	}
	want := "verify: 9 instances, 3 ok, 1 missing, 1 stale, 2 extra, 2 mismatched"
	if !strings.Contains(out, want) {
		t.Fatalf("want %q in\n%s", want, out)
	}
	for _, line := range []string{"missing   missing1", "stale     stale1", "extra     extra1", "extra     cmdonly", "mismatch  delmis", "mismatch  statediff"} {
		if !strings.Contains(out, line) {
			t.Errorf("output lacks %q:\n%s", line, out)
		}
	}
	if strings.Contains(errOut, "aggregates") {
		t.Errorf("progress drawn although stdout is not a terminal (issue 27.6: quiet for scripts):\n%s", errOut)
	}

	out, _, err = runOps(t, "verify", "--db", "shop", "--class", "orders", "--json")
	if opExitCode(err) != exitVerifyDiffers {
		t.Fatalf("--json: exit %d (%v)", opExitCode(err), err)
	}
	var rep instanceworker.VerifyReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, p := range rep.Problems {
		got[p.InstanceID] = p.Status
	}
	wantStatus := map[string]string{"missing1": instanceworker.VerifyMissing, "stale1": instanceworker.VerifyStale, "extra1": instanceworker.VerifyExtra, "cmdonly": instanceworker.VerifyExtra,
		"delmis": instanceworker.VerifyMismatch, "statediff": instanceworker.VerifyMismatch}
	if rep.Instances != 9 || rep.OK != 3 || len(got) != len(wantStatus) {
		t.Fatalf("report %+v", rep)
	}
	for id, st := range wantStatus {
		if got[id] != st {
			t.Errorf("%s: status %q, want %q", id, got[id], st)
		}
	}

	cases := []struct {
		class, want string
		code        int
	}{
		{"users", "verify: 1 instances, 1 ok, 0 missing, 0 stale, 0 extra, 0 mismatched", 0},
		// '_' is a LIKE wildcard: unescaped, ord_rs would match the orders aggregates.
		{"ord_rs", "verify: 0 instances, 0 ok, 0 missing, 0 stale, 0 extra, 0 mismatched", exitNotFound},
		// Nothing on either side is not a clean result: a typo exits 3.
		{"ordres", "verify: 0 instances", exitNotFound},
	}
	for _, tc := range cases {
		out, _, err := runOps(t, "verify", "--db", "shop", "--class", tc.class)
		if opExitCode(err) != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("verify %s: exit %d (%v), output %q; want %d and %q", tc.class, opExitCode(err), err, out, tc.code, tc.want)
		}
	}
	if _, _, err := runOps(t, "verify", "--db", "nosuchdb", "--class", "orders"); opExitCode(err) != exitNotFound {
		t.Errorf("verify of a db nothing holds: exit %d (%v), want %d", opExitCode(err), err, exitNotFound)
	}
	if _, _, err := runOps(t, "verify", "--db", "Shop!", "--class", "orders"); err == nil || opExitCode(err) == exitVerifyDiffers {
		t.Errorf("a bad db name must fail plainly, got %v", err)
	}
}

// TestVerifyJSONSeconds: verify --json gives its run time in seconds,
// duration_seconds, as every other summary's …_seconds (it had only
// duration_ms), and keeps duration_ms and the report's other fields.
func TestVerifyJSONSeconds(t *testing.T) {
	for _, tc := range []struct {
		name string
		ms   int64
		want float64
	}{
		{"a second and a half", 1500, 1.5},
		{"under a millisecond", 0, 0},
		{"two minutes", 120000, 120},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := writeVerifyJSON(&b, instanceworker.VerifyReport{DB: "shop", Class: "orders", Instances: 2, OK: 2, DurationMS: tc.ms}); err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
				t.Fatalf("%v\n%s", err, b.String())
			}
			if got["duration_seconds"] != tc.want || got["duration_ms"] != float64(tc.ms) || got["db"] != "shop" || got["ok"] != float64(2) {
				t.Errorf("verify --json: %s; want duration_seconds %v, duration_ms %d and the report", b.String(), tc.want, tc.ms)
			}
		})
	}
}
