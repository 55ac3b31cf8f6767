package envelope

import (
	"strings"
	"testing"
)

func TestNormalizeAggregateID(t *testing.T) {
	tests := []struct {
		name, in, want string // want "" means rejected
	}{
		{"plain", "Order-1", "Order-1"},
		{"case kept", "order-1", "order-1"},
		{"leading and trailing spaces", "  Order-1  ", "Order-1"},
		{"tabs and newlines around", "\t\n Order-1 \r\n", "Order-1"},
		{"nbsp around", "\u00a0Order-1\u00a0", "Order-1"},
		{"ideographic space around", "\u3000Order-1\u2003", "Order-1"},
		{"inner space kept", "Order 1", "Order 1"},
		{"inner nbsp kept", "Order\u00a01", "Order\u00a01"},
		{"nfc precomposed", "caf\u00e9", "caf\u00e9"},
		{"nfd composed", "cafe\u0301", "caf\u00e9"},
		{"hangul jamo composed", "\u1100\u1161", "\uac00"},
		{"singleton decomposition", "\u212b", "\u00c5"}, // ANGSTROM SIGN → Å
		{"slash", "a/b", "a/b"},
		{"percent", "%2F", "%2F"},
		{"dotdot", "..", ".."},
		{"dot", ".", "."},
		{"colons", "a:b:c", "a:b:c"},
		{"emoji", "🚀-1", "🚀-1"},
		{"emoji zwj sequence rejected", "👩\u200d💻", ""}, // ZWJ is Cf
		{"combining mark exposed by trim", " \u0301a", "\u0301a"},
		{"lone combining mark", "\u0301", "\u0301"},
		{"line separator inside", "a\u2028b", "a\u2028b"},
		{"replacement char", "\ufffd", "\ufffd"},

		{"empty", "", ""},
		{"only spaces", "   ", ""},
		{"only nbsp", "\u00a0", ""},
		{"nul", "a\x00b", ""},
		{"bell", "a\u0007b", ""},
		{"del", "a\x7fb", ""},
		{"c1 control", "a\u0085b", ""},
		{"inner tab", "a\tb", ""},
		{"inner newline", "a\nb", ""},
		{"zero width space", "a\u200bb", ""},
		{"bom", "\ufeffa", ""},
		{"bidi override", "a\u202eb", ""},
		{"private use", "a\ue000", ""},
		{"unassigned", "a\u0378", ""},
		{"noncharacter", "a\uffff", ""},
		{"512 bytes", strings.Repeat("x", 512), strings.Repeat("x", 512)},
		{"513 bytes", strings.Repeat("x", 513), ""},
		{"513 bytes multibyte", strings.Repeat("x", 511) + "é", ""},
		{"514 bytes trimmed to 512", " " + strings.Repeat("x", 512) + " ", strings.Repeat("x", 512)},
		{"NFD 513 bytes composes to 512", strings.Repeat("x", 510) + "e\u0301", strings.Repeat("x", 510) + "é"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NormalizeAggregateID(tc.in)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("NormalizeAggregateID(%+q) = %+q, want error", tc.in, got)
				}
				if fieldOf(err) != "aggregate_id" || codeOf(err) != CodeInvalid {
					t.Fatalf("error %v lacks field/code", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NormalizeAggregateID(%+q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Fatalf("NormalizeAggregateID(%+q) = %+q, want %+q", tc.in, got, tc.want)
			}
			again, err := NormalizeAggregateID(got)
			if err != nil || again != got {
				t.Fatalf("not idempotent: %+q → %+q (%v)", got, again, err)
			}
		})
	}
	// Case is significant; NFC/NFD twins are one aggregate.
	a, _ := NormalizeAggregateID("Order-1")
	b, _ := NormalizeAggregateID("order-1")
	if a == b || EncodePathSegment(a) == EncodePathSegment(b) {
		t.Fatal("Order-1 and order-1 collide")
	}
	c, _ := NormalizeAggregateID("\u00e9")
	d, _ := NormalizeAggregateID("e\u0301")
	if c != d || EncodePathSegment(c) != EncodePathSegment(d) {
		t.Fatal("NFC/NFD twins differ")
	}
}

