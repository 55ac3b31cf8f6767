package inspect

import (
	"github.com/elastic/go-elasticsearch/v8"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/kafka"
)

// Deps are the clients a process already has, for New.
type Deps struct {
	Pool      *pgxpool.Pool
	Store     *eventstore.Store
	Bucket    objstore.Bucket
	Registry  *registry.Registry
	Sequences SequenceReader
	// ES may be nil (no document steps).
	ES *elasticsearch.Client
	// Handlers are the deployment's workers.
	Handlers []Handler
}

// Config is what the inspector reads of the process configuration.
type Config struct {
	Kafka         kafka.Config
	Relay         relay.Config
	Elasticsearch readmodel.Config
}

// Option is a test hook of an Inspector (docs/architecture.md, "One
// construction convention"); there are none yet.
type Option func(*settings)

// New returns an Inspector for the configuration (docs/architecture.md,
// "One construction convention"): the relay's name, checkpoint and
// routing, the Kafka connection and the index prefix come from cfg, the
// clients from d.
func New(cfg Config, d Deps, opts ...Option) (*Inspector, error) {
	kopts, err := kafka.Opts(cfg.Kafka)
	if err != nil {
		return nil, err
	}
	name, key := cfg.Relay.Name, cfg.Relay.CheckpointKey
	if name == "" {
		name = "default"
	}
	if key == "" {
		key = "checkpoints/" + name + ".json"
	}
	o := settings{Store: d.Store, Registry: d.Registry, Sequences: d.Sequences, Handlers: d.Handlers,
		Router: relay.NewRouter(cfg.Kafka.CommandsTopic, cfg.Kafka.EventsTopic, nil), RelayName: name,
		KafkaOpts: kopts, ES: d.ES, IndexPrefix: cfg.Elasticsearch.IndexPrefix}
	if d.Bucket != nil {
		o.Checkpoint = relay.NewCheckpointStore(d.Bucket, key)
	}
	if d.Pool != nil {
		o.Parked = relay.NewParkedStore(d.Pool)
	}
	for _, opt := range opts {
		opt(&o)
	}
	return build(o)
}
