package envelope

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// decodeAggregateKey inverts AggregateKey for the literal forms: the
// aggregate type, and the id or (hashed) the hex digest.
func decodeAggregateKey(k string) (typ, id string, hashed bool) {
	typ, rest, _ := strings.Cut(k, ":")
	switch {
	case strings.HasPrefix(rest, aggregateKeyEscape):
		return typ, rest[len(aggregateKeyEscape):], false
	case strings.HasPrefix(rest, aggregateKeyHashed):
		return typ, rest[len(aggregateKeyHashed):], true
	}
	return typ, rest, false
}

// TestAggregateKeyInjective: pairs of distinct aggregates whose keys
// collided under the earlier form (issue 21.8) get distinct keys, every key
// fits the registry, and ordinary ids keep the key they always had.
func TestAggregateKeyInjective(t *testing.T) {
	long := strings.Repeat("x", 600)
	long2 := strings.Repeat("é", 300)
	exact := strings.Repeat("y", MaxAggregateKeyBytes-len("Order:")) // key of exactly 512 bytes
	pairs := []struct{ name, typA, a, typB, b string }{
		{"literal sha256 of a long id", "Order", "sha256:" + sha256Hex(long), "Order", long},
		{"literal sha256 of a long multibyte id", "Order", "sha256:" + sha256Hex(long2), "Order", long2},
		{"escaped literal sha256 vs long", "Order", "~sha256:" + sha256Hex(long), "Order", long},
		{"tilde vs plain", "Order", "~x", "Order", "x"},
		{"double tilde vs tilde", "Order", "~~x", "Order", "~x"},
		{"tilde sha256 vs sha256", "Order", "~sha256:ab", "Order", "sha256:ab"},
		{"bare prefix", "Order", "sha256:", "Order", "~"},
		{"tilde alone vs empty-looking", "Order", "~", "Order", "~~"},
		{"type vs id split", "Order", "a:b", "Order", "a:b "},
		{"other type", "Order", "1", "Invoice", "1"},
		{"exact limit vs escaped over limit", "Order", exact, "Order", "~" + exact[1:]},
		{"escaped at the limit vs hash", "Order", "~" + exact[:len(exact)-2], "Order", "sha256:" + sha256Hex("~"+exact[:len(exact)-2])},
		{"hashed long vs hashed longer", "Order", long, "Order", long + "x"},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			ka, kb := AggregateKey(p.typA, p.a), AggregateKey(p.typB, p.b)
			if ka == kb {
				t.Fatalf("(%s, %.40q…) and (%s, %.40q…) share key %.80q", p.typA, p.a, p.typB, p.b, ka)
			}
			for _, k := range []string{ka, kb} {
				if len(k) > MaxAggregateKeyBytes {
					t.Fatalf("key of %d bytes", len(k))
				}
			}
		})
	}
	// Unchanged for ids that start with neither "~" nor "sha256:".
	for _, id := range []string{"o-1", "shop:orders:a/b", "café", "a~b", "sha256", "Sha256:x", exact} {
		if got := AggregateKey("Order", id); got != "Order:"+id {
			t.Errorf("AggregateKey(Order, %.40q) = %.60q, want the plain form", id, got)
		}
	}
	if got := AggregateKey("Order", long); got != "Order:sha256:"+sha256Hex(long) {
		t.Errorf("long id: %q", got)
	}
	if got := AggregateKey("Order", "sha256:"+sha256Hex(long)); got != "Order:~sha256:"+sha256Hex(long) {
		t.Errorf("literal sha256 id: %q", got)
	}
}

// FuzzAggregateKey: distinct (aggregate_type, aggregate_id) pairs never
// share a key, keys fit the registry, and literal keys decode back to the
// pair they came from.
func FuzzAggregateKey(f *testing.F) {
	long := strings.Repeat("x", 600)
	f.Add("Order", "sha256:"+sha256Hex(long), "Order", long)
	f.Add("Order", "~x", "Order", "x")
	f.Add("Order", "~~", "Order", "~")
	f.Add("Order", "sha256:", "Order", "")
	f.Add("A", strings.Repeat("z", 510), "A", "~"+strings.Repeat("z", 509))
	f.Fuzz(func(t *testing.T, ta, a, tb, b string) {
		if !isAggregateType(ta) || !isAggregateType(tb) || a == "" || b == "" {
			return
		}
		ka, kb := AggregateKey(ta, a), AggregateKey(tb, b)
		if (ta != tb || a != b) && ka == kb {
			t.Fatalf("(%q, %q) and (%q, %q) share key %q", ta, a, tb, b, ka)
		}
		for _, c := range []struct{ typ, id, key string }{{ta, a, ka}, {tb, b, kb}} {
			if len(c.key) > MaxAggregateKeyBytes {
				t.Fatalf("key of %d bytes for (%q, %q)", len(c.key), c.typ, c.id)
			}
			typ, rest, hashed := decodeAggregateKey(c.key)
			if typ != c.typ || (hashed && rest != sha256Hex(c.id)) || (!hashed && rest != c.id) {
				t.Fatalf("key %q of (%q, %q) decodes to (%q, %q, hashed %v)", c.key, c.typ, c.id, typ, rest, hashed)
			}
		}
	})
}
