// Package client is the Go client of sluice's HTTP API (docs/api.md,
// /openapi.json): appends to event streams, stream and log reads with
// paging (iter.Seq2 iterators), Server-Sent-Event subscriptions to the log
// that resume by themselves, the instance commands with "wait until
// applied", and the admin API's reads.
//
// Guarantee kept: a retry never writes twice. Every write the client sends
// is idempotent on the server — an append carries an event_id for each
// event (generated when the caller leaves it empty) and a command carries
// an Idempotency-Key (generated likewise) — so a request whose reply was
// lost, or that was answered 502, 503 or 504, is repeated with the same
// ids and the API replays the stored result (docs/api.md, "Idempotency").
// A 429 is retried for every request (the API stored nothing); no other
// 4xx is ever retried. Retries back off exponentially with jitter and
// honour Retry-After, within the caller's context.
//
// The log is read by cursor (docs/api.md#the-log-cursor), on a store of
// any number of shards: LogPage.NextCursor continues a read, and
// Event.Cursor (every event a subscription delivers, the last event of a
// log page) is the place after an event, to store and pass back as
// LogOptions.Cursor or SubscribeOptions.Cursor. The client never
// interprets a cursor: the server owns its format. On a store of one
// shard the cursor is the log position and FromPosition works as before;
// a store of several shards refuses FromPosition with a 400, returned as
// a *ValidationError on Field "from_position".
//
// A subscription resumes after a disconnect, a server restart or the end
// of a stream from the cursor of the last event it delivered
// (Last-Event-ID), so it delivers every event of the log once, each
// aggregate's in order (on a store of one shard: the log's order).
//
// Errors are typed where callers branch and wrap *Error, the API's problem
// document: *ConflictError (409 optimistic_concurrency_conflict, with the
// stream's actual sequence), *ValidationError (400 and 422, with the
// offending field), *NotFoundError (404) and *CommandFailedError (a
// command the instance worker rejected or dead-lettered). Use errors.As.
//
// The package imports no other package of this module: a producer links
// it alone.
package client
