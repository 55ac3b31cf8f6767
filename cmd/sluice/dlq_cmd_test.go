package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/dlq"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/worker"
)

// kafkaFixture is a kfake cluster configured through the environment, with a
// client for the test's own produce/consume/admin work.
type kafkaFixture struct {
	brokers []string
	kopts   []kgo.Opt
	cl      *kgo.Client
	adm     *kadm.Client
}

func newKafkaFixture(t *testing.T) *kafkaFixture {
	t.Helper()
	k := testenv.NewKafka(t)
	t.Setenv("KAFKA_BROKERS", strings.Join(k.Brokers, ","))
	t.Setenv("KAFKA_TOPIC_REPLICATION_FACTOR", "1")
	t.Setenv("SLUICE_LOG_LEVEL", "warn")
	kopts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &kafkaFixture{brokers: k.Brokers, kopts: kopts, cl: cl, adm: kadm.NewClient(cl)}
}

func (k *kafkaFixture) createTopic(t *testing.T, topic string, partitions int32) {
	t.Helper()
	if _, err := k.adm.CreateTopic(context.Background(), partitions, 1, nil, topic); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

// dlqTopics creates a command topic of partitions and its dead-letter
// topic (one partition) and returns their names.
func (k *kafkaFixture) dlqTopics(t *testing.T, partitions int32) (orig, dlq string) {
	t.Helper()
	orig = testenv.UniqueName("cmds.")
	dlq = orig + ".dlq"
	k.createTopic(t, orig, partitions)
	k.createTopic(t, dlq, 1)
	return orig, dlq
}

func (k *kafkaFixture) produce(t *testing.T, rs ...*kgo.Record) {
	t.Helper()
	if err := k.cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// records reads every record of topic present now.
func (k *kafkaFixture) records(t *testing.T, topic string) []*kgo.Record {
	t.Helper()
	return testenv.ReadTopic(t, k.brokers, topic)
}

// dlqLetterRecord builds a dead letter of orig in the shape of docs/worker-runtime.md#the-dead-letter-record, the way
// the worker runtime does.
func dlqLetterRecord(topic, handler string, orig *kgo.Record, class, errText string) *kgo.Record {
	now := time.Now()
	r, err := worker.DeadLetterRecord(topic, handler, orig, class, errText, 1, now, now)
	if err != nil {
		panic(err)
	}
	return r
}

// dlq list/show/redrive/drop end to end on kfake and a real Postgres
// registry: exact letters, decoded originals, the registry row reset and the
// original re-produced byte for byte exactly once however often a letter is
// redriven, duplicates and dropped letters skipped, an interrupted redrive
// completed, durable drops hidden from list.
func TestDLQListShowRedriveDrop(t *testing.T) {
	ctx := context.Background()
	_, reg := envRegistry(t, "test")
	k := newKafkaFixture(t)
	orig, dlqTopic := k.dlqTopics(t, 2)
	const handler = "instanceworker"
	dead := func(eventID, agg string) {
		t.Helper()
		res, err := reg.Claim(ctx, claim.Request{Handler: handler, EventID: eventID, AggregateID: agg, Seq: 1, Policy: claim.SkipStale})
		if err != nil || res.Kind != claim.Claimed {
			t.Fatalf("claim %s: %v %v", eventID, res.Kind, err)
		}
		if _, err := reg.MarkFailed(ctx, res.Lease, claim.Failure{Err: errors.New("permanent: boom")}); err != nil {
			t.Fatal(err)
		}
	}
	status := func(eventID string) claim.Status {
		t.Helper()
		rows, err := reg.Get(ctx, eventID)
		if err != nil || len(rows) != 1 {
			t.Fatalf("registry %s: %v %v", eventID, rows, err)
		}
		return rows[0].Status
	}
	// Originals: four commands (dead rows) and one record that is no envelope.
	ids := make([]string, 5)
	origs := make([]*kgo.Record, 5)
	for i := range origs {
		ids[i] = uuid.NewString()
		agg := "shop:orders:" + ids[i][:8]
		origs[i] = &kgo.Record{Topic: orig, Partition: int32(i % 2), Key: []byte("Instance:" + agg),
			Value:   []byte(`{"event_id":"` + ids[i] + `","event_type":"CREATE_INSTANCE","kind":"command","aggregate_id":"` + agg + `"}`),
			Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(ids[i])}, {Key: "kind", Value: []byte("command")}, {Key: "bin", Value: []byte{0xff, 0x00, 0x01}}}}
		if i != 1 {
			dead(ids[i], agg)
		}
	}
	origs[1].Value, origs[1].Headers = []byte{0xde, 0xad, 0xbe, 0xef, '{'}, nil
	// Pin the originals' partitions for the test's produce, then restore
	// the key partitioning the relay and redrive use.
	pk, err := kgo.NewClient(append(k.kopts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer pk.Close()
	if err := pk.ProduceSync(ctx, origs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	base := map[int32]int64{} // end offsets before any redrive
	for _, r := range k.records(t, orig) {
		base[r.Partition] = max(base[r.Partition], r.Offset+1)
	}
	redriven := func() []*kgo.Record {
		var out []*kgo.Record
		for _, r := range k.records(t, orig) {
			if r.Offset >= base[r.Partition] {
				out = append(out, r)
			}
		}
		return out
	}
	// Letters 0..5: 0 permanent, 1 parse, 2 duplicate of 0, 3 to drop,
	// 4 interrupted after the registry reset, 5 reset by someone else.
	k.produce(t,
		dlqLetterRecord(dlqTopic, handler, origs[0], "permanent", "permanent: unknown command type"),
		dlqLetterRecord(dlqTopic, handler, origs[1], "parse", "parse: invalid character"),
		dlqLetterRecord(dlqTopic, handler, origs[0], "permanent", "permanent: unknown command type"),
		dlqLetterRecord(dlqTopic, handler, origs[2], "retryable", "retryable: es 503 after 5 attempts"),
		dlqLetterRecord(dlqTopic, handler, origs[3], "permanent", "permanent: x"),
		dlqLetterRecord(dlqTopic, handler, origs[4], "permanent", "permanent: y"),
	)

	out, _, err := runOps(t, "dlq", "list", "--topic", dlqTopic)
	if err != nil || !strings.Contains(out, "6 letters, 6 shown, 0 handled") || strings.Count(out, "\n") != 8 {
		t.Fatalf("list: %v\n%s", err, out)
	}
	for _, want := range []string{orig + "/0/0", "parse", "unknown command type", "retryable"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	if !opHasLine(out, "0:0", "new") || !opHasLine(out, "0:5", "new") {
		t.Errorf("list rows:\n%s", out)
	}
	out, _, err = runOps(t, "dlq", "list", "--topic", dlqTopic, "--limit", "2")
	if err != nil || !strings.Contains(out, "2 shown") || !strings.Contains(out, "4 more not shown") {
		t.Errorf("list --limit: %v\n%s", err, out)
	}
	out, _, err = runOps(t, "dlq", "show", "--topic", dlqTopic, "--offset", "0")
	if err != nil || !strings.Contains(out, `"event_type": "CREATE_INSTANCE"`) || !opHasLine(out, "event_id", ids[0]) ||
		!opHasLine(out, "bin", `"\xff\x00\x01"`) || !opHasLine(out, "state", "new") {
		t.Fatalf("show 0: %v\n%s", err, out)
	}
	out, _, err = runOps(t, "dlq", "show", "--topic", dlqTopic, "--offset", "1")
	if err != nil || !strings.Contains(out, base64.StdEncoding.EncodeToString(origs[1].Value)) || !opHasLine(out, "error_class", "parse") {
		t.Fatalf("show 1: %v\n%s", err, out)
	}
	// The LETTER column of list, as the argument: the same letter.
	if byArg, _, err := runOps(t, "dlq", "show", "--topic", dlqTopic, "0:1"); err != nil || byArg != out {
		t.Fatalf("show 0:1: %v\n%s\nwant\n%s", err, byArg, out)
	}
	if _, _, err := runOps(t, "dlq", "show", "--topic", dlqTopic, "--offset", "99"); opExitCode(err) != 3 {
		t.Fatalf("show of a missing letter: %v", err)
	}
	// A letter named by its offset alone on a topic of several partitions
	// is a usage error (it exited 1).
	multi := dlqTopic + "-multi"
	k.createTopic(t, multi, 2)
	if _, _, err := runOps(t, "dlq", "show", "--topic", multi, "--offset", "0"); opExitCode(err) != exitUsage || (err == nil || !strings.Contains(err.Error(), "give --partition")) {
		t.Fatalf("show by offset alone on 2 partitions: exit %d %v, want %d", opExitCode(err), err, exitUsage)
	}

	// Dry run: nothing changes.
	out, _, err = runOps(t, "dlq", "redrive", "--topic", dlqTopic, "--offset", "0", "--dry-run")
	if err != nil || !strings.Contains(out, "1 would be redriven") || status(ids[0]) != claim.StatusDead || len(redriven()) != 0 {
		t.Fatalf("dry run changed something or failed: %v\n%s", err, out)
	}

	// Redrive letter 0, twice, then its duplicate: one reset, one record.
	for i, args := range [][]string{{"--offset", "0"}, {"--offset", "0"}, {"--offset", "2"}} {
		out, _, err = runOps(t, append([]string{"dlq", "redrive", "--topic", dlqTopic}, args...)...)
		wantRedriven := map[int]string{0: "1 redriven, 0 skipped", 1: "0 redriven, 1 skipped", 2: "0 redriven, 1 skipped"}[i]
		if err != nil || !strings.Contains(out, wantRedriven) {
			t.Fatalf("redrive #%d %v: %v\n%s", i, args, err, out)
		}
	}
	if st := status(ids[0]); st != claim.StatusFailed {
		t.Fatalf("registry row after redrive: %s, want failed", st)
	}
	got := redriven()
	if len(got) != 1 {
		t.Fatalf("re-produced %d records, want 1", len(got))
	}
	sameRecord(t, got[0], origs[0])

	// Drop letter 3: durable, hidden from list, its row stays dead.
	out, _, err = runOps(t, "dlq", "drop", "--topic", dlqTopic, "--offset", "3", "--reason", "test data")
	if err != nil || !strings.Contains(out, "0:3: dropped") {
		t.Fatalf("drop: %v\n%s", err, out)
	}
	if out, _, err = runOps(t, "dlq", "drop", "--topic", dlqTopic, "--offset", "3"); err != nil || !strings.Contains(out, "already dropped") {
		t.Fatalf("second drop: %v\n%s", err, out)
	}
	if st := status(ids[2]); st != claim.StatusDead {
		t.Fatalf("dropped letter's row: %s, want dead", st)
	}
	out, _, err = runOps(t, "dlq", "list", "--topic", dlqTopic)
	if err != nil || !strings.Contains(out, "6 letters, 3 shown, 3 handled (redriven or dropped) hidden") ||
		strings.Contains(out, "0:0 ") || strings.Contains(out, "0:3 ") || !strings.Contains(out, "0:1 ") {
		t.Fatalf("list after redrive and drop: %v\n%s", err, out)
	}
	out, _, err = runOps(t, "dlq", "list", "--topic", dlqTopic, "--all")
	if err != nil || !strings.Contains(out, "6 shown") || !opHasLine(out, "0:3", "dropped") || !opHasLine(out, "0:0", "redriven") {
		t.Fatalf("list --all: %v\n%s", err, out)
	}

	// Letter 4: a redrive interrupted after the registry reset (intent
	// recorded, row reset, nothing produced). Letter 5: its row was reset by
	// someone else (no intent of this letter): not produced.
	intent, _ := json.Marshal(dlq.Marker{Action: dlq.StateRedriving, DLQTopic: dlqTopic, DLQPartition: 0, DLQOffset: 4,
		OriginalTopic: orig, OriginalPartition: origs[3].Partition, OriginalOffset: origs[3].Offset, Handler: handler,
		EventID: ids[3], At: time.Now().UTC(), By: "test"})
	k.produce(t, &kgo.Record{Topic: dlqTopic + ".handled", Key: []byte("0:4"), Value: intent})
	for _, id := range []string{ids[3], ids[4]} {
		if err := reg.Redrive(ctx, handler, id); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err = runOps(t, "dlq", "redrive", "--topic", dlqTopic, "--all")
	// 1 (parse, no row) and 4 (interrupted) are produced; 0, 2, 3 handled
	// already; 5's row is not dead.
	if err != nil || !strings.Contains(out, "2 redriven, 4 skipped, 0 failed") || !strings.Contains(out, "no longer dead") {
		t.Fatalf("redrive --all: %v\n%s", err, out)
	}
	got = redriven()
	if len(got) != 3 {
		t.Fatalf("after redrive --all: %d re-produced records, want 3", len(got))
	}
	byValue := map[string]*kgo.Record{}
	for _, r := range got {
		byValue[string(r.Value)] = r
	}
	for _, i := range []int{0, 1, 3} {
		r, ok := byValue[string(origs[i].Value)]
		if !ok {
			t.Fatalf("original %d not re-produced", i)
		}
		sameRecord(t, r, origs[i])
	}
	out, _, err = runOps(t, "dlq", "redrive", "--topic", dlqTopic, "--all")
	if err != nil || !strings.Contains(out, "0 redriven, 6 skipped") || len(redriven()) != 3 {
		t.Fatalf("third redrive --all must change nothing: %v\n%s", err, out)
	}
	out, _, err = runOps(t, "dlq", "list", "--topic", dlqTopic)
	if err != nil || !strings.Contains(out, "6 letters, 0 shown, 6 handled") {
		t.Fatalf("final list: %v\n%s", err, out)
	}
}

// sameRecord checks that got is want re-produced: key, value and headers
// byte for byte (headers in key order).
func sameRecord(t *testing.T, got, want *kgo.Record) {
	t.Helper()
	if !bytes.Equal(got.Key, want.Key) || !bytes.Equal(got.Value, want.Value) {
		t.Errorf("re-produced record differs:\n got %q %q\nwant %q %q", got.Key, got.Value, want.Key, want.Value)
	}
	wantH := map[string][]byte{}
	for _, h := range want.Headers {
		wantH[h.Key] = h.Value
	}
	if len(got.Headers) != len(wantH) {
		t.Errorf("headers: got %v want %v", got.Headers, want.Headers)
	}
	for _, h := range got.Headers {
		if !bytes.Equal(wantH[h.Key], h.Value) {
			t.Errorf("header %s: got %q want %q", h.Key, h.Value, wantH[h.Key])
		}
	}
}

// opHasLine reports whether a line of out starts with the given fields.
func opHasLine(out string, fields ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < len(fields) {
			continue
		}
		match := true
		for i := range fields {
			if f[i] != fields[i] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func opConfig(t *testing.T) *sluiceconfig.Config {
	t.Helper()
	cfg, err := sluiceconfig.FromOS()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestDLQLetterArgumentRefusals: show, redrive and drop take the letter as
// list prints it (PARTITION:OFFSET) or by --partition/--offset; anything
// else is a usage error before any connection (exit 2, naming what to give).
func TestDLQLetterArgumentRefusals(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"show without a letter", []string{"show"}, "name the letter"},
		{"drop without a letter", []string{"drop"}, "name the letter"},
		{"redrive without a letter or --all", []string{"redrive"}, "exactly one of a letter"},
		{"redrive with a letter and --all", []string{"redrive", "0:1", "--all"}, "exactly one of a letter"},
		{"a letter and --offset", []string{"show", "0:1", "--offset", "1"}, "not both"},
		{"a letter and --partition", []string{"drop", "0:1", "--partition", "0"}, "not both"},
		{"no colon", []string{"show", "17"}, "want PARTITION:OFFSET"},
		{"not numbers", []string{"show", "a:b"}, "want PARTITION:OFFSET"},
		{"a negative offset", []string{"redrive", "0:-1"}, "want PARTITION:OFFSET"},
		{"a partition beyond int32", []string{"drop", "2147483648:1"}, "want PARTITION:OFFSET"},
		{"two letters", []string{"show", "0:1", "0:2"}, "accepts at most 1 arg"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"dlq"}, tc.args...)
			args = append(args, "--topic", "sluice.commands.dlq")
			_, _, err := runOps(t, args...)
			if opExitCode(err) != exitUsage || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("exit %d, %v; want %d naming %q", opExitCode(err), err, exitUsage, tc.want)
			}
		})
	}
}
