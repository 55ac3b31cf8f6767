package dlq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/registry"
)

// Outcomes of one letter in a redrive.
const (
	OutcomeRedriven = "redriven" // produced again (and marked)
	OutcomeWould    = "would"    // dry run: would be produced
	OutcomeSkipped  = "skip"     // already handled, a duplicate, or its row is no longer dead
	OutcomeFailed   = "failed"   // cannot be redriven (not a letter, the original is gone)
)

// RedriveOptions select the letters of Redrive: one (Ref) or all not yet
// handled (All).
type RedriveOptions struct {
	Ref    *Ref
	All    bool
	DryRun bool
	// ReadProgress, when set, is told of each record read (All).
	ReadProgress ProgressFunc
	// Progress, when set, is told of each letter handled.
	Progress ProgressFunc
}

// RedriveItem is what happened to one letter.
type RedriveItem struct {
	Letter  string `json:"letter"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail"`
}

// RedriveResult is what Redrive did (or, on a dry run, would do).
type RedriveResult struct {
	Topic    string        `json:"topic"`
	DryRun   bool          `json:"dry_run"`
	Items    []RedriveItem `json:"items"`
	Redriven int           `json:"redriven"`
	Skipped  int           `json:"skipped"`
	Failed   int           `json:"failed"`
	// Letters is the number of letters considered.
	Letters int `json:"letters"`
}

// Redrive resets each selected letter's registry row (dead → failed, due
// now, attempts reset) and re-produces the original record — key, value
// and headers — to its original topic (see the package comment for the
// protocol). On an error it returns what was done so far with the error.
func (q *Queue) Redrive(ctx context.Context, o RedriveOptions) (RedriveResult, error) {
	res := RedriveResult{Topic: q.cfg.Topic, DryRun: o.DryRun, Items: []RedriveItem{}}
	if o.All == (o.Ref != nil) {
		return res, errors.New("give exactly one of --offset or --all")
	}
	if q.deps.Registry == nil {
		return res, errors.New("dlq: redrive needs the registry")
	}
	var ls []*Letter
	if o.All {
		var err error
		if ls, err = q.Letters(ctx, o.ReadProgress); err != nil {
			return res, err
		}
	} else {
		l, err := q.Letter(ctx, *o.Ref)
		if err != nil {
			return res, err
		}
		ls = []*Letter{l}
	}
	ms, err := q.Markers(ctx)
	if err != nil {
		return res, err
	}
	rd := &redriver{q: q, markers: ms, dryRun: o.DryRun, res: &res}
	res.Letters = len(ls)
	for i, l := range ls {
		if err := rd.redrive(ctx, l); err != nil {
			return res, err
		}
		if o.Progress != nil {
			o.Progress(int64(i+1), int64(len(ls)))
		}
	}
	return res, nil
}

// redriver redrives letters one by one.
type redriver struct {
	q       *Queue
	markers map[string]Marker
	dryRun  bool
	res     *RedriveResult
}

func (rd *redriver) item(l *Letter, outcome, detail string) {
	switch outcome {
	case OutcomeSkipped:
		rd.res.Skipped++
	case OutcomeFailed:
		rd.res.Failed++
	default:
		rd.res.Redriven++
	}
	rd.res.Items = append(rd.res.Items, RedriveItem{Letter: l.ID(), Outcome: outcome, Detail: detail})
}

func (rd *redriver) redrive(ctx context.Context, l *Letter) error {
	prev, hasPrev := rd.markers[l.ID()]
	if hasPrev && (prev.Action == StateRedriven || prev.Action == StateDropped) {
		rd.item(l, OutcomeSkipped, "already "+prev.Action+" at "+prev.At.Format(time.RFC3339))
		return nil
	}
	if l.Bad != nil {
		rd.item(l, OutcomeFailed, l.Bad.Error())
		return nil
	}
	for k, m := range rd.markers {
		if k != l.ID() && m.Action == StateRedriven && m.OriginalTopic == l.Record.OriginalTopic &&
			m.OriginalPartition == l.Record.OriginalPartition && m.OriginalOffset == l.Record.OriginalOffset {
			rd.item(l, OutcomeSkipped, fmt.Sprintf("duplicate: original %s already redriven through letter %s", l.OriginalRef(), k))
			if !rd.dryRun {
				return rd.mark(ctx, l, StateRedriven, "duplicate of letter "+k+"; not produced")
			}
			return nil
		}
	}
	orig, err := rd.q.Original(ctx, l)
	if err != nil {
		rd.item(l, OutcomeFailed, err.Error())
		return nil
	}
	eventID, handler := l.EventID(), l.Record.Handler
	reg := rd.q.deps.Registry
	if rd.dryRun {
		status := "no registry row"
		if eventID != "" && handler != "" {
			rows, err := reg.Get(ctx, eventID)
			if err != nil {
				return err
			}
			for _, r := range rows {
				if r.Handler == handler {
					status = "registry row " + string(r.Status)
				}
			}
		}
		if strings.HasPrefix(status, "registry row ") && status != "registry row dead" && !hasPrev {
			rd.item(l, OutcomeSkipped, status+" (not dead): would not be produced")
			return nil
		}
		rd.item(l, OutcomeWould, fmt.Sprintf("re-produce %s to %s (%s)", l.OriginalRef(), orig.Topic, status))
		return nil
	}
	if !hasPrev {
		if err := rd.mark(ctx, l, StateRedriving, ""); err != nil {
			return err
		}
	}
	if eventID != "" && handler != "" {
		err := reg.Redrive(ctx, handler, eventID)
		switch {
		case err == nil, errors.Is(err, registry.ErrNotFound):
		case errors.Is(err, registry.ErrNotDead) && hasPrev:
			// This letter's own earlier redrive reset the row and was
			// interrupted before its produce: produce again.
		case errors.Is(err, registry.ErrNotDead):
			rd.item(l, OutcomeSkipped, fmt.Sprintf("registry row of %s/%s is no longer dead (%v); not produced", handler, eventID, err))
			return rd.mark(ctx, l, StateRedriven, "registry row not dead; not produced")
		default:
			return fmt.Errorf("dlq redrive %s: %w", l.ID(), err)
		}
	}
	if err := rd.q.cl.ProduceSync(ctx, orig).FirstErr(); err != nil {
		return fmt.Errorf("dlq redrive %s: produce to %s: %w", l.ID(), orig.Topic, err)
	}
	if err := rd.mark(ctx, l, StateRedriven, fmt.Sprintf("produced to %s/%d/%d", orig.Topic, orig.Partition, orig.Offset)); err != nil {
		return err
	}
	if eventID == "" {
		eventID = "- (no event_id: no registry row)"
	}
	rd.item(l, OutcomeRedriven, fmt.Sprintf("%s -> %s/%d/%d, event %s", l.OriginalRef(), orig.Topic, orig.Partition, orig.Offset, eventID))
	return nil
}

func (rd *redriver) mark(ctx context.Context, l *Letter, action, note string) error {
	if err := rd.q.writeMarker(ctx, l, action, note); err != nil {
		return err
	}
	rd.markers[l.ID()] = Marker{Action: action, OriginalTopic: l.Record.OriginalTopic, OriginalPartition: l.Record.OriginalPartition,
		OriginalOffset: l.Record.OriginalOffset, At: time.Now().UTC()}
	return nil
}