func TestInstanceAggregateID(t *testing.T) {
	good := []struct{ db, class, iid, want string }{
		{"shop", "orders", "o-1", "shop:orders:o-1"},
		{"db1", "order_items", "a:b/c", "db1:order_items:a:b/c"},
		{"0", "c-1", " cafe\u0301 ", "0:c-1:café"},
		{strings.Repeat("d", 63), strings.Repeat("c", 63), "x", strings.Repeat("d", 63) + ":" + strings.Repeat("c", 63) + ":x"},
		{"shop", "orders", "\u0301x", "shop:orders:\u0301x"},
	}
	for _, tc := range good {
		id, err := InstanceAggregateID(tc.db, tc.class, tc.iid)
		if err != nil || id != tc.want {
			t.Errorf("InstanceAggregateID(%q,%q,%q) = %q, %v; want %q", tc.db, tc.class, tc.iid, id, err, tc.want)
			continue
		}
		db, class, iid, err := ParseInstanceAggregateID(id)
		if err != nil || db != tc.db || class != tc.class || id != db+":"+class+":"+iid {
			t.Errorf("ParseInstanceAggregateID(%q) = %q %q %q %v", id, db, class, iid, err)
		}
	}
	bad := []struct{ db, class, iid, field string }{
		{"Shop", "orders", "o", "db"},
		{"_shop", "orders", "o", "db"},
		{"-shop", "orders", "o", "db"},
		{"", "orders", "o", "db"},
		{"sh.op", "orders", "o", "db"},
		{"sh:op", "orders", "o", "db"},
		{strings.Repeat("d", 64), "orders", "o", "db"},
		{"shop", "", "o", "class"},
		{"shop", "Orders", "o", "class"},
		{"shop", "or/ders", "o", "class"},
		{"shop", "orders", "", "instance_id"},
		{"shop", "orders", "  ", "instance_id"},
		{"shop", "orders", "a\x00", "instance_id"},
		{"shop", "orders", strings.Repeat("i", 501), "aggregate_id"}, // whole id > 512 bytes
	}
	for _, tc := range bad {
		if _, err := InstanceAggregateID(tc.db, tc.class, tc.iid); fieldOf(err) != tc.field {
			t.Errorf("InstanceAggregateID(%.20q,%.20q,%.20q) error %v, want field %q", tc.db, tc.class, tc.iid, err, tc.field)
		}
	}
	for _, id := range []string{"", "shop", "shop:orders", "shop:orders:", "Shop:orders:o", "shop:Orders:o",
		"shop::o", ":orders:o", "shop:orders: o", "shop:orders:e\u0301"} {
		if _, _, _, err := ParseInstanceAggregateID(id); fieldOf(err) != "aggregate_id" {
			t.Errorf("ParseInstanceAggregateID(%q) error %v", id, err)
		}
	}
}

func TestPathSegment(t *testing.T) {
	tests := []struct{ id, want string }{
		{"Order-1", "Order-1"},
		{"A-Za-z0-9_~", "A-Za-z0-9_~"},
		{".", "%2E"},
		{"..", "%2E%2E"},
		{"a/b", "a%2Fb"},
		{"/", "%2F"},
		{"%2F", "%252F"},
		{"%", "%25"},
		{"a b", "a%20b"},
		{"a:b", "a%3Ab"},
		{"a\\b", "a%5Cb"},
		{"é", "%C3%A9"},
		{"🚀", "%F0%9F%9A%80"},
		{"shop:orders:a/../b", "shop%3Aorders%3Aa%2F%2E%2E%2Fb"},
	}
	seen := map[string]string{}
	for _, tc := range tests {
		got := EncodePathSegment(tc.id)
		if got != tc.want {
			t.Errorf("EncodePathSegment(%q) = %q, want %q", tc.id, got, tc.want)
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("%q and %q encode to %q", prev, tc.id, got)
		}
		seen[got] = tc.id
		back, err := DecodePathSegment(got)
		if err != nil || back != tc.id {
			t.Errorf("DecodePathSegment(%q) = %q, %v; want %q", got, back, err, tc.id)
		}
	}
	for _, bad := range []string{
		"a/b",    // must be escaped
		"a.b",    // '.' must be escaped
		"..",     // traversal
		"a b",    // space
		"é",      // raw non-ASCII
		"%2f",    // lower-case hex
		"%2",     // truncated
		"%",      // truncated
		"a%",     // truncated
		"%ZZ",    // not hex
		"%+1",    // not hex
		"%41",    // 'A' must appear literally
		"%7E",    // '~' must appear literally
		"%2D",    // '-' must appear literally
		"%FF",    // invalid UTF-8
		"%C3",    // truncated UTF-8
		"%C0%AF", // overlong '/'
	} {
		if got, err := DecodePathSegment(bad); fieldOf(err) != "path_segment" {
			t.Errorf("DecodePathSegment(%q) = %q, %v; want error", bad, got, err)
		}
	}
}
