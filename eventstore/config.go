package eventstore

import (
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/envelope"
)

var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// Config configures the segment log (docs/eventstore.md).
type Config struct {
	Backend string `env:"EVENT_STORE_BACKEND" envDefault:"s3" doc:"Object storage backend: s3 (AWS S3, MinIO, any S3-compatible store) or file (a local directory, single host)."`
	Bucket  string `env:"EVENT_STORE_BUCKET" envDefault:"sluice-events" doc:"Bucket (s3) holding segments/ and checkpoints/."`
	FileDir string `env:"EVENT_STORE_FILE_DIR" envDefault:"./data/events" doc:"Root directory of the file backend; the bucket is a folder below it."`
	// The EVENT_STORE_S3_* connection settings.
	objstore.S3Config
	GroupCommitMaxWait      time.Duration `env:"EVENT_STORE_GROUP_COMMIT_MAX_WAIT" envDefault:"5ms" doc:"Longest time the committer gathers appends into one group while another group is in flight (an idle committer starts at once, or after EVENT_STORE_GROUP_COMMIT_LINGER in a steady stream)."`
	GroupCommitLinger       time.Duration `env:"EVENT_STORE_GROUP_COMMIT_LINGER" envDefault:"2ms" doc:"How long an idle committer waits before it starts a group when appends arrive closer together than this (a steady stream): the appends of that time share the group's reservation, segment, commit and notification. An append after a longer pause starts at once, and the wait never exceeds EVENT_STORE_GROUP_COMMIT_MAX_WAIT. 0: an idle committer always starts at once."`
	GroupCommitMaxEvents    int           `env:"EVENT_STORE_GROUP_COMMIT_MAX_EVENTS" envDefault:"500" doc:"Most envelopes in one group (one segment)."`
	IdempotencyMismatchMode string        `env:"EVENT_STORE_IDEMPOTENCY_MISMATCH_MODE" envDefault:"error" doc:"Same event_id with a different payload: error (reject with a conflict) or warn (log and return the stored event)."`
	SequenceAllocatorMode   string        `env:"EVENT_STORE_SEQUENCE_ALLOCATOR_MODE" envDefault:"postgres" doc:"postgres (the store assigns sequence numbers atomically) or off (the caller supplies sequence_number)."`
	AppendTimeout           time.Duration `env:"EVENT_STORE_APPEND_TIMEOUT" envDefault:"30s" doc:"Age after which a reserved-but-uncommitted append is treated as crashed (relay repair/abandon)."`
	Shards                  int           `env:"EVENT_STORE_SHARDS" envDefault:"1" doc:"Shards of the log (1 to 1024): an aggregate lives in one shard, each shard has its own head and positions. Fixed when the store is created (recorded in the index); a store opened with another number is refused (docs/scale-out.md#changing-the-number-of-shards). 1 is the layout of a store from before shards. Above 1 the log is read by cursor (docs/api.md#the-log-cursor), and the relay has a leader per shard (docs/relay.md#shards)."`
	ShardMap                config.Secret `env:"EVENT_STORE_SHARD_MAP" file:"true" doc:"Shards over several Postgres servers: comma-separated FIRST-LAST=postgres://… entries whose ranges cover shards 0 to EVENT_STORE_SHARDS-1 exactly once (0-1=postgres://a/sluice,2-3=postgres://b/sluice). Each shard lives wholly on its server; every server is migrated by sluice migrate up. Unset: every shard on EVENT_STORE_DATABASE_URL. Fixed when the store is created, like the number of shards (docs/scale-out.md#shards-over-several-servers)."`
	// The EVENT_STORE_MAX_* envelope limits.
	envelope.Limits

	// The knobs a library caller sets in Go (no variable).

	// WriterID names this writer in appends.writer_id. Default: a random id
	// per Store.
	WriterID string
	// MaxInFlightGroups bounds the groups between reservation and commit at
	// once (pipelining: a group reserves while the previous one writes its
	// segment). Default 4.
	MaxInFlightGroups int
	// MaxReservingGroups bounds the groups in their reservation round trip
	// at once (at most MaxInFlightGroups). Default 1: the next group gathers
	// while one reserves, which keeps groups large. With more, a group may
	// reserve while the previous one waits for its WAL flush (the log_head
	// lock is released before the flush, so they overlap), at the price of
	// smaller groups; positions still follow reservation commit order.
	MaxReservingGroups int
	// ReadConcurrency bounds parallel ranged GETs of one read. Default 8.
	ReadConcurrency int
	// LayoutNoWait makes New fail with a *LayoutPendingError (Once set)
	// when it cannot read the store's layout (Postgres down, migrations
	// not applied), instead of starting and checking it in the background:
	// for a command that runs once (the operator commands), which would
	// otherwise log that it keeps checking and then fail its first
	// operation anyway. Default false: a service waits out an outage.
	LayoutNoWait bool
}

