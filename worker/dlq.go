package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/recordformat"
)

// DLQRecord is the value of a dead-letter record (docs/worker-runtime.md#the-dead-letter-record). Its key is the
// original record's key.
//
// A dead letter never blocks its partition for being too large: when the
// full form (the original embedded) would exceed the producer's maximum
// message size (Config.DLQMaxBytes), or the broker refused it as too
// large, the record is written in pointer form instead: OriginalTruncated
// is true, OriginalValue and OriginalHeaders are empty, and the original
// is found again at OriginalTopic/OriginalPartition/OriginalOffset (also
// named by OriginalEventID and OriginalPosition, its event-store
// position, when known). The context (error, class, handler, attempts,
// times) is always kept.
type DLQRecord struct {
	OriginalTopic     string `json:"original_topic"`
	OriginalPartition int32  `json:"original_partition"`
	OriginalOffset    int64  `json:"original_offset"`
	// OriginalKey and OriginalValue are the bytes as text when they are
	// valid UTF-8, else base64 (standard encoding); the DLQ record then
	// carries the header sluice-original-key-encoding or
	// sluice-original-value-encoding = "base64".
	OriginalKey   string `json:"original_key"`
	OriginalValue string `json:"original_value"`
	// OriginalHeaders maps header keys to values (text, or "base64:" +
	// base64 when not UTF-8 or when the text starts with "base64:").
	OriginalHeaders map[string]string `json:"original_headers"`
	// OriginalHeaderList is every original header in its order, values as
	// in OriginalHeaders, written only when the original repeats a header
	// key (which the map cannot hold): the reader then takes it instead.
	OriginalHeaderList []HeaderPair `json:"original_header_list,omitempty"`
	Error              string       `json:"error"`
	// ErrorClass is parse, permanent or retryable (attempts exhausted).
	ErrorClass    string    `json:"error_class"`
	AttemptCount  int       `json:"attempt_count"`
	Handler       string    `json:"handler"`
	FirstFailedAt time.Time `json:"first_failed_at"`
	FailedAt      time.Time `json:"failed_at"`

	// Pointer form only (absent from a full dead letter).

	// OriginalTruncated: the original's value and headers are left out;
	// read it from Kafka at the original offset (or the event store).
	OriginalTruncated bool `json:"original_truncated,omitempty"`
	// TruncatedReason is "size" (the full form would exceed the limit) or
	// "too_large" (the broker refused the full form).
	TruncatedReason string `json:"truncated_reason,omitempty"`
	// OriginalSize is the original value's size in bytes.
	OriginalSize int `json:"original_size,omitempty"`
	// OriginalEventID and OriginalPosition identify the original in the
	// event store (from its envelope, else its headers), when known.
	OriginalEventID  string `json:"original_event_id,omitempty"`
	OriginalPosition int64  `json:"original_position,omitempty"`
	// OriginalKeyTruncated: the original key was too large to keep too
	// (the dead letter then has no key).
	OriginalKeyTruncated bool `json:"original_key_truncated,omitempty"`
}

// Pointer-form reasons (DLQRecord.TruncatedReason, metric label).
const (
	truncSize     = "size"
	truncTooLarge = "too_large"
)

// dlqOverhead is what a record batch adds to a record's key, value and
// headers (batch header, record varints), with room to spare.
const dlqOverhead = 512

// maxPointerText bounds the error text and the key kept in a pointer-form
// dead letter.
const maxPointerText = 16 << 10

// deadLetter is what the runtime knows about one record to dead-letter.
type deadLetter struct {
	topic, handler string
	rec            *kgo.Record
	// eventID and position identify the original in the store (from the
	// parsed envelope; zero for parse errors: then from the headers).
	eventID  string
	position int64
	errText  string
	class    string
	attempts int
	first    time.Time
	failed   time.Time
}

