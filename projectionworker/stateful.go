package projectionworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sluicehq/sluice/shared/envelope"
)

// Stateful is implemented by a projection whose documents depend on their
// current state — field updates such as increment or append, and keys
// that gather the events of many aggregates into one document (the
// declarative projections, projectionworker/declarative). The worker calls
// ProjectState instead of Project, with the round's DocState: documents
// are read from this version's own index (so a rebuild starts from
// nothing), and a document written earlier in the same round is seen by
// the later events of the round before their common bulk request is sent.
//
// Operations of a stateful projection carry Version = the document's
// stored version + 1 (external versioning): a 409 means another worker
// wrote the document meanwhile, and the event is retried on the new state
// (not counted as applied). Replays are the projection's to detect (the
// declarative projections keep the last sequence applied per aggregate in
// the document).
type Stateful interface {
	Projection
	ProjectState(ctx context.Context, e envelope.Envelope, st *DocState) ([]Op, error)
}

// Doc is a document as a stateful projection sees it.
type Doc struct {
	Source  json.RawMessage // nil when not found
	Version int64           // 0 when not found
}

// LoadError is a failure to read a document (Elasticsearch unreachable or
// answering 5xx): the event is retried, never dead-lettered.
type LoadError struct{ Err error }

func (e *LoadError) Error() string { return "projectionworker: load document: " + e.Err.Error() }
func (e *LoadError) Unwrap() error { return e.Err }

// DocState is one round's view of a stateful projection's documents.
type DocState struct {
	w       *Worker
	overlay map[[2]string]Doc
}

func (w *Worker) newDocState() *DocState { return &DocState{w: w, overlay: map[[2]string]Doc{}} }

// Get returns the document scope/id: as written earlier in this round,
// else as stored in this version's index.
func (s *DocState) Get(ctx context.Context, scope, id string) (Doc, error) {
	if d, ok := s.overlay[[2]string{scope, id}]; ok {
		return d, nil
	}
	if err := ValidateName(scope); err != nil {
		return Doc{}, err
	}
	if err := s.w.ensure(ctx, scope); err != nil {
		return Doc{}, &LoadError{Err: err}
	}
	index := IndexNames(s.w.o.IndexPrefix, scope, s.w.o.Projection.Name(), s.w.o.Version).Index
	res, err := s.w.o.ES.Get(index, id, s.w.o.ES.Get.WithContext(ctx), s.w.o.ES.Get.WithRealtime(true))
	if err != nil {
		return Doc{}, &LoadError{Err: err}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return Doc{}, &LoadError{Err: err}
	}
	if res.StatusCode == http.StatusNotFound {
		return Doc{}, nil
	}
	if res.StatusCode != http.StatusOK {
		return Doc{}, &LoadError{Err: fmt.Errorf("GET %s/%s: %d %s", index, id, res.StatusCode, body)}
	}
	var got struct {
		Found   bool            `json:"found"`
		Version int64           `json:"_version"`
		Source  json.RawMessage `json:"_source"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		return Doc{}, &LoadError{Err: fmt.Errorf("GET %s/%s: %w", index, id, err)}
	}
	if !got.Found {
		return Doc{}, nil
	}
	return Doc{Source: got.Source, Version: got.Version}, nil
}

// Put records the document an operation of this round writes.
func (s *DocState) Put(scope, id string, d Doc) { s.overlay[[2]string{scope, id}] = d }

// isLoadError reports whether err is a LoadError.
func isLoadError(err error) bool {
	var le *LoadError
	return errors.As(err, &le)
}

func isStateful(p Projection) bool {
	_, ok := p.(Stateful)
	return ok
}