// DefaultConfig is the section with the defaults of its tags, as a process
// with none of its variables set reads it (before Derive).
func DefaultConfig() Config {
	var c Config
	config.Defaults(&c)
	return c
}

// Validate checks the section; every problem is a *config.VarError.
func (es Config) Validate() error {
	k := &config.Checker{}
	k.OneOf("EVENT_STORE_BACKEND", es.Backend, "s3", "file")
	if !bucketName.MatchString(es.Bucket) {
		k.Fail("EVENT_STORE_BUCKET", es.Bucket, "must be a valid bucket name (3-63 characters: a-z, 0-9, '.', '-')")
	}
	if es.Backend == "file" && es.FileDir == "" {
		k.Fail("EVENT_STORE_FILE_DIR", "", "must be set when EVENT_STORE_BACKEND=file")
	}
	if es.S3Endpoint != "" {
		if u, err := url.Parse(es.S3Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			k.Fail("EVENT_STORE_S3_ENDPOINT", es.S3Endpoint, "must be an http:// or https:// URL")
		}
	}
	if (es.S3AccessKeyID == "") != (es.S3SecretAccessKey == "") {
		k.Fail("EVENT_STORE_S3_ACCESS_KEY_ID", "", "EVENT_STORE_S3_ACCESS_KEY_ID and EVENT_STORE_S3_SECRET_ACCESS_KEY(_FILE) must be set together")
	}
	k.Positive("EVENT_STORE_GROUP_COMMIT_MAX_WAIT", es.GroupCommitMaxWait)
	if es.GroupCommitLinger < 0 {
		k.Fail("EVENT_STORE_GROUP_COMMIT_LINGER", es.GroupCommitLinger.String(), "must not be negative (0 turns the linger off)")
	}
	k.AtLeast("EVENT_STORE_GROUP_COMMIT_MAX_EVENTS", int64(es.GroupCommitMaxEvents), 1)
	k.OneOf("EVENT_STORE_IDEMPOTENCY_MISMATCH_MODE", es.IdempotencyMismatchMode, "error", "warn")
	k.OneOf("EVENT_STORE_SEQUENCE_ALLOCATOR_MODE", es.SequenceAllocatorMode, "postgres", "off")
	k.Positive("EVENT_STORE_APPEND_TIMEOUT", es.AppendTimeout)
	k.Positive("EVENT_STORE_OBJECT_TIMEOUT", es.ObjectTimeout)
	if es.Shards < 1 || es.Shards > MaxShards {
		k.Fail("EVENT_STORE_SHARDS", strconv.Itoa(es.Shards), "must be between 1 and %d", MaxShards)
	}
	if es.Shards >= 1 && es.Shards <= MaxShards {
		if _, err := es.ShardServers(); err != nil {
			k.Fail("EVENT_STORE_SHARD_MAP", "", "%s", err)
		}
	}
	k.AtLeast("EVENT_STORE_MAX_ENVELOPE_BYTES", int64(es.MaxEnvelopeBytes), 1024)
	k.AtLeast("EVENT_STORE_MAX_DATA_DEPTH", int64(es.MaxDataDepth), 1)
	k.AtLeast("EVENT_STORE_MAX_METADATA_BYTES", int64(es.MaxMetadataBytes), 256)
	return k.Err()
}