// textOrBase64 returns b as text if it is valid UTF-8, else base64.
func textOrBase64(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

// headerText is a header value as original_headers holds it: the text, or
// "base64:" + base64 when it is not UTF-8 or is text that itself starts with
// "base64:" (which a reader would otherwise decode: redrive must re-produce
// the value byte for byte).
func headerText(b []byte) string {
	if utf8.Valid(b) && !bytes.HasPrefix(b, []byte(headerBase64Prefix)) {
		return string(b)
	}
	return headerBase64Prefix + base64.StdEncoding.EncodeToString(b)
}

// HeaderPair is one original header of DLQRecord.OriginalHeaderList.
type HeaderPair struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// headerList is hs in order, values as original_headers holds them.
func headerList(hs []kgo.RecordHeader) []HeaderPair {
	l := make([]HeaderPair, len(hs))
	for i, h := range hs {
		l[i] = HeaderPair{Key: h.Key, Value: headerText(h.Value)}
	}
	return l
}

// headerBase64Prefix marks an original header value written as base64.
const headerBase64Prefix = "base64:"

// recordSize is the part of r's size that grows with its content.
func recordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value) + dlqOverhead
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 8
	}
	return n
}

// record builds the dead-letter Kafka record: the full form when it fits
// in maxBytes (0: no limit) and no pointerReason is given, else the pointer
// form. It returns the reason of the pointer form ("" for the full form).
func (d deadLetter) record(maxBytes int, pointerReason string) (*kgo.Record, string, error) {
	if pointerReason == "" {
		r, err := d.full()
		if err != nil {
			return nil, "", err
		}
		if maxBytes <= 0 || recordSize(r) <= maxBytes {
			return r, "", nil
		}
		pointerReason = truncSize
	}
	r, err := d.pointer(pointerReason)
	return r, pointerReason, err
}

func (d deadLetter) base() (DLQRecord, []kgo.RecordHeader) {
	r := d.rec
	v := DLQRecord{
		OriginalTopic: r.Topic, OriginalPartition: r.Partition, OriginalOffset: r.Offset,
		OriginalHeaders: map[string]string{}, Error: d.errText, ErrorClass: d.class, AttemptCount: d.attempts,
		Handler: d.handler, FirstFailedAt: d.first.UTC(), FailedAt: d.failed.UTC(),
	}
	hdrs := []kgo.RecordHeader{{Key: "sluice-error-class", Value: []byte(d.class)}, {Key: "sluice-handler", Value: []byte(d.handler)}}
	return v, hdrs
}

// DeadLetterRecord is the dead letter the runtime writes to topic for orig
// once handler failed on it attempts times with errText of class, in the
// full form (docs/worker-runtime.md#the-dead-letter-record): for tools and
// tests that need one without running a worker.
func DeadLetterRecord(topic, handler string, orig *kgo.Record, class, errText string, attempts int, first, failed time.Time) (*kgo.Record, error) {
	return deadLetter{topic: topic, handler: handler, rec: orig, errText: errText, class: class,
		attempts: attempts, first: first, failed: failed}.full()
}

// full is the dead letter with the original embedded (docs/worker-runtime.md#the-dead-letter-record).
func (d deadLetter) full() (*kgo.Record, error) {
	v, hdrs := d.base()
	r := d.rec
	var enc string
	if v.OriginalKey, enc = textOrBase64(r.Key); enc != "" {
		hdrs = append(hdrs, kgo.RecordHeader{Key: "sluice-original-key-encoding", Value: []byte(enc)})
	}
	if v.OriginalValue, enc = textOrBase64(r.Value); enc != "" {
		hdrs = append(hdrs, kgo.RecordHeader{Key: "sluice-original-value-encoding", Value: []byte(enc)})
	}
	for _, h := range r.Headers {
		hv := headerText(h.Value)
		if _, dup := v.OriginalHeaders[h.Key]; dup && v.OriginalHeaderList == nil {
			v.OriginalHeaderList = headerList(r.Headers)
		}
		v.OriginalHeaders[h.Key] = hv
	}
	b, err := envelope.EncodeJSON(v)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: d.topic, Key: r.Key, Value: b, Headers: hdrs}, nil
}

