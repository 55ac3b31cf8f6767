package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/consumer"
)

// Dead-letter handling (SPEC §8, §11). A dead letter is identified by its
// DLQ partition and offset, written "P:O". What an operator did with a letter
// is recorded durably in a compacted sidecar topic, {dlq topic}.handled: one
// record per letter, key "P:O", value a dlqMarker; the latest record of a key
// wins. `dlq list` hides letters marked redriven or dropped unless --all.
//
// Redrive of one letter, made idempotent by the marker and the registry:
//  1. a letter already marked redriven or dropped is skipped; so is a letter
//     whose original record (topic/partition/offset) was already redriven
//     through another letter (the DLQ may hold duplicates, SPEC §8);
//  2. the marker "redriving" is written (intent);
//  3. Registry.Redrive(handler, event_id) resets the dead row. A row that is
//     no longer dead means someone else redrove it (or the worker finished it):
//     the letter is marked redriven without producing — unless this letter's
//     own intent marker was already there (a redrive interrupted between the
//     reset and the produce), in which case the produce is repeated;
//     no row at all (parse errors have none) goes on to the produce;
//  4. the original record (key, value, headers) is produced to its original
//     topic and acknowledged;
//  5. the marker "redriven" is written.
//
// A crash between 4 and 5 makes a second run produce the record again; the
// worker's registry absorbs that duplicate (at most one side effect per
// event_id), the usual "duplicate work over lost work".

// Marker actions.
const (
	dlqNew       = "new"
	dlqRedriving = "redriving"
	dlqRedriven  = "redriven"
	dlqDropped   = "dropped"
)

// dlqMarker is the value of a {dlq topic}.handled record.
type dlqMarker struct {
	Action            string    `json:"action"`
	DLQTopic          string    `json:"dlq_topic"`
	DLQPartition      int32     `json:"dlq_partition"`
	DLQOffset         int64     `json:"dlq_offset"`
	OriginalTopic     string    `json:"original_topic"`
	OriginalPartition int32     `json:"original_partition"`
	OriginalOffset    int64     `json:"original_offset"`
	Handler           string    `json:"handler,omitempty"`
	EventID           string    `json:"event_id,omitempty"`
	Note              string    `json:"note,omitempty"`
	At                time.Time `json:"at"`
	By                string    `json:"by"`
}

// dlqLetter is one record of a DLQ topic.
type dlqLetter struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
	Headers   []kgo.RecordHeader
	Rec       consumer.DLQRecord
	// Bad is set when the value is not a DLQ record.
	Bad error
}

func (l *dlqLetter) id() string { return fmt.Sprintf("%d:%d", l.Partition, l.Offset) }

func (l *dlqLetter) header(key string) string {
	for _, h := range l.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (l *dlqLetter) originalRef() string {
	return fmt.Sprintf("%s/%d/%d", l.Rec.OriginalTopic, l.Rec.OriginalPartition, l.Rec.OriginalOffset)
}

// original rebuilds the original record: key and value decoded from base64
// when the DLQ record says so, headers in key order.
func (l *dlqLetter) original() (*kgo.Record, error) {
	if l.Bad != nil {
		return nil, l.Bad
	}
	if l.Rec.OriginalTruncated {
		return nil, fmt.Errorf("dlq %s: pointer form (%s, %d bytes): the original is not in the letter; it is at %s", l.id(),
			l.Rec.TruncatedReason, l.Rec.OriginalSize, l.originalRef())
	}
	key, err := decodeText(l.Rec.OriginalKey, l.header("sluice-original-key-encoding") == "base64")
	if err != nil {
		return nil, fmt.Errorf("dlq %s: original_key: %w", l.id(), err)
	}
	value, err := decodeText(l.Rec.OriginalValue, l.header("sluice-original-value-encoding") == "base64")
	if err != nil {
		return nil, fmt.Errorf("dlq %s: original_value: %w", l.id(), err)
	}
	r := &kgo.Record{Topic: l.Rec.OriginalTopic, Key: key, Value: value}
	if len(key) == 0 {
		r.Key = nil
	}
	keys := make([]string, 0, len(l.Rec.OriginalHeaders))
	for k := range l.Rec.OriginalHeaders {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := l.Rec.OriginalHeaders[k]
		b := []byte(v)
		if rest, ok := strings.CutPrefix(v, "base64:"); ok {
			if d, err := base64.StdEncoding.DecodeString(rest); err == nil {
				b = d
			}
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: b})
	}
	return r, nil
}

