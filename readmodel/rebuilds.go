package readmodel

import (
	"context"
	"sync"
)

// Rebuilds runs the rebuilds of lost read models in the background, one
// scheduler for every worker (the instance worker's per db, the projection
// worker's per projection): at most one rebuild per key at a time, each
// under the context Serve was given, and Serve's stop cancels them and
// waits for them. A rebuild asked for while the key's rebuild runs either
// runs once more after it, with the newest reason (Again: the instance
// worker, whose rebuild writes into the live index and must see what was
// lost meanwhile), or is dropped (the projection worker, whose rebuild
// builds a fresh version from the whole topic anyway). The zero value is
// ready to use.
type Rebuilds struct {
	// Again makes a rebuild asked for while one of its key runs run once
	// more after it.
	Again bool

	mu      sync.Mutex
	ctx     context.Context // nil: not serving
	running map[string]bool
	again   map[string]string
	wg      sync.WaitGroup
}

// Serve lets Start run rebuilds under ctx until the returned stop is
// called; stop cancels them and waits for them.
func (r *Rebuilds) Serve(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	r.ctx, r.running, r.again = ctx, map[string]bool{}, map[string]string{}
	r.mu.Unlock()
	return func() {
		// Cancelled under mu: a Start that saw the context live has
		// called wg.Add before this, so Wait waits for it.
		r.mu.Lock()
		cancel()
		r.mu.Unlock()
		r.wg.Wait()
		r.mu.Lock()
		r.ctx = nil
		r.mu.Unlock()
	}
}

// Start runs rebuild(ctx, why) for key in the background unless one runs
// (then as Again says). It reports false when the scheduler is not
// serving, so that the caller can say what to do instead; a scheduler
// that is stopping starts nothing and reports true.
func (r *Rebuilds) Start(key, why string, rebuild func(ctx context.Context, why string)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil {
		return false
	}
	if r.ctx.Err() != nil { // stopping: no Add while or after stop waits
		return true
	}
	if r.running[key] {
		if r.Again {
			r.again[key] = why
		}
		return true
	}
	r.running[key] = true
	r.wg.Add(1)
	ctx := r.ctx
	go func() {
		defer r.wg.Done()
		for {
			rebuild(ctx, why)
			r.mu.Lock()
			next, ok := r.again[key]
			delete(r.again, key)
			if !ok || ctx.Err() != nil {
				delete(r.running, key)
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
			why = next
		}
	}()
	return true
}
