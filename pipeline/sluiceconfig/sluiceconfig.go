// Package sluiceconfig composes the configuration of a sluice process from
// the sections its components declare (shared/config is the mechanism):
// one Config that every command loads, checks (`sluice config check`),
// shows with credentials redacted (`sluice config show`) and renders as
// docs/configuration.md (`sluice config docs`). It adds only what no single
// component owns: the rules across sections (the Kafka size budget derived
// from the event store's envelope limits) and the checks that make sense
// for a deployed process (DATABASE_URL set, no unknown variable).
//
// It sits with the table of services (package pipeline), above the
// services whose sections it composes; the components themselves never see
// the whole configuration, only their sections.
package sluiceconfig

import (
	"errors"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/observability"
	"github.com/sluicehq/sluice/shared/tracing"
	"github.com/sluicehq/sluice/worker"
)

// Config is the whole configuration of a sluice process. Each service reads
// the sections it needs; Parse checks every section so a typo anywhere
// fails fast. The order of the fields is the order of docs/configuration.md.
type Config struct {
	Log           observability.LogConfig     `section:"Logging"`
	HTTP          observability.HTTPConfig    `section:"Health and metrics server"`
	Runtime       observability.RuntimeConfig `section:"Go runtime"`
	Postgres      migrations.PostgresConfig   `section:"Postgres"`
	EventStore    eventstore.Config           `section:"Event store"`
	Relay         relay.Config                `section:"Relay (event publisher)"`
	Kafka         kafka.Config                `section:"Kafka"`
	Registry      registry.Config             `section:"Processed-event registry"`
	Worker        worker.Settings             `section:"Workers"`
	Elasticsearch readmodel.Config            `section:"Elasticsearch"`
	API           api.Settings                `section:"HTTP API"`
	Schema        schema.Config               `section:"Event schemas"`
	Auth          auth.Config                 `section:"Access control"`
	Tracing       tracing.Config              `section:"Tracing (OpenTelemetry)"`
	Testing       crashpoint.Config           `section:"Fault injection (tests only)"`
}

// Derive computes the defaults that cross sections: KAFKA_MAX_MESSAGE_BYTES,
// when unset, is the size budget of the envelope limits; the servers of
// EVENT_STORE_SHARD_MAP are databases of the store role.
func (c *Config) Derive() {
	if c.Kafka.MaxMessageBytes == 0 {
		c.Kafka.MaxMessageBytes = kafka.MessageBudget(c.EventStore.MaxEnvelopeBytes, c.EventStore.MaxMetadataBytes)
	}
	// The servers of the store's shard map are databases of the store
	// role: migrated and opened with the others (an invalid map is
	// reported by the event store's section).
	c.Postgres.ShardURLs = nil
	if servers, err := c.EventStore.ShardServers(); err == nil {
		for _, sv := range servers {
			c.Postgres.ShardURLs = append(c.Postgres.ShardURLs, config.Secret(sv.URL))
		}
	}
}

// Load parses the configuration from environ (variable → value), applies
// defaults and validates it. Every problem is reported, each naming its
// variable, joined into one error whose parts are *config.VarError.
func Load(environ map[string]string) (*Config, error) {
	var c Config
	if err := config.Parse(&c, environ); err != nil {
		return nil, err
	}
	// KAFKA_GROUP_PREFIX defaults to the topic prefix; set empty, it keeps
	// the unprefixed group ids of earlier versions.
	if _, set := environ["KAFKA_GROUP_PREFIX"]; !set {
		c.Kafka.GroupPrefix = c.Kafka.TopicPrefix
	}
	return &c, nil
}

// FromOS loads the configuration from the process environment.
func FromOS() (*Config, error) { return Load(config.EnvironOS()) }

// Vars lists every variable a sluice process reads, in declaration order.
func Vars() []config.Var { return config.Vars(Config{}) }

// Markdown renders docs/configuration.md.
func Markdown() string { return config.Markdown(Vars()) }

// Settings lists every variable with its effective value, credentials
// redacted (`sluice config show`).
func (c *Config) Settings() []config.Setting { return config.Settings(c) }

