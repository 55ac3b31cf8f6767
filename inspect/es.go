package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/httpcheck"
)

// Document is an Elasticsearch document as the console shows it.
type Document struct {
	Index   string          `json:"index"`
	ID      string          `json:"id"`
	Found   bool            `json:"found"`
	Version int64           `json:"version,omitempty"`
	SeqNo   int64           `json:"seq_no,omitempty"`
	Source  json.RawMessage `json:"source,omitempty"`
}

// docRef names the document a handler writes for e: the instance document
// (the instance worker, for commands; version = slot), a history document
// (one per event) or an instances-projection document. ok is false when
// the handler writes no document this package knows.
func (in *Inspector) docRef(e envelope.Envelope, handler string) (index, id string, versioned, ok bool) {
	if e.AggregateType != envelope.AggregateTypeInstance {
		return "", "", false, false
	}
	db, class, iid, err := envelope.ParseInstanceAggregateID(e.AggregateID)
	if err != nil {
		return "", "", false, false
	}
	if e.Kind == envelope.KindCommand {
		for _, h := range in.o.Handlers {
			if h.Name == handler && h.Kind == envelope.KindCommand {
				return readmodel.InstanceNames(in.o.IndexPrefix, db, 0).WriteAlias, readmodel.DocumentID(class, iid), true, true
			}
		}
		return "", "", false, false
	}
	// projection:{name}:v{N}
	parts := strings.Split(handler, ":")
	if len(parts) != 3 || parts[0] != "projection" {
		return "", "", false, false
	}
	alias := in.o.IndexPrefix + db + "_" + parts[1] + "_write"
	switch parts[1] {
	case "history":
		return alias, envelope.ESDocumentID(e.EventID), false, true
	case readmodel.Projection:
		return alias, readmodel.DocumentID(class, iid), true, true
	}
	return "", "", false, false
}

// document is the step of the document handler wrote for e, if any.
func (in *Inspector) document(ctx context.Context, e envelope.Envelope, handler string, warn func(string, ...any)) (Step, bool) {
	index, id, versioned, ok := in.docRef(e, handler)
	if !ok || in.o.ES == nil {
		return Step{}, false
	}
	st := Step{Step: "document", Handler: handler, Index: index, DocID: id}
	d, err := in.getDoc(ctx, index, id)
	if err != nil {
		warn("elasticsearch %s/%s: %v", index, id, err)
		st.State, st.Detail = StateUnknown, "Elasticsearch not readable"
		return st, true
	}
	if !d.Found {
		st.State, st.Detail = StatePending, "no document"
		return st, true
	}
	v := d.Version
	st.Version = &v
	switch {
	case !versioned:
		st.State, st.Detail = StateDone, "written"
	case v >= e.SequenceNumber:
		st.State, st.Detail = StateDone, fmt.Sprintf("version %d: at or past this slot (%d)", v, e.SequenceNumber)
	default:
		st.State, st.Detail = StatePending, fmt.Sprintf("version %d: behind this slot (%d)", v, e.SequenceNumber)
	}
	return st, true
}

// getDoc reads one document in real time.
func (in *Inspector) getDoc(ctx context.Context, index, id string) (Document, error) {
	es := in.o.ES
	// The client puts the id in the path as given: escape it, "." and ".."
	// included, or the request names the index or another document.
	res, err := es.Get(index, httpcheck.PathSegment(id), es.Get.WithContext(ctx), es.Get.WithRealtime(true))
	if err != nil {
		return Document{}, err
	}
	defer res.Body.Close()
	d := Document{Index: index, ID: id}
	if res.StatusCode == http.StatusNotFound {
		_, _ = io.Copy(io.Discard, res.Body)
		return d, nil
	}
	if res.IsError() {
		return Document{}, readmodel.NewStatusError("get", res.StatusCode, res.Body)
	}
	var g struct {
		Index   string          `json:"_index"`
		Found   bool            `json:"found"`
		Version int64           `json:"_version"`
		SeqNo   int64           `json:"_seq_no"`
		Source  json.RawMessage `json:"_source"`
	}
	if err := json.NewDecoder(res.Body).Decode(&g); err != nil {
		return Document{}, fmt.Errorf("decode: %w", err)
	}
	d.Found, d.Version, d.SeqNo, d.Source = g.Found, g.Version, g.SeqNo, g.Source
	if g.Index != "" {
		d.Index = g.Index
	}
	return d, nil
}
