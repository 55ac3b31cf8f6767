package kafka_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/recordformat"
)

func newCluster(t *testing.T, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// TestNewClientAuthenticatesAsConfigured connects to a SASL-enabled kfake
// cluster with each mechanism sluice supports: the configured user gets in,
// a wrong password does not, and no client goes without authenticating.
func TestNewClientAuthenticatesAsConfigured(t *testing.T) {
	brokers := newCluster(t, kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plain-user", "plain-pass"),
		kfake.Superuser("SCRAM-SHA-256", "scram256-user", "scram256-pass"),
		kfake.Superuser("SCRAM-SHA-512", "scram512-user", "scram512-pass"))
	for _, tc := range []struct {
		name, mech, user, pass string
		ok                     bool
	}{
		{"PLAIN", "PLAIN", "plain-user", "plain-pass", true},
		{"SCRAM-SHA-256", "SCRAM-SHA-256", "scram256-user", "scram256-pass", true},
		{"SCRAM-SHA-512", "SCRAM-SHA-512", "scram512-user", "scram512-pass", true},
		{"wrong password", "SCRAM-SHA-256", "scram256-user", "nope", false},
		{"no SASL configured", "", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := kafka.NewClient(kafka.Config{Brokers: brokers, SASLMechanism: tc.mech, SASLUsername: tc.user, SASLPassword: config.Secret(tc.pass)},
				kgo.RetryTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			_, err = kadm.NewClient(cl).ListTopics(ctx)
			if tc.ok && err != nil {
				t.Fatalf("list topics as %s/%s: %v", tc.mech, tc.user, err)
			}
			if !tc.ok && err == nil {
				t.Fatalf("list topics as %q/%q succeeded, want an authentication failure", tc.mech, tc.user)
			}
			if err != nil && tc.pass != "" && strings.Contains(err.Error(), tc.pass) {
				t.Errorf("error %q contains the password", err)
			}
		})
	}
}

// TestOptsCarryTLSAndProducerSettings checks what every client built from a
// configuration gets: TLS 1.2 or later when KAFKA_TLS is set (none
// otherwise), acks=all, and the size budget as its largest record batch —
// derived from the envelope limits when KAFKA_MAX_MESSAGE_BYTES is unset.
func TestOptsCarryTLSAndProducerSettings(t *testing.T) {
	brokers := newCluster(t)
	derived := kafka.MessageBudget(envelope.DefaultLimits().MaxEnvelopeBytes, envelope.DefaultLimits().MaxMetadataBytes)
	for _, tc := range []struct {
		name       string
		cfg        kafka.Config
		wantTLS    bool
		wantBudget int
	}{
		{"plain, derived budget", kafka.Config{Brokers: brokers}, false, derived},
		{"TLS", kafka.Config{Brokers: brokers, TLS: true}, true, derived},
		{"explicit budget", kafka.Config{Brokers: brokers, MaxMessageBytes: 4 << 20}, false, 4 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := kafka.NewClient(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			tlsCfg, _ := cl.OptValue(kgo.DialTLSConfig).(*tls.Config)
			switch {
			case tc.wantTLS && tlsCfg == nil:
				t.Error("KAFKA_TLS=true: the client dials without TLS")
			case tc.wantTLS && tlsCfg.MinVersion < tls.VersionTLS12:
				t.Errorf("TLS MinVersion %x, want at least TLS 1.2", tlsCfg.MinVersion)
			case !tc.wantTLS && tlsCfg != nil:
				t.Error("KAFKA_TLS=false: the client dials with TLS")
			}
			if got, _ := cl.OptValue(kgo.ProducerBatchMaxBytes).(int32); int(got) != tc.wantBudget {
				t.Errorf("ProducerBatchMaxBytes = %d, want %d", got, tc.wantBudget)
			}
			if got := cl.OptValue(kgo.RequiredAcks); got != kgo.AllISRAcks() {
				t.Errorf("RequiredAcks = %v, want all ISR", got)
			}
		})
	}
}

func TestOptsRefuseUnknownSASLMechanism(t *testing.T) {
	_, err := kafka.Opts(kafka.Config{Brokers: []string{"localhost:9092"}, SASLMechanism: "GSSAPI", SASLPassword: "hunter2"})
	var ve *config.VarError
	if !errors.As(err, &ve) || ve.Var != "KAFKA_SASL_MECHANISM" {
		t.Fatalf("err = %v, want a *config.VarError naming KAFKA_SASL_MECHANISM", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %q contains the password", err)
	}
}

// KAFKA_RECORD_FORMAT is envelope by default, cloudevents when set so,
// and anything else stops the process at start-up naming the variable.
func TestRecordFormatSetting(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want recordformat.Format
		bad  bool
	}{
		{env: map[string]string{}, want: recordformat.Envelope},
		{env: map[string]string{"KAFKA_RECORD_FORMAT": "cloudevents"}, want: recordformat.CloudEvents},
		{env: map[string]string{"KAFKA_RECORD_FORMAT": "envelope"}, want: recordformat.Envelope},
		{env: map[string]string{"KAFKA_RECORD_FORMAT": "avro"}, bad: true},
	} {
		t.Run(c.env["KAFKA_RECORD_FORMAT"], func(t *testing.T) {
			var cfg kafka.Config
			err := config.Parse(&cfg, c.env)
			var ve *config.VarError
			if c.bad {
				if !errors.As(err, &ve) || ve.Var != "KAFKA_RECORD_FORMAT" {
					t.Fatalf("err = %v, want a *config.VarError naming KAFKA_RECORD_FORMAT", err)
				}
				return
			}
			if err != nil || cfg.Format() != c.want {
				t.Fatalf("format %q %v, want %q", cfg.Format(), err, c.want)
			}
		})
	}
}

// TestEnsureTopicsUsesTheConfiguredSpec creates topics on a three-broker
// kfake cluster: they get KAFKA_TOPIC_PARTITIONS partitions,
// KAFKA_TOPIC_REPLICATION_FACTOR replicas each and the size budget as
// max.message.bytes, and a replication factor the cluster cannot hold is
// refused rather than silently lowered.
func TestEnsureTopicsUsesTheConfiguredSpec(t *testing.T) {
	brokers := newCluster(t, kfake.NumBrokers(3))
	cfg := kafka.Config{Brokers: brokers, TopicPartitions: 5, ReplicationFactor: 3, MaxMessageBytes: 2_100_000}
	cl, err := kafka.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := t.Context()
	adm := kadm.NewClient(cl)
	if err := kafka.EnsureTopics(ctx, cl, cfg, "events", "events.dlq"); err != nil {
		t.Fatal(err)
	}
	td, err := adm.ListTopics(ctx, "events", "events.dlq")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"events", "events.dlq"} {
		d, ok := td[name]
		if !ok {
			t.Fatalf("topic %s was not created", name)
		}
		if got := len(d.Partitions); got != 5 {
			t.Errorf("%s: %d partitions, want 5", name, got)
		}
		for _, p := range d.Partitions {
			if got := len(p.Replicas); got != 3 {
				t.Errorf("%s/%d: %d replicas, want 3", name, p.Partition, got)
			}
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "events", "events.dlq")
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range rcs {
		got := ""
		for _, c := range rc.Configs {
			if c.Key == "max.message.bytes" && c.Value != nil {
				got = *c.Value
			}
		}
		if got != strconv.Itoa(cfg.MaxMessageBytes) {
			t.Errorf("%s: max.message.bytes = %q, want %d", rc.Name, got, cfg.MaxMessageBytes)
		}
	}

	tooMany := cfg
	tooMany.ReplicationFactor = 4
	err = kafka.EnsureTopics(ctx, cl, tooMany, "four-replicas")
	if !errors.Is(err, kerr.InvalidReplicationFactor) {
		t.Errorf("replication factor 4 on 3 brokers: err = %v, want InvalidReplicationFactor", err)
	}
}
