package pipeline_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/projectionworker/declarative"
	"github.com/sluicehq/sluice/readmodel"
)

// The table's services, built and run in one process, carry a command from
// the API to its instance document and its history document; an extra
// route mounted through Options answers beside the API's own.
func TestTableRunsThePipeline(t *testing.T) {
	e := pipelinetest.Start(t, pipelinetest.Options{
		APIRoutes: func(pipeline.Deps) map[string]http.Handler {
			return map[string]http.Handler{"/extra/": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "extra") })}
		},
	})
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Post(e.APIURL+"/v1/dbs/shop/classes/orders/instances", "application/json", strings.NewReader(`{"instance_id":"42","data":{"total":10}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	search := func(index, want string) func() bool {
		return func() bool {
			r, err := client.Get(e.ESURL + "/" + index + "/_search")
			if err != nil {
				return false
			}
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			return r.StatusCode == 200 && strings.Contains(string(b), want)
		}
	}
	pipelinetest.WaitFor(t, 30*time.Second, "the instance document", search("sluice_shop_instances", `"total":10`))
	pipelinetest.WaitFor(t, 30*time.Second, "the history document", search("sluice_shop_history", "INSTANCE_CREATED"))
	r, err := client.Get(e.APIURL + "/extra/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if string(b) != "extra" {
		t.Fatalf("extra route: %d %q", r.StatusCode, b)
	}
	if r, err := client.Get(e.APIURL + "/readyz"); err != nil || r.StatusCode != 200 {
		t.Fatalf("/readyz: %v %v", r, err)
	}
}

// Lookup knows the four services and nothing else; Build refuses a service
// without the event store it needs.
func TestLookupAndBuildChecks(t *testing.T) {
	for _, n := range []string{pipeline.API, pipeline.Relay, pipeline.InstanceWorker, pipeline.ProjectionWorker} {
		if s, err := pipeline.Lookup(n); err != nil || s.Name != n || s.Build == nil {
			t.Errorf("Lookup(%q): %+v %v", n, s, err)
		}
	}
	if _, err := pipeline.Lookup("dev"); err == nil {
		t.Error("Lookup(dev): no error")
	}
	if _, err := pipeline.Build(context.Background(), pipeline.Relay, pipeline.Deps{}, pipeline.Options{}); err == nil || !strings.Contains(err.Error(), "event store") {
		t.Errorf("Build without a store: %v", err)
	}
}

// A worker whose Elasticsearch refuses the configured credentials does not
// start (an error naming the variables), instead of pausing for ever on
// an "outage" that no waiting ends.
func TestWorkerRefusedByElasticsearchDoesNotStart(t *testing.T) {
	e := pipelinetest.Start(t, pipelinetest.Options{Services: []string{pipeline.Relay}})
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"type":"security_exception","reason":"unable to authenticate user [sluice]"},"status":401}`)
	}))
	t.Cleanup(refuse.Close)
	cfg := *e.Config
	cfg.Elasticsearch.URLs = []string{refuse.URL}
	d := e.Deps
	d.Config = &cfg
	for _, name := range []string{pipeline.InstanceWorker, pipeline.ProjectionWorker} {
		r, err := pipeline.Build(context.Background(), name, d, pipeline.Options{})
		if err == nil {
			r.Close()
			t.Fatalf("%s: started with refused credentials", name)
		}
		if !errors.Is(err, readmodel.ErrCredentials) || !strings.Contains(err.Error(), "ELASTICSEARCH_PASSWORD") {
			t.Fatalf("%s: want a credentials error naming the variables, got %v", name, err)
		}
	}
}

// Each service uses the Postgres roles of docs/scale-out.md and no other
// (a process opens only their pools): the relay the store's, the instance
// worker the store's and the registry's, the projection worker the
// registry's (and the main role's schema registry when a projection
// upcasts), the api all three. Build refuses a missing pool by its
// variable.
func TestServiceRoles(t *testing.T) {
	m, s, r := migrations.RoleMain, migrations.RoleStore, migrations.RoleRegistry
	specs, err := declarative.Parse("p.yaml", []byte("name: p\nversion: 1\nevent_types: [E]\nkey: event.aggregate_id\nupcast: latest\nupdates:\n  - set: v\n    value: event.schema_version\n"))
	if err != nil {
		t.Fatal(err)
	}
	upcasting, err := declarative.Compile(specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    pipeline.Options
		want []migrations.Role
	}{
		{pipeline.Relay, pipeline.Options{}, []migrations.Role{s}},
		{pipeline.InstanceWorker, pipeline.Options{}, []migrations.Role{s, r}},
		{pipeline.ProjectionWorker, pipeline.Options{}, []migrations.Role{r}},
		{pipeline.ProjectionWorker, pipeline.Options{Projections: []projectionworker.Spec{{Projection: upcasting[0]}}}, []migrations.Role{r, m}},
		{pipeline.API, pipeline.Options{}, []migrations.Role{m, s, r}},
	} {
		svc, err := pipeline.Lookup(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := svc.Roles(tc.o); !slices.Equal(got, tc.want) {
			t.Errorf("%s (%d projections): roles %v, want %v", tc.name, len(tc.o.Projections), got, tc.want)
		}
	}
	e := pipelinetest.Start(t, pipelinetest.Options{Services: []string{pipeline.Relay}})
	d := e.Deps
	d.RegistryPool = nil
	if _, err := pipeline.Build(context.Background(), pipeline.InstanceWorker, d, pipeline.Options{}); err == nil || !strings.Contains(err.Error(), "REGISTRY_DATABASE_URL") {
		t.Errorf("instance worker without the registry's pool: %v", err)
	}
}