// eventID is the original's event_id: its header, else the envelope's field.
func (l *dlqLetter) eventID() string {
	if l.Rec.OriginalEventID != "" {
		return l.Rec.OriginalEventID
	}
	if v := l.Rec.OriginalHeaders["event_id"]; v != "" && !strings.HasPrefix(v, "base64:") {
		return v
	}
	if r, err := l.original(); err == nil {
		var e struct {
			EventID string `json:"event_id"`
		}
		if json.Unmarshal(r.Value, &e) == nil {
			return e.EventID
		}
	}
	return ""
}

func decodeText(s string, isBase64 bool) ([]byte, error) {
	if !isBase64 {
		return []byte(s), nil
	}
	return base64.StdEncoding.DecodeString(s)
}

func parseLetter(r *kgo.Record) *dlqLetter {
	l := &dlqLetter{Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp, Headers: r.Headers}
	if err := json.Unmarshal(r.Value, &l.Rec); err != nil {
		l.Bad = fmt.Errorf("dlq %s: value is not a dead-letter record: %w", l.id(), err)
	} else if l.Rec.OriginalTopic == "" {
		l.Bad = fmt.Errorf("dlq %s: value has no original_topic", l.id())
	}
	return l
}

// dlqEnv is what the dlq commands share: configuration, a producing client
// and its admin client.
type dlqEnv struct {
	cfg   *config.Config
	kopts []kgo.Opt
	cl    *kgo.Client
	adm   *kadm.Client
	topic string
}

func openDLQ(cmd *cobra.Command, topic string) (*dlqEnv, func(), error) {
	if topic == "" {
		return nil, nil, errors.New("--topic is required (e.g. sluice.commands.dlq)")
	}
	cfg, _, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	kopts, err := relay.KafkaOpts(cfg.Kafka)
	if err != nil {
		return nil, nil, err
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, kopts...), relay.ProducerOpts(100)...)...)
	if err != nil {
		return nil, nil, err
	}
	return &dlqEnv{cfg: cfg, kopts: kopts, cl: cl, adm: kadm.NewClient(cl), topic: topic}, cl.Close, nil
}

func (d *dlqEnv) handledTopic() string { return d.topic + ".handled" }

// readTopicRange calls fn for every record of topic present when it starts (from
// each partition's start offset to its end offset), in partition order per
// partition. onlyPartition >= 0 restricts it to one partition, and from >= 0
// starts there. A missing topic is an error unless missingOK.
func readTopicRange(ctx context.Context, kopts []kgo.Opt, adm *kadm.Client, topic string, onlyPartition int32, from int64, missingOK bool,
	prog *opProgress, fn func(*kgo.Record) (bool, error)) error {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		if missingOK && errors.Is(err, kerr.UnknownTopicOrPartition) {
			return nil
		}
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	parts := map[int32]kgo.Offset{}
	endAt := map[int32]int64{}
	var total int64
	ends.Each(func(e kadm.ListedOffset) {
		if onlyPartition >= 0 && e.Partition != onlyPartition {
			return
		}
		s, _ := starts.Lookup(topic, e.Partition)
		first := max(s.Offset, from)
		if first < e.Offset {
			parts[e.Partition] = kgo.NewOffset().At(first)
			endAt[e.Partition] = e.Offset
			total += e.Offset - first
		}
	})
	if prog != nil {
		prog.total = total
	}
	if len(parts) == 0 {
		return nil
	}
	cc, err := kgo.NewClient(append(append([]kgo.Opt{}, kopts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}), kgo.FetchMaxWait(500*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer cc.Close()
	for len(endAt) > 0 {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		fs := cc.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("read %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			if errors.Is(ferr, context.DeadlineExceeded) {
				return fmt.Errorf("read %s: no progress for 30s with %d partitions unfinished", topic, len(endAt))
			}
			return ferr
		}
		var stop bool
		var cbErr error
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := endAt[r.Partition]
			if stop || cbErr != nil || !ok || r.Offset >= end {
				return
			}
			if prog != nil {
				prog.add(1)
			}
			stop, cbErr = fn(r)
			if r.Offset >= end-1 {
				delete(endAt, r.Partition)
			}
		})
		if cbErr != nil {
			return cbErr
		}
		if stop {
			return nil
		}
	}
	return nil
}

