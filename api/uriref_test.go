package api

import (
	"strings"
	"testing"
)

// A refusal of a CloudEvents source or dataschema names the character at
// fault as written: "/café" named 'Ã', the first byte of é read as
// Latin-1.
func TestCheckURIReferenceNamesTheCharacter(t *testing.T) {
	cases := []struct {
		name, v, want string
	}{
		{"two-byte character", "/café", `character 'é' at byte 4`},
		{"three-byte character", "/a€b", `character '€' at byte 2`},
		{"four-byte character", "urn:x:🚀", `character '🚀' at byte 6`},
		{"space", "/a b", `character ' ' at byte 2`},
		{"control", "/a\x01", `character '\x01' at byte 2`},
		{"invalid UTF-8", "/a\xff", `byte 0xff at byte 2`},
		{"bad escape", "/a%zz", `"%zz" at byte 2 is not a percent-encoded octet`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkURIReference(c.v, false)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("checkURIReference(%q) = %v, want it to say %s", c.v, err, c.want)
			}
		})
	}
	// Over HTTP: the structured mode's detail names the character.
	a := eventAPI(t, false)
	r := a.do("POST", "/v1/streams/Device/u-1/events", `{"specversion":"1.0","id":"u-1","source":"/café","type":"x.y"}`,
		"Content-Type: "+mediaCloudEvent).expect(t, 422, CodeValidationFailed)
	if r.str("field") != "source" || !strings.Contains(r.str("detail"), "'é'") {
		t.Fatalf("field %q detail %q, want source naming 'é'", r.str("field"), r.str("detail"))
	}
}
