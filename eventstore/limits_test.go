package eventstore

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shared/envelope"
)

// sizedCommand returns a command whose stored line, with sequence_number
// and position at their widest (19 digits each), is exactly n bytes.
func sizedCommand(t *testing.T, s *Store, n int) envelope.Envelope {
	t.Helper()
	e := command("Order", "sized", "")
	line := func(e envelope.Envelope) int {
		p, err := envelope.Prepare(e, envelope.Limits{MaxEnvelopeBytes: 1 << 30}, s.hooks.now)
		if err != nil {
			t.Fatal(err)
		}
		p.SequenceNumber, p.Position = 9223372036854775807, 9223372036854775807
		b, err := envelope.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	pad := n - line(e)
	if pad < 0 {
		t.Fatalf("a command of %d bytes cannot be built", n)
	}
	e.Data = []byte(`{"v":"` + strings.Repeat("x", pad) + `"}`)
	if got := line(e); got != n {
		t.Fatalf("built a line of %d bytes, want %d", got, n)
	}
	return e
}

// EVENT_STORE_MAX_ENVELOPE_BYTES bounds the stored line, sequence_number
// and position included (issue 21 item 4): an envelope whose widest line is
// exactly at the limit is stored, one byte more is refused synchronously
// with a 413-class error naming the limit, and nothing of it is reserved.
func TestEnvelopeLimitBoundsTheStoredLine(t *testing.T) {
	const limit = 4096
	e := newEnv(t)
	cfg := testConfig()
	cfg.MaxEnvelopeBytes = limit
	s := e.store(t, cfg)
	cases := []struct {
		name   string
		size   int
		stored bool
	}{
		{"exactly at the limit", limit, true},
		{"one byte over", limit + 1, false},
		{"well under", limit / 2, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := sizedCommand(t, s, c.size)
			headBefore, err := s.Head(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			rs, err := s.Append(ctxT(t), env)
			if err != nil {
				t.Fatal(err)
			}
			r := rs[0]
			if c.stored {
				if r.Err != nil {
					t.Fatalf("refused: %v", r.Err)
				}
				if len(r.Event.Raw) > limit {
					t.Errorf("stored line of %d bytes, over the limit of %d", len(r.Event.Raw), limit)
				}
				got, err := s.ByEventID(ctxT(t), env.EventID)
				if err != nil || len(got.Raw) > limit {
					t.Errorf("read back: %d bytes, %v", len(got.Raw), err)
				}
				return
			}
			var ve *envelope.ValidationError
			if !errors.As(r.Err, &ve) || ve.Code != envelope.CodeLimitExceeded || ve.HTTPStatus() != http.StatusRequestEntityTooLarge {
				t.Fatalf("got %s, want a limit_exceeded (413) validation error", describe(r))
			}
			if ve.Limit != strconv.Itoa(limit)+" bytes" || !strings.Contains(ve.Reason, strconv.Itoa(limit)) {
				t.Errorf("error does not name the limit: limit %q, reason %q", ve.Limit, ve.Reason)
			}
			if st := rowState(t, e.pool, env.EventID); st != "none" {
				t.Errorf("refused envelope has an index row (%s)", st)
			}
			if head, _ := s.Head(ctxT(t)); head != headBefore {
				t.Errorf("head moved from %d to %d for a refused envelope", headBefore, head)
			}
		})
	}
	// the same envelope is refused whatever the log's length (the bound
	// takes the widest numbers), so a retry gets the same answer
	over := sizedCommand(t, s, limit+1)
	for _, q := range []string{`UPDATE sluice.log_head SET next_position = 9000000000000000000`,
		`UPDATE sluice.sequences SET last_sequence = 9000000000000000000 WHERE aggregate_id = 'sized'`} {
		if _, err := e.pool.Exec(ctxT(t), q); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		rs, err := s.Append(ctxT(t), over)
		if err != nil {
			t.Fatal(err)
		}
		if rs[0].Err == nil {
			t.Fatalf("an envelope over the limit was stored at position %d", rs[0].Event.Envelope.Position)
		}
	}
	at := sizedCommand(t, s, limit)
	r := mustAppend(t, s, at)[0]
	if len(r.Event.Raw) != limit {
		t.Errorf("with 19-digit sequence and position the line is %d bytes, want exactly the limit %d", len(r.Event.Raw), limit)
	}
}
