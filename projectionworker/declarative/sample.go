package declarative

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/sluicehq/sluice/shared/envelope"
)

// SampleDoc is one document RunSample prints.
type SampleDoc struct {
	Projection string          `json:"projection"`
	Scope      string          `json:"scope"`
	ID         string          `json:"_id"`
	Version    int64           `json:"_version"`
	Source     json.RawMessage `json:"_source"`
}

// RunSample runs the projections over the envelopes of r (JSON Lines, as
// the store writes them) in order, with the documents kept in memory, and
// writes the resulting documents to w as JSON Lines (sorted by projection,
// scope and id) — `sluice projection test FILE --events sample.jsonl`. A
// line that is not an envelope, or an expression that fails, stops it
// with an error naming the line.
func RunSample(ctx context.Context, ps []*Projection, r io.Reader, w io.Writer) error {
	stores := make([]*Memory, len(ps))
	for i := range stores {
		stores[i] = NewMemory()
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(trimSpace(b)) == 0 {
			continue
		}
		e, err := envelope.Parse(b, envelope.DefaultLimits())
		if err != nil {
			return fmt.Errorf("events line %d: %w", line, err)
		}
		for i, p := range ps {
			if !p.Handles(e) {
				continue
			}
			if _, err := p.Apply(ctx, e, stores[i]); err != nil {
				return fmt.Errorf("events line %d: %w", line, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	var out []SampleDoc
	for i, p := range ps {
		for k, d := range stores[i].Docs {
			out = append(out, SampleDoc{Projection: p.Name(), Scope: k[0], ID: k[1], Version: d.Version, Source: d.Source})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Projection != b.Projection {
			return a.Projection < b.Projection
		}
		if a.Scope != b.Scope {
			return a.Scope < b.Scope
		}
		return a.ID < b.ID
	})
	for _, d := range out {
		b, err := envelope.EncodeJSON(d)
		if err != nil {
			return err
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	return nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
