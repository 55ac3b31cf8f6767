package api

import (
	"context"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
)

// streamLog records the from-slots of the Stream calls the API makes.
type streamLog struct {
	EventStore
	mu    sync.Mutex
	froms []int64
}

func (s *streamLog) Stream(ctx context.Context, typ, id string, from, to int64, kind envelope.Kind) ([]eventstore.Event, error) {
	s.mu.Lock()
	s.froms = append(s.froms, from)
	s.mu.Unlock()
	return s.EventStore.Stream(ctx, typ, id, from, to, kind)
}

// TestFoldStartsAtTheWorkersLastSlot: a read folds from the instance
// worker's last finished slot, which the registry keeps under the worker
// runtime's aggregate key ("Instance:" + id). The API used to ask for the
// bare aggregate id, found nothing and read every stream from slot 1.
func TestFoldStartsAtTheWorkersLastSlot(t *testing.T) {
	var log *streamLog
	a := newTestAPI(t, apiConfig{deps: func(d *Deps) { log = &streamLog{EventStore: d.Store}; d.Store = log }})
	const agg = "shop:order:o-1"
	states := []string{`{"n":1}`, `{"n":2}`, `{"n":3}`, `{"n":4}`}
	for i, st := range states {
		seq := int64(i + 1)
		var c reply
		if i == 0 {
			c = a.do("POST", base, `{"instance_id":"o-1","data":`+st+`}`).expect(t, 202, "")
			a.domain(agg, seq, TypeCreated, st)
		} else {
			c = a.do("PATCH", base+"/o-1", st).expect(t, 202, "")
			a.domain(agg, seq, TypeUpdated, st)
		}
		a.finish(c.str("event_id"), agg, seq, claim.Applied())
	}
	log.mu.Lock()
	log.froms = nil
	log.mu.Unlock()
	r := a.do("GET", base+"/o-1", ``).expect(t, 200, "")
	if r.num("state_sequence_number") != 4 || !jsonEqual(t, mustJSON(t, r.json["data"]), `{"n":4}`) {
		t.Fatalf("state: %s", r.body)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.froms) == 0 || log.froms[0] != 4 {
		t.Fatalf("fold read the stream from slots %v, want from 4 (the last finished slot)", log.froms)
	}
}
