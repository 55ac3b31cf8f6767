// Package drain carries a server's shutdown to the requests it serves
// (docs/operations.md#rolling-restart-with-sse-subscribers).
//
// http.Server.Shutdown closes the listeners and idle connections and then
// waits for every active request to return; it does not tell a handler
// that holds its request open (a Server-Sent Events stream, a long poll)
// to stop, so such a handler would keep the process alive until the
// shutdown timeout. The server that runs a service (pipeline.Serve) puts a
// Signal in the base context of every request and closes it when shutdown
// begins; a long-lived handler selects on Signal(r.Context()), ends its
// response in a way the client can resume from, and refuses to start when
// it is already closed. Ordinary requests ignore it and finish as usual:
// the request context itself is not cancelled.
package drain

import "context"

type key struct{}

// WithSignal returns ctx carrying stopping, a channel that is closed when
// the server serving requests under ctx begins to shut down.
func WithSignal(ctx context.Context, stopping <-chan struct{}) context.Context {
	return context.WithValue(ctx, key{}, stopping)
}

// Signal returns the channel closed when the server serving ctx's request
// begins to shut down; nil (which blocks for ever in a select) when the
// request is not served by a server that signals it.
func Signal(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(key{}).(<-chan struct{})
	return ch
}

// Stopping reports whether the server serving ctx's request has begun to
// shut down.
func Stopping(ctx context.Context) bool {
	select {
	case <-Signal(ctx):
		return true
	default:
		return false
	}
}
