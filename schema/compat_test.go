package schema

import (
	"strings"
	"testing"
)

// TestCompatibilityRules is a table of schema pairs (v1 registered, v2 the
// candidate) with the verdict per mode, after Confluent Schema Registry's
// documented rules for JSON Schema: BACKWARD asks whether v2 readers read
// v1 events, FORWARD whether v1 readers read v2 events, FULL both; NONE
// accepts everything. The content model decides what adding or removing a
// property means: open (additionalProperties absent or true) or closed
// (additionalProperties: false).
func TestCompatibilityRules(t *testing.T) {
	const (
		open   = `{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number"}},"required":["id","total"]}`
		closed = `{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number"}},"required":["id","total"],"additionalProperties":false}`
	)
	type verdict struct{ backward, forward bool } // true: compatible
	cases := []struct {
		name   string
		v1, v2 string
		want   verdict
		reason string // a part of the first reason, when incompatible
	}{
		{"identical", open, open, verdict{true, true}, ""},
		{"add optional property, closed model", closed,
			`{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number"},"note":{"type":"string"}},"required":["id","total"],"additionalProperties":false}`,
			verdict{true, false}, "adds property `note`, which the closed content model of v1 readers refuses"},
		{"add optional property, open model", open,
			`{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number"},"note":{"type":"string"}},"required":["id","total"]}`,
			verdict{false, true}, "adds property `note` to an open content model"},
		{"add optional property accepting anything, open model", open,
			`{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number"},"note":{"description":"free"}},"required":["id","total"]}`,
			verdict{true, true}, ""},
		{"add required property, closed model", closed,
			`{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number"},"currency":{"type":"string"}},"required":["id","total","currency"],"additionalProperties":false}`,
			verdict{false, false}, "v2 adds required property `currency` that v1 events lack"},
		{"remove required property, open model", open,
			`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`,
			verdict{true, false}, "v2 removes required property `total` that v1 readers need"},
		{"remove required property, closed model", closed,
			`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"],"additionalProperties":false}`,
			verdict{false, false}, "removes property `total` from a closed content model"},
		{"remove optional property, open model",
			`{"type":"object","properties":{"id":{"type":"string"},"note":{"type":"string"}}}`,
			`{"type":"object","properties":{"id":{"type":"string"}}}`,
			verdict{true, false}, "removes property `note` but stays open"},
		{"make required optional", open,
			`{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number"}},"required":["id"]}`,
			verdict{true, false}, "v2 makes property `total` optional, but v1 readers require it"},
		{"make optional required",
			`{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number"}},"required":["id"]}`, open,
			verdict{false, true}, "v2 requires property `total`, which is optional in v1 events"},
		{"widen integer to number", `{"type":"object","properties":{"n":{"type":"integer"}}}`, `{"type":"object","properties":{"n":{"type":"number"}}}`,
			verdict{true, false}, "changes the type from integer to number"},
		{"change type", `{"type":"object","properties":{"n":{"type":"string"}}}`, `{"type":"object","properties":{"n":{"type":"number"}}}`,
			verdict{false, false}, "at /properties/n"},
		{"extend type union", `{"type":"string"}`, `{"type":["string","null"]}`, verdict{true, false}, ""},
		{"open the content model", closed, strings.Replace(closed, `"additionalProperties":false`, `"additionalProperties":true`, 1), verdict{true, false}, ""},
		{"close the content model", open, strings.Replace(closed, "", "", 1), verdict{false, true}, "closes the content model"},
		{"raise maxLength", `{"type":"string","maxLength":10}`, `{"type":"string","maxLength":20}`, verdict{true, false}, "stricter maximum length"},
		{"add maxLength", `{"type":"string"}`, `{"type":"string","maxLength":20}`, verdict{false, true}, "adds a maximum length of 20"},
		{"raise minimum", `{"type":"number","minimum":0}`, `{"type":"number","minimum":1}`, verdict{false, true}, "stricter minimum"},
		{"remove maximum", `{"type":"number","maximum":9}`, `{"type":"number"}`, verdict{true, false}, ""},
		{"add pattern", `{"type":"string"}`, `{"type":"string","pattern":"^[a-z]+$"}`, verdict{false, true}, "requires pattern"},
		{"extend enum", `{"enum":["a","b"]}`, `{"enum":["a","b","c"]}`, verdict{true, false}, `v2 allows the value "c", which v1 refuses`},
		{"narrow enum", `{"enum":["a","b"]}`, `{"enum":["a"]}`, verdict{false, true}, `v1 allows the value "b"`},
		{"multipleOf refined", `{"type":"integer","multipleOf":2}`, `{"type":"integer","multipleOf":4}`, verdict{false, true}, "multiples of 4"},
		{"items type changed", `{"type":"array","items":{"type":"string"}}`, `{"type":"array","items":{"type":"integer"}}`, verdict{false, false}, "/items"},
		{"add anyOf alternative", `{"anyOf":[{"type":"string"}]}`, `{"anyOf":[{"type":"string"},{"type":"integer"}]}`, verdict{true, false}, "matches none of the alternatives"},
		{"nested required added", `{"type":"object","properties":{"a":{"type":"object","properties":{"x":{"type":"string"}}}}}`,
			`{"type":"object","properties":{"a":{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}}}`,
			verdict{false, true}, "(at /properties/a)"},
		{"same through $ref", `{"type":"object","properties":{"a":{"$ref":"#/$defs/s"}},"$defs":{"s":{"type":"string"}}}`,
			`{"type":"object","properties":{"a":{"type":"string"}}}`, verdict{true, true}, ""},
		{"unknown keyword changed", `{"type":"object","dependentRequired":{"a":["b"]}}`, `{"type":"object","dependentRequired":{"a":["c"]}}`,
			verdict{false, false}, "keyword dependentRequired differs"},
		{"annotations only", `{"type":"string","description":"a"}`, `{"type":"string","description":"b","title":"t"}`, verdict{true, true}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v1, v2 := mustCompile(t, tc.v1), mustCompile(t, tc.v2)
			earlier := []Version{{1, v1}}
			cand := Version{2, v2}
			for _, m := range Compatibilities {
				reasons := CheckCompatibility(m, cand, earlier)
				want := true
				switch {
				case m == None:
				case m == Backward || m == BackwardTransitive:
					want = tc.want.backward
				case m == Forward || m == ForwardTransitive:
					want = tc.want.forward
				default:
					want = tc.want.backward && tc.want.forward
				}
				if got := len(reasons) == 0; got != want {
					t.Errorf("%s: compatible = %v, want %v (reasons %q)", m, got, want, reasons)
				}
			}
			if full := CheckCompatibility(Full, cand, earlier); tc.reason != "" && !strings.Contains(strings.Join(full, "; "), tc.reason) {
				t.Errorf("FULL: reasons %q, want one containing %q", full, tc.reason)
			}
		})
	}
}