// loadMarkers reads the sidecar topic: the latest marker per letter.
func (d *dlqEnv) loadMarkers(ctx context.Context) (map[string]dlqMarker, error) {
	ms := map[string]dlqMarker{}
	err := readTopicRange(ctx, d.kopts, d.adm, d.handledTopic(), -1, -1, true, nil, func(r *kgo.Record) (bool, error) {
		var m dlqMarker
		if err := json.Unmarshal(r.Value, &m); err != nil {
			return false, fmt.Errorf("%s %d/%d: %w", d.handledTopic(), r.Partition, r.Offset, err)
		}
		ms[string(r.Key)] = m
		return false, nil
	})
	return ms, err
}

// writeMarker records what was done with l, durably (acks=all).
func (d *dlqEnv) writeMarker(ctx context.Context, l *dlqLetter, action, note string) error {
	// The sidecar is the operator's own topic. Unless
	// KAFKA_TOPIC_REPLICATION_FACTOR is set, it takes the cluster's
	// default.replication.factor (-1, KIP-464) rather than the config
	// default of 3, which a one-broker dev Kafka refuses.
	rf := int16(-1)
	if _, set := os.LookupEnv("KAFKA_TOPIC_REPLICATION_FACTOR"); set {
		rf = int16(d.cfg.Kafka.ReplicationFactor)
	}
	_, err := d.adm.CreateTopic(ctx, 1, rf,
		map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, d.handledTopic())
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create %s: %w", d.handledTopic(), err)
	}
	by, _ := os.Hostname()
	if u := os.Getenv("USER"); u != "" {
		by = u + "@" + by
	}
	m := dlqMarker{Action: action, DLQTopic: d.topic, DLQPartition: l.Partition, DLQOffset: l.Offset,
		OriginalTopic: l.Rec.OriginalTopic, OriginalPartition: l.Rec.OriginalPartition, OriginalOffset: l.Rec.OriginalOffset,
		Handler: l.Rec.Handler, EventID: l.eventID(), Note: note, At: time.Now().UTC(), By: by}
	b, _ := json.Marshal(m)
	if err := d.cl.ProduceSync(ctx, &kgo.Record{Topic: d.handledTopic(), Key: []byte(l.id()), Value: b}).FirstErr(); err != nil {
		return fmt.Errorf("record %s of %s in %s: %w", action, l.id(), d.handledTopic(), err)
	}
	return nil
}

