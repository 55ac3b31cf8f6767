package objstore

import (
	"time"

	"github.com/sluicehq/sluice/shared/config"
)

// S3Config is how the event store reaches an S3 bucket: the EVENT_STORE_S3_*
// part of the event store's section (eventstore.Config embeds it) and the
// deadline of one call, declared here, below s3store and minioext, so that
// the clients read the same defaults.
type S3Config struct {
	S3Endpoint        string        `env:"EVENT_STORE_S3_ENDPOINT" doc:"S3 endpoint URL (http://minio:9000). Empty uses AWS's regional endpoint."`
	S3Region          string        `env:"EVENT_STORE_S3_REGION" envDefault:"us-east-1" doc:"S3 region."`
	S3AccessKeyID     string        `env:"EVENT_STORE_S3_ACCESS_KEY_ID" file:"true" doc:"Static access key id. Empty uses the default AWS credential chain."`
	S3SecretAccessKey config.Secret `env:"EVENT_STORE_S3_SECRET_ACCESS_KEY" file:"true" doc:"Static secret access key (never logged)."`
	S3PathStyle       bool          `env:"EVENT_STORE_S3_PATH_STYLE" envDefault:"true" doc:"Use path-style addressing (needed by MinIO)."`
	ObjectTimeout     time.Duration `env:"EVENT_STORE_OBJECT_TIMEOUT" envDefault:"5s" doc:"Deadline of one object-storage call, retries included, plus transfer time at 1 MiB/s: a hung store fails appends with 503 after it instead of blocking them."`
}

// DefaultS3Config is the section with the defaults of its tags.
func DefaultS3Config() S3Config {
	var c S3Config
	config.Defaults(&c)
	return c
}
