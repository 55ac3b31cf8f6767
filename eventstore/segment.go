package eventstore

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/sluicehq/sluice/shared/envelope"
)

// SegmentPrefix is the key prefix of every segment (docs/objstore.md#layout).
const SegmentPrefix = "segments/"

const segmentSuffix = ".jsonl"

// SegmentKey returns the key of the segment holding positions first..last:
// segments/{first:020d}-{last:020d}.jsonl. Keys sort by first position.
func SegmentKey(first, last int64) string {
	return fmt.Sprintf("%s%020d-%020d%s", SegmentPrefix, first, last, segmentSuffix)
}

// ParseSegmentKey returns the positions a segment key names. It accepts
// exactly the output of SegmentKey with 1 <= first <= last.
func ParseSegmentKey(key string) (first, last int64, err error) {
	rest, ok := strings.CutPrefix(key, SegmentPrefix)
	if ok {
		rest, ok = strings.CutSuffix(rest, segmentSuffix)
	}
	if !ok || len(rest) != 41 || rest[20] != '-' {
		return 0, 0, fmt.Errorf("eventstore: %q is not a segment key (segments/{first:020d}-{last:020d}.jsonl)", key)
	}
	first, err1 := parseDigits(rest[:20])
	last, err2 := parseDigits(rest[21:])
	if err1 != nil || err2 != nil || first < 1 || last < first {
		return 0, 0, fmt.Errorf("eventstore: %q is not a segment key (positions)", key)
	}
	return first, last, nil
}

