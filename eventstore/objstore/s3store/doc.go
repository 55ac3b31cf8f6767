// Package s3store provides the s3 backend of objstore (docs/objstore.md#backends), built on
// aws-sdk-go-v2: AWS S3, MinIO or any S3-compatible store, with path-style
// addressing, TLS (an https:// endpoint), static credentials or the default
// AWS credential chain, and ranged GETs.
//
// It keeps the write guarantees with the store's own conditional requests:
// Create sends If-None-Match: * and Put sends If-Match, and the answers
// 412 PreconditionFailed and 409 ConditionalRequestConflict become
// objstore.ErrPreconditionFailed — two writers can never both win. Stores
// that ignore these headers are caught by objstore.SelfTest at start-up.
//
// Errors are classified for callers: 404 is objstore.ErrNotFound; no
// response at all (connection refused, reset, timeout), 5xx, 429, SlowDown
// and RequestTimeout — after the SDK's own retries — are
// objstore.ErrUnavailable, always wrapped around the cause.
//
// It keeps explicit failure (docs/architecture.md#explicit-failure) for a store that hangs: every call
// runs under a deadline (Options.Timeout plus its body's transfer time), so
// a store that accepts connections but never answers fails calls with
// ErrUnavailable instead of holding them; and a failed write carries
// objstore.ErrNotWritten when no attempt can have taken effect, so callers
// can release what they reserved for it at once.
package s3store
