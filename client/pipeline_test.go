package client_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/registry"
)

// Commands are waited for until the instance worker applied or rejected
// them, against the real pipeline (api, relay, instance worker on kfake);
// the admin API's reads answer with the admin token.
func TestWaitForCommandAndAdmin(t *testing.T) {
	const adminToken = "admin-secret"
	e := pipelinetest.Start(t, pipelinetest.Options{
		Services: []string{pipeline.API, pipeline.Relay, pipeline.InstanceWorker},
		APIRoutes: func(d pipeline.Deps) map[string]http.Handler {
			reg, err := registry.New(registry.Config{Owner: "client-test"}, registry.Deps{Pool: d.Pool})
			if err != nil {
				t.Fatal(err)
			}
			es, err := readmodel.NewClient(d.Config.Elasticsearch)
			if err != nil {
				t.Fatal(err)
			}
			srv, err := admin.New(admin.Config{Process: d.Config, ReadToken: adminToken}, admin.Deps{Pool: d.Pool, Store: d.Store, Bucket: d.Bucket, Registry: reg, ES: es, Logger: d.Logger})
			if err != nil {
				t.Fatal(err)
			}
			return map[string]http.Handler{admin.Prefix: srv}
		},
	})
	c := newClient(t, e.APIURL, client.WithAdminToken(adminToken))
	ctx := ctxT(t)

	acc, err := c.CreateInstance(ctx, "shop", "order", "42", map[string]any{"total": 10}, client.WithIdempotencyKey("order-42-create"))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"create applied", func(t *testing.T) {
			st, err := acc.Wait(ctx, c)
			if err != nil || st.Status != client.StatusApplied || st.CommandID != "order-42-create" || !st.Final() {
				t.Fatalf("got %+v, %v; want APPLIED", st, err)
			}
			inst, err := c.GetInstance(ctx, "shop", "order", "42")
			if err != nil {
				t.Fatal(err)
			}
			var data struct{ Total int }
			if err := json.Unmarshal(inst.Data, &data); err != nil || data.Total != 10 || inst.SequenceNumber != 1 {
				t.Fatalf("instance %+v (%v)", inst, err)
			}
		}},
		{"second create rejected", func(t *testing.T) {
			again, err := c.CreateInstance(ctx, "shop", "order", "42", map[string]any{"total": 99})
			if err != nil {
				t.Fatal(err)
			}
			st, err := c.WaitForCommand(ctx, again.CommandID)
			var fe *client.CommandFailedError
			if !errors.As(err, &fe) || st == nil || st.Status != client.StatusRejected || fe.Status.Reason == "" {
				t.Fatalf("got %+v, %v; want REJECTED with a reason", st, err)
			}
		}},
		{"patch at the instance's sequence applied", func(t *testing.T) {
			inst, err := c.GetInstance(ctx, "shop", "order", "42")
			if err != nil {
				t.Fatal(err)
			}
			p, err := c.PatchInstance(ctx, "shop", "order", "42", map[string]any{"total": 12}, client.WithExpectedSeq(inst.SequenceNumber))
			if err != nil {
				t.Fatal(err)
			}
			if st, err := p.Wait(ctx, c); err != nil || st.Status != client.StatusApplied {
				t.Fatalf("got %+v, %v; want APPLIED", st, err)
			}
		}},
		{"delete applied, then not found", func(t *testing.T) {
			d, err := c.DeleteInstance(ctx, "shop", "order", "42")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Wait(ctx, c); err != nil {
				t.Fatal(err)
			}
			_, err = c.GetInstance(ctx, "shop", "order", "42")
			var nf *client.NotFoundError
			if !errors.As(err, &nf) || nf.Code != client.CodeInstanceDeleted {
				t.Fatalf("want instance_deleted, got %v", err)
			}
		}},
		{"admin overview", func(t *testing.T) {
			raw, err := c.AdminOverview(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var ov map[string]json.RawMessage
			if err := json.Unmarshal(raw, &ov); err != nil || len(ov) == 0 {
				t.Fatalf("overview %s: %v", raw, err)
			}
			var audit json.RawMessage
			if err := c.AdminGet(ctx, "audit", url.Values{"limit": {"5"}}, &audit); err != nil {
				t.Fatal(err)
			}
		}},
		{"admin without its token", func(t *testing.T) {
			_, err := newClient(t, e.APIURL).AdminOverview(ctx)
			var ae *client.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
				t.Fatalf("want 401, got %v", err)
			}
		}},
	}
	for _, s := range steps {
		t.Run(s.name, s.run)
	}
}
