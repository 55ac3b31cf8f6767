package envelope

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// MaxAggregateIDBytes is the longest aggregate_id, in bytes after
// normalisation (docs/architecture.md#aggregate-identity).
const MaxAggregateIDBytes = 512

// MaxESIDBytes is the longest Elasticsearch _id used as is; longer ids are
// replaced by their SHA-256 (ESDocumentID).
const MaxESIDBytes = 512

// NamePattern is the rule for the db and class parts of instance aggregate
// ids; they become parts of Elasticsearch index names.
const NamePattern = "[a-z0-9][a-z0-9_-]{0,62}"

// maxNormalizeRounds bounds the NFC+trim fixpoint iteration. Real input
// settles after at most two rounds.
const maxNormalizeRounds = 8

// NormalizeAggregateID returns the normal form of an aggregate id (docs/architecture.md#aggregate-identity):
// the input must be valid UTF-8; Unicode NFC is applied and surrounding white
// space (unicode.IsSpace, e.g. space, tab, NBSP) is trimmed, repeatedly until
// neither step changes the string, so the function is idempotent. The result
// must be non-empty, at most 512 bytes, and contain no rune of Unicode
// category C (Cc, Cf, Cs, Co) and no unassigned code point (Cn). Case is kept:
// "Order-1" and "order-1" are different aggregates. Errors are
// *ValidationError with Field "aggregate_id".
func NormalizeAggregateID(s string) (string, error) {
	return normalizeID("aggregate_id", s)
}

func normalizeID(field, s string) (string, error) {
	if err := CheckText(s, field); err != nil {
		return "", err
	}
	t := s
	for round := 0; ; round++ {
		u := strings.TrimFunc(norm.NFC.String(t), unicode.IsSpace)
		if u == t {
			break
		}
		if round == maxNormalizeRounds {
			return "", invalid(field, "normal form", "has no stable normal form (NFC and trimming do not converge)")
		}
		t = u
	}
	if t == "" {
		return "", invalid(field, "non-empty", "must not be empty or only white space")
	}
	if len(t) > MaxAggregateIDBytes {
		return "", invalid(field, "512 bytes", "is %d bytes after normalisation; the limit is %d bytes", len(t), MaxAggregateIDBytes)
	}
	for i, r := range t {
		if !allowedIDRune(r) {
			return "", invalid(field, "no category C",
				"contains U+%04X at byte %d, a control, format, surrogate, private-use or unassigned character (Unicode category C)", r, i)
		}
	}
	return t, nil
}

// allowedIDRune reports whether r is assigned and not in category C.
func allowedIDRune(r rune) bool {
	if r < 0x80 {
		return r >= 0x20 && r < 0x7f
	}
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z)
}

