package dlq

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/recordformat"
	"github.com/sluicehq/sluice/worker"
)

// Letter is one record of a DLQ topic.
type Letter struct {
	Partition int32
	Offset    int64
	// Timestamp is when the worker produced the letter.
	Timestamp time.Time
	Headers   []kgo.RecordHeader
	// Record is the dead-letter record the worker wrote.
	Record worker.DLQRecord
	// Bad is set when the value is not a dead-letter record.
	Bad error
}

// ID names the letter "partition:offset".
func (l *Letter) ID() string { return fmt.Sprintf("%d:%d", l.Partition, l.Offset) }

func (l *Letter) header(key string) string {
	for _, h := range l.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// OriginalRef names the original record "topic/partition/offset".
func (l *Letter) OriginalRef() string {
	return fmt.Sprintf("%s/%d/%d", l.Record.OriginalTopic, l.Record.OriginalPartition, l.Record.OriginalOffset)
}

// Original rebuilds the original record from the letter: key and value
// decoded from base64 when the letter says so, headers in key order. A
// letter in pointer form (worker.DLQRecord.OriginalTruncated) does not
// hold it: Queue.Original reads it back from Kafka.
func (l *Letter) Original() (*kgo.Record, error) {
	if l.Bad != nil {
		return nil, l.Bad
	}
	if l.Record.OriginalTruncated {
		return nil, fmt.Errorf("dlq %s: pointer form (%s, %d bytes): the original is not in the letter; it is at %s", l.ID(),
			l.Record.TruncatedReason, l.Record.OriginalSize, l.OriginalRef())
	}
	key, err := decodeText(l.Record.OriginalKey, l.header("sluice-original-key-encoding") == "base64")
	if err != nil {
		return nil, fmt.Errorf("dlq %s: original_key: %w", l.ID(), err)
	}
	value, err := decodeText(l.Record.OriginalValue, l.header("sluice-original-value-encoding") == "base64")
	if err != nil {
		return nil, fmt.Errorf("dlq %s: original_value: %w", l.ID(), err)
	}
	r := &kgo.Record{Topic: l.Record.OriginalTopic, Key: key, Value: value}
	if len(key) == 0 {
		r.Key = nil
	}
	if l.Record.OriginalHeaderList != nil {
		// The original repeated a header key: every header, in order.
		for _, h := range l.Record.OriginalHeaderList {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: headerBytes(h.Value)})
		}
		return r, nil
	}
	keys := make([]string, 0, len(l.Record.OriginalHeaders))
	for k := range l.Record.OriginalHeaders {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: headerBytes(l.Record.OriginalHeaders[k])})
	}
	return r, nil
}

// headerBytes is a header value of a letter's original_headers: the text,
// or the bytes of "base64:" + base64.
func headerBytes(v string) []byte {
	if rest, ok := strings.CutPrefix(v, "base64:"); ok {
		if d, err := base64.StdEncoding.DecodeString(rest); err == nil {
			return d
		}
	}
	return []byte(v)
}

// EventID is the original's event_id: the letter's field, else the one
// the original's headers name (in either record format, docs/kafka.md),
// else the field of its envelope.
func (l *Letter) EventID() string {
	if l.Record.OriginalEventID != "" {
		return l.Record.OriginalEventID
	}
	r, err := l.Original()
	if err != nil {
		return ""
	}
	if id := recordformat.EventID(r.Headers); id != "" && utf8.ValidString(id) {
		return id
	}
	var e struct {
		EventID string `json:"event_id"`
	}
	if recordformat.Detect(r.Headers) == recordformat.Envelope && json.Unmarshal(r.Value, &e) == nil {
		return e.EventID
	}
	return ""
}

func decodeText(s string, isBase64 bool) ([]byte, error) {
	if !isBase64 {
		return []byte(s), nil
	}
	return base64.StdEncoding.DecodeString(s)
}

// ParseLetter reads a record of a DLQ topic. A value that is not a
// dead-letter record gives a Letter with Bad set, not an error: list shows
// it, redrive reports it as failed.
func ParseLetter(r *kgo.Record) *Letter {
	l := &Letter{Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp, Headers: r.Headers}
	if err := json.Unmarshal(r.Value, &l.Record); err != nil {
		l.Bad = fmt.Errorf("dlq %s: value is not a dead-letter record: %w", l.ID(), err)
	} else if l.Record.OriginalTopic == "" {
		l.Bad = fmt.Errorf("dlq %s: value has no original_topic", l.ID())
	}
	return l
}
