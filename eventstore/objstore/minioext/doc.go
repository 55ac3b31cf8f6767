// Package minioext provides what MinIO offers beyond plain S3 (docs/objstore.md#backends),
// through minio-go: bucket bootstrap for dev and tests (EnsureBucket) and
// bucket notifications as a low-latency wake-up for the relay
// (ListenSegments).
//
// Notifications are hints, never the source of truth: a wake-up says "list
// again now", it may be spurious, coalesced or late, and one is sent after
// every reconnect because events may have been missed meanwhile. The relay
// keeps polling at EVENT_PUBLISHER_POLL_INTERVAL regardless, so a lost
// notification costs latency, never work (docs/architecture.md#no-lost-work).
package minioext