func isName(s string) bool {
	if len(s) < 1 || len(s) > 63 || !(isLower(s[0]) || isDigit(s[0])) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isLower(c) && !isDigit(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// ValidateDBName checks the db part of an instance aggregate id against
// NamePattern.
func ValidateDBName(db string) error {
	if !isName(db) {
		return invalid("db", NamePattern, "must match %s, got %q", NamePattern, db)
	}
	return nil
}

// ValidateClassName checks the class part of an instance aggregate id
// against NamePattern.
func ValidateClassName(class string) error {
	if !isName(class) {
		return invalid("class", NamePattern, "must match %s, got %q", NamePattern, class)
	}
	return nil
}

// InstanceAggregateID returns the aggregate_id of an instance (aggregate
// type AggregateTypeInstance): "{db}:{class}:{instance_id}", with db and class
// checked against NamePattern and instanceID normalised like an aggregate id
// (it may contain ':' and '/'). The whole id must fit in 512 bytes.
func InstanceAggregateID(db, class, instanceID string) (string, error) {
	if err := ValidateDBName(db); err != nil {
		return "", err
	}
	if err := ValidateClassName(class); err != nil {
		return "", err
	}
	iid, err := normalizeID("instance_id", instanceID)
	if err != nil {
		return "", err
	}
	id := db + ":" + class + ":" + iid
	n, err := NormalizeAggregateID(id)
	if err != nil {
		return "", err
	}
	if n != id {
		return "", invalid("instance_id", "normalised", "does not stay normalised inside the aggregate id")
	}
	return id, nil
}

// ParseInstanceAggregateID splits an instance aggregate id at its first two
// ':' into db, class and instance_id, and checks each part (db and class
// against NamePattern, instance_id non-empty and normalised). Errors are
// *ValidationError with Field "aggregate_id".
func ParseInstanceAggregateID(id string) (db, class, instanceID string, err error) {
	const field = "aggregate_id"
	const form = "{db}:{class}:{instance_id}"
	i := strings.IndexByte(id, ':')
	if i < 0 {
		return "", "", "", invalid(field, form, "must have the form %s for aggregate type %s", form, AggregateTypeInstance)
	}
	j := strings.IndexByte(id[i+1:], ':')
	if j < 0 {
		return "", "", "", invalid(field, form, "must have the form %s for aggregate type %s", form, AggregateTypeInstance)
	}
	db, class, instanceID = id[:i], id[i+1:i+1+j], id[i+1+j+1:]
	if !isName(db) {
		return "", "", "", invalid(field, NamePattern, "db part %q must match %s", db, NamePattern)
	}
	if !isName(class) {
		return "", "", "", invalid(field, NamePattern, "class part %q must match %s", class, NamePattern)
	}
	n, err := normalizeID(field, instanceID)
	if err != nil {
		return "", "", "", err
	}
	if n != instanceID {
		return "", "", "", invalid(field, "normalised", "instance_id part is not normalised (Unicode NFC, surrounding white space trimmed)")
	}
	return db, class, instanceID, nil
}

// keptInPath reports whether c is kept literally by EncodePathSegment: the
// RFC 3986 unreserved characters except '.', i.e. A-Z a-z 0-9 - _ ~.
func keptInPath(c byte) bool {
	return isUpper(c) || isLower(c) || isDigit(c) || c == '-' || c == '_' || c == '~'
}

const upperHex = "0123456789ABCDEF"

// EncodePathSegment percent-encodes an id for use as one path segment or
// file name (docs/architecture.md#aggregate-identity): A-Z a-z 0-9 '-' '_' '~' are kept, every other byte of
// the UTF-8 encoding (including '/', '%', '.', ':') becomes %XX with
// upper-case hex. The output contains only [A-Za-z0-9_~%-], so it can never
// be "." or "..", contain a separator, or traverse; distinct inputs give
// distinct outputs. Note that case is significant in the output, like in ids:
// on a case-insensitive file system "Order-1" and "order-1" still collide.
func EncodePathSegment(id string) string {
	n := 0
	for i := 0; i < len(id); i++ {
		if !keptInPath(id[i]) {
			n++
		}
	}
	if n == 0 {
		return id
	}
	b := make([]byte, 0, len(id)+2*n)
	for i := 0; i < len(id); i++ {
		c := id[i]
		if keptInPath(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', upperHex[c>>4], upperHex[c&0x0f])
	}
	return string(b)
}

func upperHexValue(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// DecodePathSegment reverses EncodePathSegment. It accepts only the exact
// output of EncodePathSegment, so encoding is a bijection: it rejects
// characters that must have been escaped, malformed or lower-case escapes,
// escapes of characters that must appear literally, and results that are not
// valid UTF-8. Errors are *ValidationError with Field "path_segment".
func DecodePathSegment(s string) (string, error) {
	const field = "path_segment"
	const rule = "percent-encoding of EncodePathSegment"
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if keptInPath(c) {
			b = append(b, c)
			i++
			continue
		}
		if c != '%' {
			return "", invalid(field, rule, "byte %#02x at offset %d must be percent-encoded", c, i)
		}
		if i+2 >= len(s) {
			return "", invalid(field, rule, "truncated escape at offset %d", i)
		}
		hi, lo := upperHexValue(s[i+1]), upperHexValue(s[i+2])
		if hi < 0 || lo < 0 {
			return "", invalid(field, rule, "escape %q at offset %d is not '%%' and two upper-case hex digits", s[i:i+3], i)
		}
		v := byte(hi<<4 | lo)
		if keptInPath(v) {
			return "", invalid(field, rule, "escape %q at offset %d encodes %q, which must appear literally", s[i:i+3], i, v)
		}
		b = append(b, v)
		i += 3
	}
	if !utf8.Valid(b) {
		return "", invalid(field, rule, "does not decode to valid UTF-8")
	}
	return string(b), nil
}

// KafkaKey returns the Kafka record key of e (docs/architecture.md#aggregate-identity): metadata.ordering_key
// if set and non-empty, else aggregate_type + ":" + aggregate_id.
func KafkaKey(e Envelope) []byte {
	if k, ok := e.Metadata.String(MetaOrderingKey); ok && k != "" {
		return []byte(k)
	}
	return []byte(e.AggregateType + ":" + e.AggregateID)
}

// ESDocumentID returns the Elasticsearch _id for an id (docs/architecture.md#aggregate-identity): the id
// itself when it is at most 512 bytes, else the lower-case hex SHA-256 of
// it (the caller keeps the full id in the document body).
func ESDocumentID(id string) string {
	if len(id) <= MaxESIDBytes {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// MaxAggregateKeyBytes is the longest aggregate key AggregateKey returns:
// the registry's limit on its aggregate_id column (docs/registry.md#tables).
const MaxAggregateKeyBytes = 512

// Prefixes of the aggregate-key forms (AggregateKey).
const (
	// aggregateKeyHashed starts the part after "type:" of a hashed key.
	aggregateKeyHashed = "sha256:"
	// aggregateKeyEscape starts the part after "type:" of a literal id
	// that could be mistaken for another form.
	aggregateKeyEscape = "~"
)

// AggregateKey returns the key of an aggregate in the processed-event
// registry and the workers' ordering unit (docs/registry.md): aggregate_type + ":"
// followed by one of three forms, which no two aggregates can share:
//
//   - the id itself, when it starts with neither "~" nor "sha256:";
//   - "~" + the id, when it starts with "~" or "sha256:" (escaped, so a
//     literal id "sha256:<hex>" cannot pose as the hashed form, nor "~x" as
//     the escape of "x");
//   - "sha256:" + the lower-case hex SHA-256 of the id, when the key of
//     either form above would be longer than MaxAggregateKeyBytes.
//
// The part after the first ':' tells its form by its first bytes, and
// aggregate_type contains no ':' (AggregateTypePattern), so the map from
// (aggregate_type, aggregate_id) to key is injective (up to SHA-256
// collisions). Issue 21.8: the earlier form had no escape, and the id
// "sha256:<hex>" shared its key with the long id hashing to <hex>.
// Deployment note: keys of ids starting with "~" or "sha256:" changed with
// this form (docs/worker-runtime.md).
func AggregateKey(aggregateType, aggregateID string) string {
	k := aggregateType + ":"
	if strings.HasPrefix(aggregateID, aggregateKeyEscape) || strings.HasPrefix(aggregateID, aggregateKeyHashed) {
		k += aggregateKeyEscape
	}
	if len(k)+len(aggregateID) <= MaxAggregateKeyBytes {
		return k + aggregateID
	}
	sum := sha256.Sum256([]byte(aggregateID))
	return aggregateType + ":" + aggregateKeyHashed + hex.EncodeToString(sum[:])
}
