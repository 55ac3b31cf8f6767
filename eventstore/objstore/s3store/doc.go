// Package s3store provides the s3 backend of objstore (SPEC §5.1), built on
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
package s3store