func parseDigits(s string) (int64, error) {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("not digits")
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// SegmentInfo describes one segment object.
type SegmentInfo struct {
	Key string
	// First and Last are the positions the key names: in a store of more
	// than one shard, those of the segment's lowest shard, Shard.
	First, Last  int64
	Shard        int
	Size         int64
	LastModified time.Time
	// Offset and Length locate the lines of Shard's positions First..Last
	// in the segment, bytes [Offset, Offset+Length), when they are known:
	// ShardLog.Segments of a store of more than one shard reads them from
	// the index (a shard's lines are contiguous in a segment, parseBlock),
	// and ShardLog.ReadSegment then reads only them. Length 0: not known
	// (the object listing); the whole segment is read.
	Offset, Length int64
}

// Event is one stored envelope: the envelope (with sequence_number and
// position), its line in the segment byte for byte (without the trailing
// newline), and where that line is. Raw, Envelope.Data and the metadata
// values are capacity-limited slices of the bytes read (lineDecoder: not
// copied): read-only, like everything a read returns.
type Event struct {
	Envelope   envelope.Envelope
	Raw        []byte
	SegmentKey string
	Offset     int64
	// Shard is the event's shard (0 in a store of one shard): the event
	// is addressed by (Shard, Envelope.Position).
	Shard int
}

// Sentinels the line template is encoded with; they are spliced out for the
// real sequence number and position. Any JSON string in an encoded envelope
// escapes '"', so the marker (which contains bare '"') can occur only at the
// sequence_number/position fields.
const (
	sentinelSeq = 7777777777777777771
	sentinelPos = 7777777777777777772
)

var sentinelMarker = []byte(`,"sequence_number":7777777777777777771,"position":7777777777777777772,`)

// lineTemplate is an envelope encoded once, in the caller's goroutine, so the
// committer only splices in sequence_number and position.
type lineTemplate struct {
	head, tail []byte // line = head + `,"sequence_number":S,"position":P,` + tail
}

func newLineTemplate(e envelope.Envelope) (lineTemplate, error) {
	t, _, err := newLineTemplateHash(e)
	return t, err
}

// newLineTemplateHash returns e's line template and e's canonical hash
// (envelope.CanonicalHash), encoded together (envelope.MarshalHash): the
// canonical form leaves out sequence_number and position, so the
// sentinels do not change the hash.
func newLineTemplateHash(e envelope.Envelope) (lineTemplate, [32]byte, error) {
	e.SequenceNumber, e.Position = sentinelSeq, sentinelPos
	b, hash, err := envelope.MarshalHash(e)
	if err != nil {
		return lineTemplate{}, hash, fmt.Errorf("eventstore: encode envelope: %w", err)
	}
	// The marker must occur once (raw data or metadata could hold it
	// too); the second search starts right after the first occurrence's
	// first byte, so overlapping occurrences count (bytes.Contains, not
	// LastIndex: the latter hashes every byte of the line).
	i := bytes.Index(b, sentinelMarker)
	if i < 0 || bytes.Contains(b[i+1:], sentinelMarker) {
		return lineTemplate{}, hash, fmt.Errorf("eventstore: encode envelope: unexpected field layout")
	}
	return lineTemplate{head: b[:i], tail: b[i+len(sentinelMarker):]}, hash, nil
}

// appendLine appends the envelope's line with seq and pos to dst.
func (t lineTemplate) appendLine(dst []byte, seq, pos int64) []byte {
	dst = append(dst, t.head...)
	dst = append(dst, `,"sequence_number":`...)
	dst = strconv.AppendInt(dst, seq, 10)
	dst = append(dst, `,"position":`...)
	dst = strconv.AppendInt(dst, pos, 10)
	dst = append(dst, ',')
	return append(dst, t.tail...)
}

func (t lineTemplate) size() int { return len(t.head) + len(t.tail) + 64 }

// maxLine is the length of the envelope's stored line (without the newline)
// with sequence_number and position at their widest (19 digits each, the
// width of the sentinels): an upper bound of the line whatever the store
// assigns, so the envelope limit can be checked before the reservation and
// a retry of the same envelope always gets the same answer.
func (t lineTemplate) maxLine() int { return len(t.head) + len(sentinelMarker) + len(t.tail) }

// segmentLine locates one line of a parsed segment.
type segmentLine struct {
	env    envelope.Envelope
	raw    []byte
	offset int64
	shard  int // ShardOf its aggregate in the store's layout (parseBlock)
}

// parseSegment splits a segment body into its lines and decodes each. It
// checks that positions are exactly first..last when first > 0.
func parseSegment(d *lineDecoder, key string, body []byte, first, last int64) ([]segmentLine, error) {
	out := make([]segmentLine, 0, bytes.Count(body, []byte{'\n'})+1)
	off := 0
	for off < len(body) {
		n := bytes.IndexByte(body[off:], '\n')
		end := off + n
		if n < 0 {
			end = len(body)
		}
		raw := body[off:end:end]
		if len(raw) > 0 {
			e, err := d.decode(raw)
			if err != nil {
				return nil, fmt.Errorf("%w: %s at byte %d: %w", ErrCorruptSegment, key, off, err)
			}
			out = append(out, segmentLine{env: e, raw: raw, offset: int64(off)})
		}
		off = end + 1
	}
	if first > 0 {
		if int64(len(out)) != last-first+1 {
			return nil, fmt.Errorf("%w: %s holds %d lines, its key names %d positions", ErrCorruptSegment, key, len(out), last-first+1)
		}
		for i, l := range out {
			if l.env.Position != first+int64(i) {
				return nil, fmt.Errorf("%w: %s line %d has position %d, want %d", ErrCorruptSegment, key, i+1, l.env.Position, first+int64(i))
			}
		}
	}
	return out, nil
}

// lineDecoder decodes stored lines, one at a time (not safe for
// concurrent use; the store keeps a pool of them, Store.lineDecoder, as
// a fresh one fills its per-type caches again: allocations that a read of
// a few lines, a segment at low load, paid for each of its lines).
//
// It decodes with encoding/json's rules (go-json-experiment's v1 options:
// lenient about names, duplicates and UTF-8, as json.Unmarshal was) but in
// one pass, where json.Unmarshal scanned every line twice (a validity
// scan, then the decode): the relay decodes every line it publishes, and
// that was its largest cost (docs/benchmarks.md). Data and the metadata
// values (json.RawMessage) are not copied: they are the bytes of the line
// itself, capacity-limited slices of it like Event.Raw (which keeps the
// line alive anyway), verified byte for byte (a value that is not, which
// cannot happen, is copied). A line in the form the store writes is read
// by a faster path first, a token pass without reflection with the same
// result (decodeStored, linedecode.go); any other line takes the general
// path.
type lineDecoder struct {
	raw    []byte // the line being decoded
	opts   jsonv2.Options
	stored storedLine // decodeStored's state
}

func newLineDecoder() *lineDecoder {
	d := &lineDecoder{}
	d.opts = jsonv2.JoinOptions(jsonv1.DefaultOptionsV1(), jsonv2.WithUnmarshalers(
		jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *json.RawMessage) error {
			val, err := dec.ReadValue()
			if err != nil {
				return err
			}
			end := int(dec.InputOffset())
			if start := end - len(val); start >= 0 && end <= len(d.raw) && bytes.Equal(d.raw[start:end], val) {
				*v = json.RawMessage(d.raw[start:end:end])
			} else {
				*v = bytes.Clone(val)
			}
			return nil
		})))
	return d
}