// letters reads the DLQ topic.
func (d *dlqEnv) letters(ctx context.Context, progressOut io.Writer) ([]*dlqLetter, error) {
	var out []*dlqLetter
	prog := newOpProgress(progressOut, "dlq read "+d.topic, 0, "records")
	err := readTopicRange(ctx, d.kopts, d.adm, d.topic, -1, -1, false, prog, func(r *kgo.Record) (bool, error) {
		out = append(out, parseLetter(r))
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	if prog.total >= 1000 {
		prog.done()
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out, nil
}

// resolvePartition picks the partition of --offset: the flag, or 0 for a
// single-partition topic.
func (d *dlqEnv) resolvePartition(ctx context.Context, p int32) (int32, error) {
	if p >= 0 {
		return p, nil
	}
	td, err := d.adm.ListTopics(ctx, d.topic)
	if err != nil {
		return 0, err
	}
	t, ok := td[d.topic]
	if !ok || t.Err != nil {
		return 0, fmt.Errorf("topic %s: %w", d.topic, errors.Join(t.Err, kerr.UnknownTopicOrPartition))
	}
	if len(t.Partitions) != 1 {
		return 0, fmt.Errorf("topic %s has %d partitions: give --partition (dlq list shows letters as partition:offset)", d.topic, len(t.Partitions))
	}
	return 0, nil
}

// letter reads the letter at partition p, offset off.
// letterAt reads the letter at partition:offset (partition -1: the topic's
// only partition).
func (d *dlqEnv) letterAt(ctx context.Context, partition int32, off int64) (*dlqLetter, error) {
	p, err := d.resolvePartition(ctx, partition)
	if err != nil {
		return nil, err
	}
	return d.letter(ctx, p, off)
}

// letterWithMarkers is letterAt plus the handled-letter markers.
func (d *dlqEnv) letterWithMarkers(ctx context.Context, partition int32, off int64) (*dlqLetter, map[string]dlqMarker, error) {
	l, err := d.letterAt(ctx, partition, off)
	if err != nil {
		return nil, nil, err
	}
	ms, err := d.loadMarkers(ctx)
	if err != nil {
		return nil, nil, err
	}
	return l, ms, nil
}

func (d *dlqEnv) letter(ctx context.Context, p int32, off int64) (*dlqLetter, error) {
	var l *dlqLetter
	err := readTopicRange(ctx, d.kopts, d.adm, d.topic, p, off, false, nil, func(r *kgo.Record) (bool, error) {
		if r.Offset == off {
			l = parseLetter(r)
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, &exitError{code: 3, err: fmt.Errorf("no dead letter at %s %d:%d", d.topic, p, off)}
	}
	return l, nil
}

// originalOf is l.original(), or for a letter in pointer form (the original
// was too large to embed, consumer.DLQRecord.OriginalTruncated) the
// original record read back from Kafka at its topic, partition and offset;
// an error says so when retention has removed it.
func (d *dlqEnv) originalOf(ctx context.Context, l *dlqLetter) (*kgo.Record, error) {
	if l.Bad != nil || !l.Rec.OriginalTruncated {
		return l.original()
	}
	var orig *kgo.Record
	err := readTopicRange(ctx, d.kopts, d.adm, l.Rec.OriginalTopic, l.Rec.OriginalPartition, l.Rec.OriginalOffset, false, nil,
		func(r *kgo.Record) (bool, error) {
			if r.Offset == l.Rec.OriginalOffset {
				orig = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
			}
			return true, nil
		})
	if err == nil && orig == nil {
		err = errors.New("no record at that offset any more (retention or compaction removed it)")
	}
	if err != nil {
		return nil, fmt.Errorf("dlq %s: pointer form: read the original at %s: %w; republish it from the event store instead "+
			"(event_id %q, position %d: sluice relay republish)", l.id(), l.originalRef(), err, l.eventID(), l.Rec.OriginalPosition)
	}
	return orig, nil
}

func stateOf(ms map[string]dlqMarker, l *dlqLetter) string {
	if m, ok := ms[l.id()]; ok {
		return m.Action
	}
	return dlqNew
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}

func newDLQCmd() *cobra.Command {
	var topic string
	c := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect, redrive and drop dead letters (SPEC §8, §11)",
		Long: `Dead letters are the records a worker gave up on, in its DLQ topic
(COMMANDS_DLQ_TOPIC, EVENTS_DLQ_TOPIC) with the SPEC §8 record. A letter is named
partition:offset. What was done with it (redriven, dropped) is recorded in the
compacted topic {topic}.handled; list hides handled letters unless --all.`,
	}
	c.PersistentFlags().StringVar(&topic, "topic", "", "dead-letter topic (e.g. sluice.commands.dlq)")
	c.AddCommand(newDLQListCmd(&topic), newDLQShowCmd(&topic), newDLQRedriveCmd(&topic), newDLQDropCmd(&topic))
	return c
}

func newDLQListCmd(topic *string) *cobra.Command {
	var limit int
	var all bool
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "One line per dead letter not yet handled (--all: every letter, with its state)",
		Example: `  sluice dlq list --topic sluice.commands.dlq --limit 50`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, closeFn, err := openDLQ(cmd, *topic)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx := cmd.Context()
			ms, err := d.loadMarkers(ctx)
			if err != nil {
				return err
			}
			ls, err := d.letters(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "LETTER\tSTATE\tFAILED_AT\tORIGINAL\tHANDLER\tCLASS\tATTEMPTS\tERROR")
			shown, handled, hidden := 0, 0, 0
			for _, l := range ls {
				st := stateOf(ms, l)
				if st == dlqRedriven || st == dlqDropped {
					handled++
					if !all {
						hidden++
						continue
					}
				}
				if limit > 0 && shown >= limit {
					continue
				}
				shown++
				if l.Bad != nil {
					fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t%s\n", l.id(), st, l.Timestamp.UTC().Format(time.RFC3339), oneLine(l.Bad.Error(), 100))
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", l.id(), st, l.Rec.FailedAt.UTC().Format(time.RFC3339), l.originalRef(),
					l.Rec.Handler, l.Rec.ErrorClass, l.Rec.AttemptCount, oneLine(l.Rec.Error, 100))
			}
			_ = tw.Flush()
			more := ""
			if open := len(ls) - hidden; limit > 0 && open > shown {
				more = fmt.Sprintf(" (--limit %d: %d more not shown)", limit, open-shown)
			}
			cmd.Printf("dlq list %s: %d letters, %d shown, %d handled (redriven or dropped) %s%s\n", d.topic, len(ls), shown, handled,
				map[bool]string{true: "included", false: "hidden"}[all], more)
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "most letters to print (0: all)")
	cmd.Flags().BoolVar(&all, "all", false, "include letters already redriven or dropped")
	return cmd
}

func newDLQShowCmd(topic *string) *cobra.Command {
	var partition int32
	var offset int64
	cmd := &cobra.Command{
		Use:     "show",
		Short:   "Print one dead letter in full, with the original value decoded",
		Example: `  sluice dlq show --topic sluice.commands.dlq --partition 3 --offset 17`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, closeFn, err := openDLQ(cmd, *topic)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx := cmd.Context()
			l, ms, err := d.letterWithMarkers(ctx, partition, offset)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "letter             %s %s\nstate              %s\n", d.topic, l.id(), stateOf(ms, l))
			if m, ok := ms[l.id()]; ok {
				fmt.Fprintf(out, "handled            %s at %s by %s %s\n", m.Action, m.At.Format(time.RFC3339), m.By, m.Note)
			}
			fmt.Fprintf(out, "produced_at        %s\n", l.Timestamp.UTC().Format(time.RFC3339Nano))
			if l.Bad != nil {
				fmt.Fprintf(out, "error              %v\n", l.Bad)
				return nil
			}
			r := l.Rec
			fmt.Fprintf(out, "original           %s\nhandler            %s\nevent_id           %s\nerror_class        %s\nattempt_count      %d\nfirst_failed_at    %s\nfailed_at          %s\nerror              %s\n",
				l.originalRef(), r.Handler, l.eventID(), r.ErrorClass, r.AttemptCount,
				r.FirstFailedAt.UTC().Format(time.RFC3339Nano), r.FailedAt.UTC().Format(time.RFC3339Nano), r.Error)
			if r.OriginalTruncated {
				fmt.Fprintf(out, "pointer form       %s: the original (%d bytes, position %d) is read from %s\n",
					r.TruncatedReason, r.OriginalSize, r.OriginalPosition, l.originalRef())
			}
			orig, err := d.originalOf(ctx, l)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "original_key       %q\noriginal_headers\n", orig.Key)
			for _, h := range orig.Headers {
				fmt.Fprintf(out, "  %-16s %q\n", h.Key, h.Value)
			}
			var pretty bytes.Buffer
			switch {
			case !utf8.Valid(orig.Value):
				fmt.Fprintf(out, "original_value     (%d bytes, not UTF-8; base64)\n  %s\n", len(orig.Value), base64.StdEncoding.EncodeToString(orig.Value))
			case json.Indent(&pretty, orig.Value, "  ", "  ") == nil:
				fmt.Fprintf(out, "original_value     (%d bytes)\n  %s\n", len(orig.Value), pretty.String())
			default:
				fmt.Fprintf(out, "original_value     (%d bytes)\n  %s\n", len(orig.Value), orig.Value)
			}
			return nil
		},
	}
	cmd.Flags().Int32Var(&partition, "partition", -1, "partition of the letter (may be left out for a single-partition topic)")
	cmd.Flags().Int64Var(&offset, "offset", -1, "offset of the letter (required)")
	_ = cmd.MarkFlagRequired("offset")
	return cmd
}

