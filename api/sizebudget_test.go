package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/shared/envelope"
)

// TestCreateWhoseDomainEventIsOverTheLimit: every create the API accepts
// yields a domain event the store accepts too (issue 21, the one size
// budget). Creates are sent with blobs growing byte by byte across the
// limit; each 202 must let the instance worker's own domain event
// (envelope.DomainEventFor) be appended, and the ones that could not are
// refused with 413 limit_exceeded at the door. Before the check, creates
// within about 500 bytes of the limit were accepted and then went DEAD.
func TestCreateWhoseDomainEventIsOverTheLimit(t *testing.T) {
	const limit = 4096
	a := newTestAPI(t, apiConfig{
		cfg:   func(c *Config) { c.Limits.MaxEnvelopeBytes = limit },
		store: func(c *eventstore.Config) { c.MaxEnvelopeBytes = limit },
	})
	ctx := context.Background()
	var accepted, refused int
	for n := limit - 700; n <= limit; n += 5 {
		id := fmt.Sprintf("i-%d", n)
		body := fmt.Sprintf(`{"instance_id":%q,"data":{"blob":%q}}`, id, strings.Repeat("x", n))
		r := a.do(http.MethodPost, "/v1/dbs/shop/classes/orders/instances", body)
		switch r.code {
		case http.StatusRequestEntityTooLarge:
			r.expect(t, http.StatusRequestEntityTooLarge, "limit_exceeded")
			refused++
			continue
		case http.StatusAccepted:
			accepted++
		default:
			t.Fatalf("blob of %d bytes: status %d: %s", n, r.code, r.body)
		}
		aggID := r.str("aggregate_id")
		cmd, err := a.store.Command(ctx, envelope.AggregateTypeInstance, aggID, r.num("sequence_number"))
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(cmd.Envelope.Data, &d); err != nil {
			t.Fatal(err)
		}
		ev := envelope.DomainEventFor(cmd.Envelope, cmd.Envelope.Metadata.CommandID(), TypeCreated, d.Data)
		res, err := a.store.AppendOne(ctx, ev)
		if err == nil {
			err = res.Err
		}
		if err != nil {
			t.Fatalf("blob of %d bytes: the create was accepted (202) but its domain event is refused: %v", n, err)
		}
	}
	if accepted == 0 || refused == 0 {
		t.Fatalf("the sizes did not cross the boundary: %d accepted, %d refused", accepted, refused)
	}
}