// TestTransitive: v1 → v2 → v3 where each step is backward compatible with
// its predecessor but v3 is not with v1; only the transitive mode sees it.
func TestTransitive(t *testing.T) {
	v1 := mustCompile(t, `{"type":"object","properties":{"n":{"type":"integer"}},"additionalProperties":false}`)
	v2 := mustCompile(t, `{"type":"object","properties":{"n":{"type":"integer"}},"additionalProperties":true}`)
	v3 := mustCompile(t, `{"type":"object","properties":{},"additionalProperties":{"type":"string"}}`)
	earlier := []Version{{1, v1}, {2, v2}}
	for _, tc := range []struct {
		mode Compatibility
		ok   bool
	}{{Backward, false}, {BackwardTransitive, false}} {
		// v3 refuses v2's open properties and v1's integer n alike.
		if got := len(CheckCompatibility(tc.mode, Version{3, v3}, earlier)) == 0; got != tc.ok {
			t.Errorf("%s: %v", tc.mode, got)
		}
	}
	v3b := mustCompile(t, `{"type":"object","properties":{"n":{"type":"integer"},"m":{"type":"string"}}}`)
	// FORWARD: v2 readers (open) read v3b events, v1 readers (closed) do not.
	if r := CheckCompatibility(Forward, Version{3, v3b}, earlier); len(r) != 0 {
		t.Errorf("FORWARD against v2: %q", r)
	}
	r := CheckCompatibility(ForwardTransitive, Version{3, v3b}, earlier)
	if len(r) == 0 || !strings.Contains(strings.Join(r, ";"), "v1") {
		t.Errorf("FORWARD_TRANSITIVE against v1: %q", r)
	}
}

func mustCompile(t *testing.T, s string) *Compiled {
	t.Helper()
	c, err := Compile([]byte(s))
	if err != nil {
		t.Fatalf("Compile(%s): %v", s, err)
	}
	return c
}

func TestCompileRefuses(t *testing.T) {
	for name, s := range map[string]string{
		"not JSON":        `{`,
		"array":           `[1]`,
		"old draft":       `{"$schema":"http://json-schema.org/draft-07/schema#"}`,
		"bad keyword":     `{"type":"strin"}`,
		"external ref":    `{"$ref":"file:///etc/passwd"}`,
		"http ref":        `{"$ref":"https://example.com/s.json"}`,
		"bad minimum":     `{"minimum":"x"}`,
		"unresolved $ref": `{"$ref":"#/$defs/missing"}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Compile([]byte(s)); err == nil {
				t.Fatalf("Compile(%s) succeeded", s)
			}
		})
	}
}

func TestValidateNamesPointerAndKeyword(t *testing.T) {
	c := mustCompile(t, `{"type":"object","properties":{"lines":{"type":"array","items":{"type":"object","properties":{"qty":{"type":"integer","minimum":1}}}}},"required":["lines"]}`)
	for _, tc := range []struct{ data, pointer, keyword string }{
		{`{"lines":[{"qty":1},{"qty":0}]}`, "/lines/1/qty", "minimum"},
		{`{}`, "", "required"},
		{`{"lines":"x"}`, "/lines", "type"},
		{`{"lines":[{"qty":1}]}`, "", ""},
	} {
		err := c.Validate([]byte(tc.data))
		if tc.keyword == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.data, err)
			}
			continue
		}
		de, ok := err.(*DataError)
		if !ok || de.Pointer != tc.pointer || de.Keyword != tc.keyword {
			t.Errorf("%s: %#v, want pointer %q keyword %q", tc.data, err, tc.pointer, tc.keyword)
		}
	}
}