func newDLQRedriveCmd(topic *string) *cobra.Command {
	var partition int32
	var offset int64
	var all, dryRun bool
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Reset the registry row and re-produce the original record to its topic (idempotent)",
		Long: `redrive resets each letter's registry row (dead → failed, due now, attempts reset) and
re-produces the original record — key, value and headers — to its original topic, where the
worker claims it again as attempt 1. A letter already redriven or dropped, a duplicate letter of
an original already redriven, and a letter whose registry row is no longer dead are skipped, so
redriving twice has one effect. Fix the cause first (dlq show).`,
		Example: `  sluice dlq redrive --topic sluice.commands.dlq --partition 3 --offset 17
  sluice dlq redrive --topic sluice.commands.dlq --all --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all == cmd.Flags().Changed("offset") {
				return errors.New("give exactly one of --offset or --all")
			}
			d, closeFn, err := openDLQ(cmd, *topic)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx := cmd.Context()
			var ls []*dlqLetter
			if all {
				if ls, err = d.letters(ctx, cmd.ErrOrStderr()); err != nil {
					return err
				}
			} else {
				l, err := d.letterAt(ctx, partition, offset)
				if err != nil {
					return err
				}
				ls = []*dlqLetter{l}
			}
			ms, err := d.loadMarkers(ctx)
			if err != nil {
				return err
			}
			reg, closeReg, err := openRegistry(cmd)
			if err != nil {
				return err
			}
			defer closeReg()
			rd := &redriver{d: d, reg: reg, markers: ms, dryRun: dryRun, out: cmd.OutOrStdout()}
			prog := newOpProgress(cmd.ErrOrStderr(), "dlq redrive "+d.topic, int64(len(ls)), "letters")
			for _, l := range ls {
				if err := rd.redrive(ctx, l); err != nil {
					return err
				}
				prog.add(1)
			}
			if len(ls) >= 100 {
				prog.done()
			}
			if dryRun {
				cmd.Printf("dlq redrive %s (dry run): %d would be redriven, %d skipped; nothing changed\n", d.topic, rd.redriven, rd.skipped)
				return nil
			}
			cmd.Printf("dlq redrive %s: %d redriven, %d skipped, %d failed\n", d.topic, rd.redriven, rd.skipped, rd.failed)
			if rd.failed > 0 {
				return fmt.Errorf("dlq redrive: %d letters could not be redriven (see above)", rd.failed)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Int32Var(&partition, "partition", -1, "partition of the letter (may be left out for a single-partition topic)")
	f.Int64Var(&offset, "offset", -1, "offset of the letter to redrive")
	f.BoolVar(&all, "all", false, "redrive every letter not yet handled")
	f.BoolVar(&dryRun, "dry-run", false, "print what would be redriven; change nothing")
	return cmd
}

// redriver redrives letters one by one (see the comment at the top).
type redriver struct {
	d       *dlqEnv
	reg     *registry.Registry
	markers map[string]dlqMarker
	dryRun  bool
	out     io.Writer

	redriven, skipped, failed int
}

func (rd *redriver) skip(l *dlqLetter, why string) {
	rd.skipped++
	fmt.Fprintf(rd.out, "skip      %s  %s\n", l.id(), why)
}

func (rd *redriver) redrive(ctx context.Context, l *dlqLetter) error {
	prev, hasPrev := rd.markers[l.id()]
	if hasPrev && (prev.Action == dlqRedriven || prev.Action == dlqDropped) {
		rd.skip(l, "already "+prev.Action+" at "+prev.At.Format(time.RFC3339))
		return nil
	}
	if l.Bad != nil {
		rd.failed++
		fmt.Fprintf(rd.out, "failed    %s  %v\n", l.id(), l.Bad)
		return nil
	}
	for k, m := range rd.markers {
		if k != l.id() && m.Action == dlqRedriven && m.OriginalTopic == l.Rec.OriginalTopic &&
			m.OriginalPartition == l.Rec.OriginalPartition && m.OriginalOffset == l.Rec.OriginalOffset {
			rd.skip(l, fmt.Sprintf("duplicate: original %s already redriven through letter %s", l.originalRef(), k))
			if !rd.dryRun {
				return rd.mark(ctx, l, dlqRedriven, "duplicate of letter "+k+"; not produced")
			}
			return nil
		}
	}
	orig, err := rd.d.originalOf(ctx, l)
	if err != nil {
		rd.failed++
		fmt.Fprintf(rd.out, "failed    %s  %v\n", l.id(), err)
		return nil
	}
	eventID, handler := l.eventID(), l.Rec.Handler
	if rd.dryRun {
		status := "no registry row"
		if eventID != "" && handler != "" {
			rows, err := rd.reg.Get(ctx, eventID)
			if err != nil {
				return err
			}
			for _, r := range rows {
				if r.Handler == handler {
					status = "registry row " + string(r.Status)
				}
			}
		}
		if strings.HasPrefix(status, "registry row ") && status != "registry row dead" && !hasPrev {
			rd.skip(l, status+" (not dead): would not be produced")
			return nil
		}
		rd.redriven++
		fmt.Fprintf(rd.out, "would     %s  re-produce %s to %s (%s)\n", l.id(), l.originalRef(), orig.Topic, status)
		return nil
	}
	if !hasPrev {
		if err := rd.mark(ctx, l, dlqRedriving, ""); err != nil {
			return err
		}
	}
	if eventID != "" && handler != "" {
		err := rd.reg.Redrive(ctx, handler, eventID)
		switch {
		case err == nil, errors.Is(err, registry.ErrNotFound):
		case errors.Is(err, registry.ErrNotDead) && hasPrev:
			// This letter's own earlier redrive reset the row and was
			// interrupted before its produce: produce again.
		case errors.Is(err, registry.ErrNotDead):
			rd.skip(l, fmt.Sprintf("registry row of %s/%s is no longer dead (%v); not produced", handler, eventID, err))
			return rd.mark(ctx, l, dlqRedriven, "registry row not dead; not produced")
		default:
			return fmt.Errorf("dlq redrive %s: %w", l.id(), err)
		}
	}
	if err := rd.d.cl.ProduceSync(ctx, orig).FirstErr(); err != nil {
		return fmt.Errorf("dlq redrive %s: produce to %s: %w", l.id(), orig.Topic, err)
	}
	if err := rd.mark(ctx, l, dlqRedriven, fmt.Sprintf("produced to %s/%d/%d", orig.Topic, orig.Partition, orig.Offset)); err != nil {
		return err
	}
	rd.redriven++
	if eventID == "" {
		eventID = "- (no event_id: no registry row)"
	}
	fmt.Fprintf(rd.out, "redriven  %s  %s -> %s/%d/%d, event %s\n", l.id(), l.originalRef(), orig.Topic, orig.Partition, orig.Offset, eventID)
	return nil
}

func (rd *redriver) mark(ctx context.Context, l *dlqLetter, action, note string) error {
	if err := rd.d.writeMarker(ctx, l, action, note); err != nil {
		return err
	}
	rd.markers[l.id()] = dlqMarker{Action: action, OriginalTopic: l.Rec.OriginalTopic, OriginalPartition: l.Rec.OriginalPartition,
		OriginalOffset: l.Rec.OriginalOffset, At: time.Now().UTC()}
	return nil
}

func newDLQDropCmd(topic *string) *cobra.Command {
	var partition int32
	var offset int64
	var reason string
	cmd := &cobra.Command{
		Use:   "drop",
		Short: "Mark a dead letter as handled without redriving it (recorded in {topic}.handled)",
		Long: `drop records, durably, that a letter needs no redrive: list hides it from then on, and
redrive skips it. The letter itself stays in the DLQ topic (Kafka retention removes it); its
registry row stays dead, so the event is never re-run by redelivery.`,
		Example: `  sluice dlq drop --topic sluice.commands.dlq --partition 3 --offset 17 --reason "test data"`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, closeFn, err := openDLQ(cmd, *topic)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx := cmd.Context()
			l, ms, err := d.letterWithMarkers(ctx, partition, offset)
			if err != nil {
				return err
			}
			if m, ok := ms[l.id()]; ok && (m.Action == dlqDropped || m.Action == dlqRedriven) {
				cmd.Printf("dlq drop %s %s: already %s at %s; nothing changed\n", d.topic, l.id(), m.Action, m.At.Format(time.RFC3339))
				return nil
			}
			if err := d.writeMarker(ctx, l, dlqDropped, reason); err != nil {
				return err
			}
			cmd.Printf("dlq drop %s %s: dropped (original %s, recorded in %s)\n", d.topic, l.id(), l.originalRef(), d.handledTopic())
			return nil
		},
	}
	cmd.Flags().Int32Var(&partition, "partition", -1, "partition of the letter (may be left out for a single-partition topic)")
	cmd.Flags().Int64Var(&offset, "offset", -1, "offset of the letter (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why it is dropped (kept with the record)")
	_ = cmd.MarkFlagRequired("offset")
	return cmd
}
