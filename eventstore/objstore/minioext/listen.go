package minioext

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/shared/backoff"
)

// ListenSegments subscribes to object-created notifications of bucket under
// prefix (MinIO's ListenBucketNotification) and returns a channel that
// receives a value whenever new objects may be there. The channel holds at
// most one pending wake-up (bursts coalesce) and is closed when ctx ends.
// A failed stream is re-subscribed with backoff, and a wake-up is sent
// after each reconnect since events may have been missed.
//
// It fails at once if the bucket does not exist (objstore.ErrNotFound) or
// the server cannot be reached (objstore.ErrUnavailable). The subscription
// becomes active shortly after it returns; objects created before that may
// not be notified — callers list once after subscribing.
func (c *Client) ListenSegments(ctx context.Context, bucket, prefix string) (<-chan struct{}, error) {
	ok, err := c.mc.BucketExists(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("minioext: listen %s/%s: %w", bucket, prefix, classify(ctx, err))
	}
	if !ok {
		return nil, fmt.Errorf("minioext: listen %s/%s: bucket %w", bucket, prefix, objstore.ErrNotFound)
	}
	out := make(chan struct{}, 1)
	go c.listen(ctx, bucket, prefix, out)
	return out, nil
}

func (c *Client) listen(ctx context.Context, bucket, prefix string, out chan<- struct{}) {
	defer close(out)
	wake := func() {
		select {
		case out <- struct{}{}:
		default: // one pending wake-up is enough
		}
	}
	bo := backoff.New(backoff.Policy{Base: c.reconnectMin, Cap: c.reconnectMax})
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			wake() // events may have been missed while disconnected
		}
		lctx, cancel := context.WithCancel(ctx)
		for info := range c.mc.ListenBucketNotification(lctx, bucket, prefix, "", []string{"s3:ObjectCreated:*"}) {
			if info.Err != nil {
				cancel() // minio-go closes the channel after an error
				continue
			}
			if len(info.Records) > 0 {
				bo.Reset()
				wake()
			}
		}
		cancel()
		_ = backoff.Sleep(ctx, bo.Next())
	}
}