// decode decodes raw. It is lenient about limits (they may have changed
// since the line was written) but requires the identity fields the index
// relies on.
func (d *lineDecoder) decode(raw []byte) (envelope.Envelope, error) {
	if e, ok := d.decodeStored(raw); ok {
		return e, lineIdentity(e)
	}
	var e envelope.Envelope
	d.raw = raw
	err := jsonv2.Unmarshal(raw, &e, d.opts)
	d.raw = nil
	if err != nil {
		return e, err
	}
	return e, lineIdentity(e)
}

// lineIdentity checks the identity fields of a decoded line.
func lineIdentity(e envelope.Envelope) error {
	if e.EventID == "" || e.Position < 1 || e.SequenceNumber < 1 || !e.Kind.Valid() || e.AggregateType == "" || e.AggregateID == "" {
		return fmt.Errorf("line lacks event_id, kind, aggregate, sequence_number or position")
	}
	return nil
}

// parseBlock splits the body of the segment named n (key) into its lines
// and checks them against the name. One shard: positions exactly
// first..last (parseSegment). More: every line's shard is ShardOf its
// aggregate; the lines go by shard, ascending, each shard's positions
// contiguous; the lowest shard is the name's, with positions exactly
// first..last (docs/eventstore.md#shards).
func parseBlock(n segmentName, key string, body []byte) ([]segmentLine, error) {
	return parseBlockWith(newLineDecoder(), n, key, body)
}

// parseBlockWith is parseBlock decoding with d.
func parseBlockWith(d *lineDecoder, n segmentName, key string, body []byte) ([]segmentLine, error) {
	if n.shards <= 1 {
		return parseSegment(d, key, body, n.first, n.last)
	}
	lines, err := parseSegment(d, key, body, 0, 0)
	if err != nil {
		return nil, err
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("%w: %s holds no line", ErrCorruptSegment, key)
	}
	for i := range lines {
		l := &lines[i]
		l.shard = ShardOf(l.env.AggregateType, l.env.AggregateID, n.shards)
		if i == 0 {
			continue
		}
		if p := lines[i-1]; l.shard < p.shard || l.shard == p.shard && l.env.Position != p.env.Position+1 {
			return nil, fmt.Errorf("%w: %s line %d is shard %d position %d after shard %d position %d (want shards ascending, each one's positions contiguous)",
				ErrCorruptSegment, key, i+1, l.shard, l.env.Position, p.shard, p.env.Position)
		}
	}
	if b := blocksOf(lines)[0]; b != (shardBlock{shard: n.shard, first: n.first, last: n.last}) {
		return nil, fmt.Errorf("%w: %s begins with shard %d positions %d..%d, its key names shard %d positions %d..%d",
			ErrCorruptSegment, key, b.shard, b.first, b.last, n.shard, n.first, n.last)
	}
	return lines, nil
}

// blocksOf returns the blocks of positions of parsed lines, one per shard,
// ascending.
func blocksOf(lines []segmentLine) []shardBlock {
	var out []shardBlock
	for _, l := range lines {
		if k := len(out); k > 0 && out[k-1].shard == l.shard {
			out[k-1].last = l.env.Position
			continue
		}
		out = append(out, shardBlock{shard: l.shard, first: l.env.Position, last: l.env.Position})
	}
	return out
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// lineDecoder returns a line decoder from the store's pool (put it back
// with s.lineDecoders.Put once its read is decoded).
func (s *Store) lineDecoder() *lineDecoder {
	if d, ok := s.lineDecoders.Get().(*lineDecoder); ok {
		return d
	}
	return newLineDecoder()
}
