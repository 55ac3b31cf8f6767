package readmodel

import (
	"net/url"
	"time"

	"github.com/sluicehq/sluice/shared/config"
)

// Config configures the read-model cluster (docs/projectionworker.md).
type Config struct {
	URLs         []string      `env:"ELASTICSEARCH_URLS" envDefault:"http://localhost:9200" envSeparator:"," doc:"Comma-separated Elasticsearch node URLs."`
	APIKey       config.Secret `env:"ELASTICSEARCH_API_KEY" file:"true" doc:"API key (never logged)."`
	Username     string        `env:"ELASTICSEARCH_USERNAME" file:"true" doc:"Basic-auth user."`
	Password     config.Secret `env:"ELASTICSEARCH_PASSWORD" file:"true" doc:"Basic-auth password (never logged)."`
	IndexPrefix  string        `env:"ELASTICSEARCH_INDEX_PREFIX" envDefault:"sluice_" doc:"Prefix of every index and alias sluice creates."`
	BulkMaxDocs  int           `env:"ELASTICSEARCH_BULK_MAX_DOCS" envDefault:"1000" doc:"Most operations in one bulk request."`
	BulkMaxBytes int           `env:"ELASTICSEARCH_BULK_MAX_BYTES" envDefault:"5242880" doc:"Largest bulk request body."`
	// RequestTimeout bounds every Elasticsearch request of the workers
	// (readmodel.NewClient), so that a frozen cluster is an outage within
	// one timeout instead of a hang.
	RequestTimeout time.Duration `env:"ELASTICSEARCH_REQUEST_TIMEOUT" envDefault:"10s" doc:"Deadline of each Elasticsearch request (connect to last byte of the answer); a request past it counts as an Elasticsearch outage."`
}

// DefaultConfig is the section with the defaults of its tags, as a process
// with none of its variables set reads it.
func DefaultConfig() Config {
	var c Config
	config.Defaults(&c)
	return c
}

// Validate checks the section; every problem is a *config.VarError.
func (e Config) Validate() error {
	k := &config.Checker{}
	if len(e.URLs) == 0 {
		k.Fail("ELASTICSEARCH_URLS", "", "must name at least one URL")
	}
	for _, s := range e.URLs {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			k.Fail("ELASTICSEARCH_URLS", s, "every entry must be an http:// or https:// URL")
		}
	}
	k.AtLeast("ELASTICSEARCH_BULK_MAX_DOCS", int64(e.BulkMaxDocs), 1)
	k.AtLeast("ELASTICSEARCH_BULK_MAX_BYTES", int64(e.BulkMaxBytes), 1024)
	k.Positive("ELASTICSEARCH_REQUEST_TIMEOUT", e.RequestTimeout)
	return k.Err()
}
