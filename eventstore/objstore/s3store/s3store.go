package s3store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluicehq/sluice/eventstore/objstore"
)

// Defaults of Options' zero values; the region and the timeout of one call
// default to those of EVENT_STORE_S3_REGION and EVENT_STORE_OBJECT_TIMEOUT
// (objstore.DefaultS3Config).
const (
	DefaultMaxAttempts           = 3
	DefaultMaxBackoff            = 5 * time.Second
	DefaultConnectTimeout        = 5 * time.Second
	DefaultResponseHeaderTimeout = 30 * time.Second
	// DefaultMinBytesPerSecond is the slowest transfer a call's deadline
	// allows for its body (1 MiB/s: a 1 MiB segment adds 1 s).
	DefaultMinBytesPerSecond = 1 << 20
	// listPage is the most keys one ListObjectsV2 call returns.
	listPage = 1000
)

// Options configure a Bucket. Zero values take the defaults above.
type Options struct {
	// Bucket is the bucket name (required).
	Bucket string
	// Endpoint is the store's URL (http://minio:9000, https://s3.example);
	// an https URL speaks TLS. Empty uses AWS's regional endpoint.
	Endpoint string
	// Region of the bucket.
	Region string
	// PathStyle addresses buckets as endpoint/bucket/key (MinIO needs it)
	// instead of bucket.endpoint/key.
	PathStyle bool
	// AccessKeyID and SecretAccessKey are static credentials; when both are
	// empty the default AWS credential chain is used (environment, shared
	// files, web identity, ECS/EC2 roles).
	AccessKeyID     string
	SecretAccessKey string
	// HTTPClient replaces the built-in client (custom CAs, proxies); the
	// two timeouts below then do not apply.
	HTTPClient *http.Client
	// MaxAttempts is the number of tries of one request, the first
	// included, before an error is returned.
	MaxAttempts int
	// MaxBackoff caps the jittered exponential delay between tries.
	MaxBackoff time.Duration
	// ConnectTimeout bounds establishing a TCP connection.
	ConnectTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a response once the
	// request has been sent (one attempt).
	ResponseHeaderTimeout time.Duration
	// Timeout bounds one call of the Bucket, every attempt and backoff
	// included (EVENT_STORE_OBJECT_TIMEOUT): a store that does not answer
	// fails the call with objstore.ErrUnavailable after it. Calls that
	// move a body get MinBytesPerSecond on top: Create and Put for the
	// body they send, GetRange for the range, Get for the size its
	// response announces (the wait for that response is bounded by
	// Timeout alone).
	Timeout time.Duration
	// MinBytesPerSecond is the slowest transfer rate a call's deadline
	// allows for its body.
	MinBytesPerSecond int64
}

// Bucket is one S3 bucket; it is safe for concurrent use.
type Bucket struct {
	client  *s3.Client
	bucket  string
	timeout time.Duration
	minRate int64
}

var _ objstore.Bucket = (*Bucket)(nil)

// New builds a Bucket. It does not contact the store; run
// objstore.SelfTest to check it (backend.Open does).
func New(ctx context.Context, o Options) (*Bucket, error) {
	if o.Bucket == "" {
		return nil, errors.New("s3store: empty bucket name")
	}
	o = o.withDefaults()
	var httpClient config.HTTPClient = o.HTTPClient
	if o.HTTPClient == nil {
		httpClient = awshttp.NewBuildableClient().
			WithDialerOptions(func(d *net.Dialer) { d.Timeout = o.ConnectTimeout }).
			WithTransportOptions(func(t *http.Transport) {
				t.ResponseHeaderTimeout = o.ResponseHeaderTimeout
				t.MaxIdleConnsPerHost = 64 // parallel ranged GETs of the relay and Stream
			})
	}
	loadOpts := []func(*config.LoadOptions) error{
		config.WithRegion(o.Region),
		config.WithHTTPClient(httpClient),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(so *retry.StandardOptions) {
				so.MaxAttempts = o.MaxAttempts
				so.MaxBackoff = o.MaxBackoff
			})
		}),
	}
	if o.AccessKeyID != "" || o.SecretAccessKey != "" {
		if o.AccessKeyID == "" || o.SecretAccessKey == "" {
			return nil, errors.New("s3store: access key id and secret access key must be set together")
		}
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("s3store: load AWS configuration: %w", err)
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = o.PathStyle
		// Wrapped after the configuration was loaded (a custom CA bundle
		// is applied to the SDK's own client type): it tells writes that
		// never took effect from those with an unknown outcome.
		so.HTTPClient = tracingClient{next: so.HTTPClient}
		// Request checksums (CRC32 on uploads) stay on: MinIO and S3 verify
		// them. Response validation needs whole-object checksums, which
		// ranged GETs never have; skip it rather than log on every read.
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return &Bucket{client: client, bucket: o.Bucket, timeout: o.Timeout, minRate: o.MinBytesPerSecond}, nil
}

func (o Options) withDefaults() Options {
	def := objstore.DefaultS3Config()
	if o.Region == "" {
		o.Region = def.S3Region
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.ResponseHeaderTimeout <= 0 {
		o.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if o.Timeout <= 0 {
		o.Timeout = def.ObjectTimeout
	}
	if o.MinBytesPerSecond <= 0 {
		o.MinBytesPerSecond = DefaultMinBytesPerSecond
	}
	return o
}

// Name returns the bucket name.
func (b *Bucket) Name() string { return b.bucket }

// Client returns the underlying SDK client, for tools that need more than
// objstore.Bucket offers.
func (b *Bucket) Client() *s3.Client { return b.client }
