package acceptance

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/eventstoretest"
	"github.com/sluicehq/sluice/shared/envelope"

	"golang.org/x/text/unicode/norm"
)

// TestAggregateIDNormalisationNoCollisions is scenario 7: instance ids with
// special characters, case differences, surrounding white space and
// Unicode NFC/NFD forms go through the API, the event store, the relay, the
// worker and Elasticsearch. Ids equal after normalisation (NFC, trimmed)
// are one instance — a second create through another spelling is rejected
// as existing, a patch through it updates the same instance — and ids that
// differ are never merged: each has its own aggregate, registry rows and
// document. Invalid ids are refused with 422 and nothing is written.
func TestAggregateIDNormalisationNoCollisions(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, setup{})
	p.startDefault()
	const db, class = "norm", "things"
	// Each group is one instance: its spellings normalise to the same id.
	groups := [][]string{
		{"Order-1"},
		{"order-1", " order-1 ", "order-1  "},
		{"ORDER-1"},
		{"caf\u00e9", "cafe\u0301", "  cafe\u0301"}, // NFC and NFD
		{"cafe"},             // not é
		{"\u03a9", "\u2126"}, // Greek omega; OHM SIGN is NFC-equivalent
		{"\ufb01le"},         // ligature: NFC keeps it (NFKC would not)
		{"file"},             // so it differs from the ligature
		{"stra\u00dfe"},      // ß
		{"strasse"},          // not ß
		{"a/b"},              // slash
		{"a%2Fb"},            // a literal percent sign, not a slash
		{"a:b"},              // colon (ids may contain it)
		{"a b"},              // inner space is significant
		{"ab"},               //
		{".."},               // dot segments are just ids
		{"a/../b"},           //
		{"b"},                //
		{"x?y#z&w=1"},        // URL metacharacters
		{"emoji \U0001F680", "  emoji \U0001F680"},          // astral plane
		{"\u00e4\u0308", "a\u0308\u0308"},                   // ä + combining diaeresis, NFD spelling
		{strings.Repeat("long-", 90)},                       // 450 bytes, under the 512-byte aggregate limit
		{"ends with dot.", "ends with dot. "},               //
		{"\u05d0\u05d1"},                                    // right-to-left letters
		{"mixed-\u0130-dotted"},                             // İ
		{"mixed-i\u0307-dotted"},                            // i + combining dot: not İ under NFC
		{"\u1100\u1161", "\uac00"},                          // Hangul jamo compose to 가 under NFC
		{"0", " 0"},                                         //
		{"00"},                                              //
		{"quote\"and\\backslash", " quote\"and\\backslash"}, //
	}
	// Refused (docs/architecture.md#aggregate-identity): empty after trimming, control and format
	// characters (category C), invalid UTF-8, an aggregate id over 512 bytes.
	invalid := []string{"   ", "nul\u0000", "bell\u0007", "tab\tinside", "zero\u200bwidth", "bad\xffutf8", strings.Repeat("x", 600)}

	normalise := func(s string) string { return norm.NFC.String(strings.TrimSpace(s)) }
	exp := expectation{db: db, class: class, faultFree: true}
	type inst struct {
		id      string
		applied int
		slot    int64 // slot of the last applied command = document _version
	}
	var insts []inst
	for gi, g := range groups {
		id := normalise(g[0])
		for _, v := range g[1:] {
			if normalise(v) != id {
				t.Fatalf("test table: %q and %q are in one group but normalise differently", g[0], v)
			}
		}
		a := p.create(db, class, g[0], map[string]any{"group": gi, "spelling": g[0]})
		if a.InstanceID != id {
			t.Errorf("create %q: instance_id %q, want the normalised %q", g[0], a.InstanceID, id)
		}
		in := inst{id: id, applied: 1, slot: a.SequenceNumber}
		for vi, v := range g[1:] {
			// another spelling of the same id: a create is rejected
			// (exists), a patch updates the one instance.
			p.create(db, class, v, map[string]any{"group": gi, "dup": vi})
			exp.rejected++
			pa := p.patch(db, class, v, map[string]any{"patched_via": v})
			if pa.InstanceID != id {
				t.Errorf("patch %q: instance_id %q, want %q", v, pa.InstanceID, id)
			}
			in.applied++
			in.slot = pa.SequenceNumber
		}
		exp.applied += in.applied
		insts = append(insts, in)
	}
	exp.instances = len(insts)
	for i, a := range insts {
		for _, b := range insts[i+1:] {
			if a.id == b.id {
				t.Fatalf("test table: %q appears in two groups", a.id)
			}
		}
	}

	// Commands only: the instance worker is still appending domain events.
	appendsBefore := p.mustStoreCount(eventstoretest.Filter{Kind: envelope.KindCommand})
	for _, bad := range invalid {
		// the body is written by hand: json.Marshal would replace
		// invalid UTF-8 with U+FFFD.
		body := []byte(`{"instance_id":"` + jsonEscape(bad) + `","data":{}}`)
		_, err := p.command(http.MethodPost, instancesPath(db, class), body, "", 30*time.Second)
		var ae *apiError
		if !errors.As(err, &ae) || (ae.code != http.StatusUnprocessableEntity && ae.code != http.StatusBadRequest) {
			t.Errorf("create %q: %v, want 422 (or 400)", bad, err)
		}
	}
	if n := p.mustStoreCount(eventstoretest.Filter{Kind: envelope.KindCommand}); n != appendsBefore {
		t.Errorf("invalid ids wrote %d commands", n-appendsBefore)
	}

	p.waitDrained(90 * time.Second)
	p.checkEndState(exp)
	aggs := map[string]bool{}
	for _, e := range p.storeEvents("domain", db+":"+class+":") {
		aggs[strings.TrimPrefix(e.AggregateID, db+":"+class+":")] = true
	}
	for _, in := range insts {
		if !aggs[in.id] {
			t.Errorf("no aggregate for %q in the store", in.id)
		}
		doc := p.instanceDoc(db, class, in.id)
		if !doc.Found || doc.Source["instance_id"] != in.id || doc.Version != in.slot {
			t.Errorf("%q: document found %t instance_id %q _version %d, want _version %d", in.id, doc.Found, doc.Source["instance_id"], doc.Version, in.slot)
		}
		// read-your-writes through the API agrees, by any spelling.
		code, body, err := p.call(http.MethodGet, instancePath(db, class, " "+in.id+" "), nil, "")
		var got struct {
			InstanceID     string `json:"instance_id"`
			SequenceNumber int64  `json:"sequence_number"`
		}
		if err != nil || code != http.StatusOK || json.Unmarshal(body, &got) != nil || got.InstanceID != in.id || got.SequenceNumber != in.slot {
			t.Errorf("GET %q: %d %s %v", in.id, code, body, err)
		}
	}
	if len(aggs) != len(insts) {
		t.Errorf("%d aggregates in the store, want %d", len(aggs), len(insts))
	}
}

// jsonEscape escapes s for a JSON string literal, keeping invalid UTF-8
// bytes as they are.
func jsonEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[c>>4])
			b.WriteByte("0123456789abcdef"[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
