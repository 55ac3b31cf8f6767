package consumer

import (
	"encoding/base64"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DLQRecord is the value of a dead-letter record (SPEC §8). Its key is the
// original record's key.
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
	// base64 when not UTF-8).
	OriginalHeaders map[string]string `json:"original_headers"`
	Error           string            `json:"error"`
	// ErrorClass is parse, permanent or retryable (attempts exhausted).
	ErrorClass    string    `json:"error_class"`
	AttemptCount  int       `json:"attempt_count"`
	Handler       string    `json:"handler"`
	FirstFailedAt time.Time `json:"first_failed_at"`
	FailedAt      time.Time `json:"failed_at"`
}

// textOrBase64 returns b as text if it is valid UTF-8, else base64.
func textOrBase64(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

// dlqRecord builds the dead-letter Kafka record for r.
func dlqRecord(topic, handler string, r *kgo.Record, errText, class string, attempts int, first, failed time.Time) (*kgo.Record, error) {
	d := DLQRecord{
		OriginalTopic: r.Topic, OriginalPartition: r.Partition, OriginalOffset: r.Offset,
		OriginalHeaders: map[string]string{}, Error: errText, ErrorClass: class, AttemptCount: attempts,
		Handler: handler, FirstFailedAt: first.UTC(), FailedAt: failed.UTC(),
	}
	hdrs := []kgo.RecordHeader{{Key: "sluice-error-class", Value: []byte(class)}, {Key: "sluice-handler", Value: []byte(handler)}}
	var enc string
	if d.OriginalKey, enc = textOrBase64(r.Key); enc != "" {
		hdrs = append(hdrs, kgo.RecordHeader{Key: "sluice-original-key-encoding", Value: []byte(enc)})
	}
	if d.OriginalValue, enc = textOrBase64(r.Value); enc != "" {
		hdrs = append(hdrs, kgo.RecordHeader{Key: "sluice-original-value-encoding", Value: []byte(enc)})
	}
	for _, h := range r.Headers {
		v, enc := textOrBase64(h.Value)
		if enc != "" {
			v = "base64:" + v
		}
		d.OriginalHeaders[h.Key] = v
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: topic, Key: r.Key, Value: b, Headers: hdrs}, nil
}
