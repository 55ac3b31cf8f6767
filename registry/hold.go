package registry

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/shared/claim"
	"sync"
	"time"
)

// heartbeats is the set of claims Hold keeps alive. One goroutine per
// Registry heartbeats all of them with one statement per interval; it runs
// only while something is held.
type heartbeats struct {
	mu      sync.Mutex
	entries map[uint64]*held
	next    uint64
	running bool
}

type held struct {
	lease  claim.Lease
	cancel context.CancelCauseFunc
	lastOK time.Time // local monotonic reading of the last successful renewal
}

// Hold keeps lease alive while the caller processes the claimed event: it
// returns a context derived from ctx and a stop function. Every
// HeartbeatInterval the registry heartbeats all held leases in one
// statement; when a heartbeat finds the lease lost (another owner reclaimed
// it, or it is no longer processing) the returned context is cancelled with
// cause *LeaseLostError (context.Cause), and the caller must stop before any
// further side effect. If Postgres cannot be reached for long enough that
// the lease may have expired (LeaseTimeout − HeartbeatInterval since the
// last renewal) the context is cancelled with the *UnavailableError as
// cause; that local timer can only make the holder give up earlier, never
// hold longer than the database allows.
//
// Call stop when processing ends (before or after MarkDone/MarkFailed); it
// is idempotent and cancels the returned context. A malformed lease is not
// held: the context is cancelled at once with a *RequestError cause.
func (r *Registry) Hold(ctx context.Context, lease claim.Lease) (context.Context, func()) {
	hctx, cancel := context.WithCancelCause(ctx)
	if err := validateLease(0, lease); err != nil {
		cancel(err) // never held: one bad lease must not fail everyone's heartbeats
		return hctx, func() { cancel(errHoldStopped) }
	}
	h := &r.hb
	h.mu.Lock()
	h.next++
	id := h.next
	h.entries[id] = &held{lease: lease, cancel: cancel, lastOK: time.Now()}
	if !h.running {
		h.running = true
		go r.heartbeatLoop()
	}
	h.mu.Unlock()
	remove := func() {
		h.mu.Lock()
		delete(h.entries, id)
		h.mu.Unlock()
	}
	unregister := context.AfterFunc(hctx, remove)
	return hctx, func() {
		unregister()
		remove()
		cancel(errHoldStopped)
	}
}

var errHoldStopped = errors.New("registry: hold stopped")

// Held returns the number of leases Hold is keeping alive.
func (r *Registry) Held() int {
	r.hb.mu.Lock()
	defer r.hb.mu.Unlock()
	return len(r.hb.entries)
}

func (r *Registry) heartbeatLoop() {
	h := &r.hb
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	for range t.C {
		h.mu.Lock()
		if len(h.entries) == 0 {
			h.running = false
			h.mu.Unlock()
			return
		}
		ids := make([]uint64, 0, len(h.entries))
		entries := make([]*held, 0, len(h.entries))
		leases := make([]claim.Lease, 0, len(h.entries))
		for id, e := range h.entries {
			ids = append(ids, id)
			entries = append(entries, e)
			leases = append(leases, e.lease)
		}
		h.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.HeartbeatInterval)
		errs, err := r.HeartbeatBatch(ctx, leases)
		cancel()
		now := time.Now()
		h.mu.Lock()
		for i, e := range entries {
			if _, still := h.entries[ids[i]]; !still {
				continue
			}
			switch {
			case err != nil:
				if now.Sub(e.lastOK) >= r.cfg.LeaseTimeout-r.cfg.HeartbeatInterval {
					e.cancel(fmt.Errorf("registry: lease of handler %q event %q could not be renewed and may have expired: %w", e.lease.Handler, e.lease.EventID, err))
					delete(h.entries, ids[i])
				}
			case errs[i] != nil:
				e.cancel(errs[i])
				delete(h.entries, ids[i])
			default:
				e.lastOK = now
			}
		}
		h.mu.Unlock()
	}
}