// pointer is the dead letter without the original's value and headers: the
// context and where to find the original.
func (d deadLetter) pointer(reason string) (*kgo.Record, error) {
	v, hdrs := d.base()
	r := d.rec
	v.OriginalTruncated, v.TruncatedReason, v.OriginalSize = true, reason, len(r.Value)
	v.OriginalEventID, v.OriginalPosition = d.eventID, d.position
	// A record that did not parse: its headers, in either record format.
	if id := recordformat.EventID(r.Headers); v.OriginalEventID == "" && utf8.ValidString(id) && len(id) <= 512 {
		v.OriginalEventID = id
	}
	if p, ok := recordformat.Position(r.Headers); ok && v.OriginalPosition == 0 {
		v.OriginalPosition = p
	}
	if len(v.Error) > maxPointerText {
		v.Error = truncateUTF8(v.Error, maxPointerText) + "… (truncated)"
	}
	key := r.Key
	if len(key) > maxPointerText {
		key, v.OriginalKeyTruncated = nil, true
	} else {
		var enc string
		if v.OriginalKey, enc = textOrBase64(key); enc != "" {
			hdrs = append(hdrs, kgo.RecordHeader{Key: "sluice-original-key-encoding", Value: []byte(enc)})
		}
	}
	hdrs = append(hdrs, kgo.RecordHeader{Key: "sluice-original-truncated", Value: []byte("true")})
	b, err := envelope.EncodeJSON(v)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: d.topic, Key: key, Value: b, Headers: hdrs}, nil
}

// truncateUTF8 cuts s to at most n bytes on a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// produceDLQ produces the dead letters of items in one batch and waits for
// the acknowledgements.
func (c *Consumer) produceDLQ(ctx context.Context, items []*item) {
	var recs []*kgo.Record
	var its []*item
	for _, it := range items {
		if it.st != stDLQ {
			continue
		}
		d := deadLetter{topic: c.cfg.DLQTopic, handler: c.cfg.HandlerName, rec: it.rec, errText: it.errText, class: it.errClass,
			attempts: it.attempts, first: it.firstFail, failed: time.Now()}
		if it.parseErr == nil {
			d.eventID, d.position = it.view.Envelope.EventID, it.view.Envelope.Position
		}
		r, ptr, err := d.record(c.dlqMax, it.dlqPointer)
		if err != nil {
			c.log("dlq record", "err", err)
			continue
		}
		it.dlqPointer = ptr
		recs = append(recs, r)
		its = append(its, it)
	}
	if len(recs) == 0 {
		return
	}
	start := time.Now()
	res := c.cl.ProduceSync(ctx, recs...)
	c.m.stage.WithLabelValues(c.cfg.HandlerName, "dlq").Observe(time.Since(start).Seconds())
	for i, pr := range res {
		it := its[i]
		if pr.Err != nil && it.dlqPointer == "" && (errors.Is(pr.Err, kerr.MessageTooLarge) || errors.Is(pr.Err, kerr.RecordListTooLarge)) {
			// Permanent for this form: never retry it; write the pointer
			// form at once.
			c.log("dlq record too large for the broker; writing it in pointer form", "offset", it.rec.Offset, "err", pr.Err)
			it.dlqPointer = truncTooLarge
			c.retryLater(it, "dlq_too_large", 0)
			continue
		}
		if pr.Err != nil {
			c.log("dlq produce failed; will retry", "offset", it.rec.Offset, "err", pr.Err)
			c.retryLater(it, "dlq_produce", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.RetryBackoffCap, it.tries))
			continue
		}
		c.m.dlq.WithLabelValues(c.cfg.HandlerName, it.errClass).Inc()
		if reason := it.dlqPointer; reason != "" {
			c.m.dlqPtr.WithLabelValues(c.cfg.HandlerName, reason).Inc()
			c.log("dead letter written in pointer form (original left out; read it at its offset)", "topic", it.rec.Topic,
				"partition", it.rec.Partition, "offset", it.rec.Offset, "original_size", len(it.rec.Value), "reason", reason)
		}
		c.deps.Logger.Error("record dead-lettered", "handler", c.cfg.HandlerName, "topic", it.rec.Topic, "partition", it.rec.Partition,
			"offset", it.rec.Offset, "error_class", it.errClass, "err", it.errText)
		if it.failure != nil {
			it.st = stMarkFailed
			continue
		}
		if it.parseErr != nil {
			c.finish(it, "parse_error")
		} else {
			c.finish(it, "dead")
		}
	}
}
