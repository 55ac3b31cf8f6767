package readmodel

import (
	"context"
	"sync"
	"testing"
)

// TestRebuilds: one rebuild per key at a time; a request while it runs
// runs it once more (Again) or is dropped; nothing runs when not serving,
// and stop cancels and waits.
func TestRebuilds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		again bool
		want  []string // the reasons the key's rebuilds ran with
	}{
		{"again: once more with the newest reason", true, []string{"first", "third"}},
		{"dropped", false, []string{"first"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Rebuilds{Again: tc.again}
			if r.Start("k", "not serving", func(context.Context, string) { t.Error("ran while not serving") }) {
				t.Fatal("Start reported serving before Serve")
			}
			stop := r.Serve(context.Background())
			var mu sync.Mutex
			var ran []string
			release := make(chan struct{})
			started := make(chan struct{}, 4)
			rebuild := func(ctx context.Context, why string) {
				mu.Lock()
				ran = append(ran, why)
				mu.Unlock()
				started <- struct{}{}
				if why == "first" {
					<-release // hold the first rebuild while more are asked for
				}
			}
			r.Start("k", "first", rebuild)
			<-started
			r.Start("k", "second", rebuild)
			r.Start("k", "third", rebuild)
			close(release)
			if tc.again {
				<-started
			}
			stop()
			mu.Lock()
			defer mu.Unlock()
			if len(ran) != len(tc.want) {
				t.Fatalf("ran %v, want %v", ran, tc.want)
			}
			for i := range ran {
				if ran[i] != tc.want[i] {
					t.Fatalf("ran %v, want %v", ran, tc.want)
				}
			}
			if !r.Start("k", "after stop", rebuild) {
				return // not serving any more: reported, nothing ran
			}
			t.Fatal("Start after stop reported serving")
		})
	}
}

// TestRebuildsStopCancels: stop cancels a running rebuild's context and
// waits for it to return.
func TestRebuildsStopCancels(t *testing.T) {
	r := &Rebuilds{}
	stop := r.Serve(context.Background())
	started, returned := make(chan struct{}), make(chan struct{})
	r.Start("k", "why", func(ctx context.Context, _ string) {
		close(started)
		<-ctx.Done()
		close(returned)
	})
	<-started
	stop()
	select {
	case <-returned:
	default:
		t.Fatal("stop returned before the rebuild did")
	}
}