// Check is what `sluice config check` runs on a deployment's environment:
// Load (every value parsed and validated), plus the checks that only make
// sense for a deployed service — DATABASE_URL must be set (sluice dev starts
// its own Postgres, so Load alone allows it unset), the limits must agree
// (CheckLimits) and no variable may look like a typo of one sluice reads
// (config.UnknownVars). All problems are joined.
func Check(environ map[string]string) (*Config, error) {
	var errs []error
	c, err := Load(environ)
	if err != nil {
		errs = append(errs, err)
	} else if err := c.CheckLimits(); err != nil {
		errs = append(errs, err)
	}
	if environ["DATABASE_URL"] == "" && environ["DATABASE_URL_FILE"] == "" {
		errs = append(errs, &config.VarError{Var: "DATABASE_URL", Reason: "must be set (postgres://user:password@host:5432/db?sslmode=require), or DATABASE_URL_FILE naming a file that holds it"})
	}
	errs = append(errs, config.UnknownVars(Vars(), environ)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// CheckOS runs Check on the process environment.
func CheckOS() (*Config, error) { return Check(config.EnvironOS()) }

// CheckLimits reports configured limits that disagree: a
// KAFKA_MAX_MESSAGE_BYTES below the budget an envelope at
// EVENT_STORE_MAX_ENVELOPE_BYTES needs (the store would accept envelopes the
// relay can only park), a budget above what Kafka's protocol can carry, and
// an EVENT_PUBLISHER_PARK_AFTER_ATTEMPTS below 1. The error names every
// variable at fault.
func (c *Config) CheckLimits() error {
	var errs []error
	need := kafka.MessageBudget(c.EventStore.MaxEnvelopeBytes, c.EventStore.MaxMetadataBytes)
	if m := c.Kafka.MaxMessageBytes; m > 0 && m < need {
		errs = append(errs, fmt.Errorf("KAFKA_MAX_MESSAGE_BYTES=%d is below the %d bytes an envelope at EVENT_STORE_MAX_ENVELOPE_BYTES=%d needs on Kafka (+ EVENT_STORE_MAX_METADATA_BYTES=%d for key and headers + %d framing): raise it, lower the envelope limit, or leave it unset (0) to derive it",
			m, need, c.EventStore.MaxEnvelopeBytes, c.EventStore.MaxMetadataBytes, kafka.FramingBytes))
	}
	if b := kafka.Budget(c.Kafka); b > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("size budget for Kafka %d bytes (KAFKA_MAX_MESSAGE_BYTES or EVENT_STORE_MAX_ENVELOPE_BYTES): exceeds %d, the most Kafka can carry", b, math.MaxInt32))
	}
	if c.Relay.ParkAfterAttempts < 1 {
		errs = append(errs, fmt.Errorf("EVENT_PUBLISHER_PARK_AFTER_ATTEMPTS=%d: must be at least 1", c.Relay.ParkAfterAttempts))
	}
	return errors.Join(errs...)
}

// InstanceWorker is the instance worker's part of c.
func (c *Config) InstanceWorker() instanceworker.Config {
	return instanceworker.Config{Kafka: c.Kafka, EventStore: c.EventStore, Registry: c.Registry, Worker: c.Worker, Elasticsearch: c.Elasticsearch, Testing: c.Testing}
}

// ProjectionWorker is the projection worker's part of c.
func (c *Config) ProjectionWorker() projectionworker.Config {
	return projectionworker.Config{Kafka: c.Kafka, EventStore: c.EventStore, Registry: c.Registry, Worker: c.Worker, Elasticsearch: c.Elasticsearch, Testing: c.Testing}
}

// RelayConfig is the relay section of a `sluice relay` process, with the
// store's append timeout (the relay must use the store's own); the relay
// takes c.Kafka as its relay.Deps.Kafka.
func (c *Config) RelayConfig() relay.Config {
	rc := c.Relay
	rc.AppendTimeout = c.EventStore.AppendTimeout
	return rc
}
