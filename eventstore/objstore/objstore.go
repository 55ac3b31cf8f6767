// Package objstore provides the one object-storage interface the event store
// and the relay are written against (docs/objstore.md#backends), with two implementations —
// s3 (aws-sdk-go-v2: AWS S3, MinIO, any S3-compatible store) and file (a
// local directory for dev) — that pass one shared acceptance suite.
//
// It keeps the immutability half of docs/architecture.md#no-lost-work: segments are written with a
// conditional create that never overwrites, and the relay checkpoint with a
// conditional put (If-Match), so two writers can never both win. A backend
// that does not honour conditional creates is refused at start-up by
// SelfTest.
package objstore

import (
	"context"
	"errors"
	"time"
)

// Errors callers branch on. Backends wrap them (errors.Is works).
var (
	// ErrNotFound: the object (or bucket) does not exist.
	ErrNotFound = errors.New("objstore: not found")
	// ErrPreconditionFailed: a conditional write lost — Create found the key
	// already present, or Put's IfMatch ETag no longer matches.
	ErrPreconditionFailed = errors.New("objstore: precondition failed")
	// ErrUnavailable: the store could not be reached (connection refused,
	// timeouts, 5xx); callers pause and retry, they never skip work.
	ErrUnavailable = errors.New("objstore: unavailable")
	// ErrNotWritten: a write (Create, Put) definitely did not take effect:
	// no attempt reached the store in full (refused, DNS, reset while
	// sending), or the store answered every attempt that did with an error
	// status. It is wrapped next to the error's class (ErrUnavailable, …).
	// A failed write without it has an unknown outcome: the object may
	// exist, or appear later. ErrPreconditionFailed never carries it.
	ErrNotWritten = errors.New("objstore: not written")
	// ErrInvalidKey: the key breaks the rules of ValidateKey; the request
	// was not sent. Retrying cannot help.
	ErrInvalidKey = errors.New("objstore: invalid key")
	// ErrInvalidRange: GetRange asked for bytes that are not all inside the
	// object (negative offset, length < 1, or offset+length > size).
	ErrInvalidRange = errors.New("objstore: invalid range")
)

// ObjectInfo describes one stored object. ETag is the backend's opaque
// version tag without surrounding quotes (for single-part writes on both
// backends: the hex MD5 of the body); pass it back as PutOptions.IfMatch.
// Create and Put return Key, Size and ETag; LastModified is filled by Get,
// Stat and List only.
type ObjectInfo struct {
	Key          string
	Size         int64
	ETag         string
	LastModified time.Time
}

// PutOptions make Put conditional.
type PutOptions struct {
	// IfMatch, when set, writes only if the current object's ETag equals it.
	IfMatch string
}

// Bucket is the object-storage interface of the event store. Keys are
// '/'-separated and already safe (docs/architecture.md#aggregate-identity encodes ids before they reach a
// key); every method checks them with ValidateKey and fails with
// ErrInvalidKey, on every backend alike. Implementations are safe for
// concurrent use. Any error may wrap ErrUnavailable (pause and retry).
type Bucket interface {
	// Create writes key only if it does not exist yet (If-None-Match: *),
	// returning ErrPreconditionFailed if it does. The object is durable
	// when Create returns nil.
	Create(ctx context.Context, key string, body []byte) (ObjectInfo, error)
	// Put writes key unconditionally, or with opts.IfMatch only over that
	// exact version (ErrPreconditionFailed otherwise; ErrNotFound if the
	// object is missing and IfMatch is set).
	Put(ctx context.Context, key string, body []byte, opts PutOptions) (ObjectInfo, error)
	// Get reads a whole object.
	Get(ctx context.Context, key string) ([]byte, ObjectInfo, error)
	// GetRange reads exactly length bytes at offset (an HTTP Range GET). A
	// range not entirely inside the object fails with ErrInvalidRange, never
	// with a short read; a missing key with ErrNotFound.
	GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error)
	// Stat returns an object's info without its body.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// List returns up to limit objects whose key starts with prefix and
	// sorts strictly after startAfter, in lexicographic (byte-wise) key
	// order; limit <= 0 means no limit. Backends page internally (S3 pages
	// at 1,000 keys). A short result means there is nothing more.
	List(ctx context.Context, prefix, startAfter string, limit int) ([]ObjectInfo, error)
	// Delete removes key; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
}
