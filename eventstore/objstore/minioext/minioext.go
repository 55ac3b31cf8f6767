package minioext

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/sluicehq/sluice/eventstore/objstore"
)

// Options configure a Client; they mirror s3store.Options.
type Options struct {
	// Endpoint is the MinIO URL (http://minio:9000); https speaks TLS.
	Endpoint string
	// Region of the buckets (used by EnsureBucket); empty is us-east-1.
	Region string
	// AccessKeyID and SecretAccessKey are static credentials; when both
	// are empty, the environment (AWS_* or MINIO_*), the shared AWS
	// credentials file and IAM roles are tried in turn.
	AccessKeyID     string
	SecretAccessKey string
	// Transport replaces the default HTTP transport (custom CAs).
	Transport http.RoundTripper
	// ReconnectMin and ReconnectMax bound the backoff between attempts to
	// re-subscribe after the notification stream failed (defaults 250ms
	// and 5s).
	ReconnectMin, ReconnectMax time.Duration
}

// Client talks to one MinIO deployment.
type Client struct {
	mc                         *minio.Client
	region                     string
	reconnectMin, reconnectMax time.Duration
}

// New builds a Client; it does not contact the server.
func New(o Options) (*Client, error) {
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("minioext: endpoint %q must be an http:// or https:// URL", o.Endpoint)
	}
	if (o.AccessKeyID == "") != (o.SecretAccessKey == "") {
		return nil, errors.New("minioext: access key id and secret access key must be set together")
	}
	creds := credentials.NewStaticV4(o.AccessKeyID, o.SecretAccessKey, "")
	if o.AccessKeyID == "" {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.EnvMinio{},
			&credentials.FileAWSCredentials{}, &credentials.IAM{},
		})
	}
	if o.Region == "" {
		o.Region = objstore.DefaultS3Config().S3Region
	}
	mc, err := minio.New(u.Host, &minio.Options{
		Creds:        creds,
		Secure:       u.Scheme == "https",
		Region:       o.Region,
		Transport:    o.Transport,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, fmt.Errorf("minioext: %w", err)
	}
	c := &Client{mc: mc, region: o.Region, reconnectMin: o.ReconnectMin, reconnectMax: o.ReconnectMax}
	if c.reconnectMin <= 0 {
		c.reconnectMin = 250 * time.Millisecond
	}
	if c.reconnectMax < c.reconnectMin {
		c.reconnectMax = max(5*time.Second, c.reconnectMin)
	}
	return c, nil
}

// EnsureBucket creates bucket unless it exists (dev and test bootstrap;
// production buckets are provisioned by operators).
func (c *Client) EnsureBucket(ctx context.Context, bucket string) error {
	ok, err := c.mc.BucketExists(ctx, bucket)
	if err != nil {
		return fmt.Errorf("minioext: bucket %s: %w", bucket, classify(ctx, err))
	}
	if ok {
		return nil
	}
	err = c.mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: c.region})
	if err != nil {
		switch minio.ToErrorResponse(err).Code {
		case "BucketAlreadyOwnedByYou", "BucketAlreadyExists":
			return nil // created concurrently
		}
		return fmt.Errorf("minioext: create bucket %s: %w", bucket, classify(ctx, err))
	}
	return nil
}

// classify marks errors without an HTTP answer, and 5xx, as unavailable.
func classify(ctx context.Context, err error) error {
	status := minio.ToErrorResponse(err).StatusCode
	switch {
	case status >= 500 || status == http.StatusTooManyRequests:
		return fmt.Errorf("%w: %w", objstore.ErrUnavailable, err)
	case status == http.StatusNotFound:
		return fmt.Errorf("%w: %w", objstore.ErrNotFound, err)
	case status == 0 && !(errors.Is(err, context.Canceled) && ctx.Err() != nil):
		return fmt.Errorf("%w: %w", objstore.ErrUnavailable, err)
	}
	return err
}
