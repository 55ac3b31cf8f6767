package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluicehq/sluice/dlq"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/suggest"
	"github.com/sluicehq/sluice/worker"
)

func (s *Server) routes() {
	s.read("GET "+Prefix+"overview", s.overview)
	s.read("GET "+Prefix+"health", s.health)
	s.read("GET "+Prefix+"flow", s.flow)
	s.read("GET "+Prefix+"audit", func(r *http.Request) (any, error) {
		n, err := queryInt(r.URL.Query(), "limit", 100, 1, 1000)
		if err != nil {
			return nil, err
		}
		return s.Audit(r.Context(), n)
	})
	s.act("POST "+Prefix+"relay/checkpoint", "relay.checkpoint.set", s.checkpointSet)
	s.read("GET "+Prefix+"relay/parked", s.parkedList)
	s.act("POST "+Prefix+"relay/parked/{position}/republish", "relay.parked.republish", s.parkedResolve(true))
	s.act("POST "+Prefix+"relay/parked/{position}/drop", "relay.parked.drop", s.parkedResolve(false))
	s.read("GET "+Prefix+"consumers/{group}", s.groupLag)
	s.act("POST "+Prefix+"consumers/{group}/reset", "consumer.reset", s.groupReset)
	s.read("GET "+Prefix+"consumers/{group}/pause", s.groupPauseState)
	s.act("POST "+Prefix+"consumers/{group}/pause", "consumer.pause", s.groupPause(true))
	s.act("POST "+Prefix+"consumers/{group}/resume", "consumer.resume", s.groupPause(false))
	s.read("GET "+Prefix+"dlq", s.dlqList)
	s.read("GET "+Prefix+"dlq/letter", s.dlqShow)
	s.act("POST "+Prefix+"dlq/redrive", "dlq.redrive", s.dlqRedrive)
	s.act("POST "+Prefix+"dlq/drop", "dlq.drop", s.dlqDrop)
	s.act("POST "+Prefix+"projections/{name}/rebuild", "projection.rebuild", s.projectionSwitch(true))
	s.act("POST "+Prefix+"projections/{name}/rollback", "projection.rollback", s.projectionSwitch(false))
	s.act("POST "+Prefix+"verify", "verify", s.verify)
	s.schemaRoutes()
	s.keyRoutes()
	s.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		// The catch-all wins over the router's own 405: a path served
		// under other methods is 405 with Allow, not "no endpoint".
		if allow := s.allowed(r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeProblem(w, http.StatusMethodNotAllowed, "method_not_allowed",
				"method "+r.Method+" is not allowed on "+r.URL.Path+"; allowed: "+strings.Join(allow, ", "))
			return
		}
		writeProblem(w, http.StatusNotFound, "not_found", "no admin endpoint "+r.Method+" "+r.URL.Path+" (docs/console.md)")
	})
}

// allowed lists the methods an endpoint of r's path answers (none when
// only the catch-all matches it).
func (s *Server) allowed(r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != Prefix {
			allow = append(allow, m)
		}
	}
	if slices.Contains(allow, http.MethodGet) {
		allow = append(allow, http.MethodHead)
	}
	return allow
}

// ---- relay ----------------------------------------------------------------

// CheckpointRequest moves the relay checkpoint: exactly one of Position or
// Time (RFC 3339: the first event committed at or after it).
type CheckpointRequest struct {
	Position *int64 `json:"position"`
	Time     string `json:"time"`
	DryRun   bool   `json:"dry_run"`
}

// CheckpointResult is the plan and, unless a dry run, the move.
type CheckpointResult struct {
	Plan   relay.CheckpointPlan `json:"plan"`
	DryRun bool                 `json:"dry_run"`
	Moved  bool                 `json:"moved"`
	From   int64                `json:"from"`
	To     int64                `json:"to"`
}

func (s *Server) checkpointSet(r *http.Request, body []byte) (Action, error) {
	var req CheckpointRequest
	if err := decode(body, &req); err != nil {
		return Action{}, err
	}
	a := Action{Target: "relay " + s.opts.Process.Relay.Name, DryRun: req.DryRun}
	if (req.Position == nil) == (req.Time == "") {
		return a, atField("position", invalid("give exactly one of position or time"))
	}
	if s.opts.Store == nil || s.opts.Bucket == nil {
		return a, errors.New("admin: the event store is not available in this process")
	}
	ctx := r.Context()
	var pos int64
	if req.Position != nil {
		pos = *req.Position
	} else {
		t, err := time.Parse(time.RFC3339Nano, req.Time)
		if err != nil {
			return a, atField("time", invalid("time %q: want RFC 3339: %v", req.Time, err))
		}
		if pos, err = s.opts.Store.PositionAt(ctx, t); err != nil {
			return a, err
		}
	}
	cps := relay.NewCheckpointStore(s.opts.Bucket, s.opts.Process.Relay.CheckpointKey)
	plan, err := relay.PlanCheckpoint(ctx, s.opts.Store, cps, pos)
	if errors.Is(err, relay.ErrCheckpointOutOfRange) {
		field := "position"
		if req.Position == nil {
			field = "time"
		}
		return a, atField(field, kind(errUnsafe, err))
	}
	if err != nil {
		return a, err
	}
	res := CheckpointResult{Plan: plan, DryRun: req.DryRun, From: plan.From, To: plan.To}
	a.Target = fmt.Sprintf("checkpoint %s %d -> %d", plan.Key, plan.From, plan.To)
	if !req.DryRun {
		old, cur, err := relay.SetCheckpoint(ctx, cps, pos)
		if err != nil {
			return a, err
		}
		res.Moved, res.From, res.To = true, old.Position, cur.Position
	}
	a.Result = res
	return a, nil
}

func (s *Server) parkedList(r *http.Request) (any, error) {
	q := r.URL.Query()
	f := relay.ParkedFilter{Relay: s.opts.Process.Relay.Name, State: q.Get("state"), Reason: q.Get("reason"), Topic: q.Get("topic"), Limit: 100}
	switch f.State {
	case "":
		f.State = relay.ParkedStateParked
	case "all":
		f.State = ""
	case relay.ParkedStateParked, relay.ParkedStateRepublished, relay.ParkedStateDropped:
	default:
		// The caller's mistake, not an outage (it was answered 503).
		return nil, atField("state", invalid("state %q: want parked, republished, dropped or all", f.State))
	}
	limit, err := queryInt(q, "limit", 100, 1, maxListLimit)
	if err != nil {
		return nil, err
	}
	f.Limit = limit
	recs, err := relay.NewParkedStore(s.opts.StorePool).List(r.Context(), f)
	if recs == nil && err == nil {
		recs = []relay.ParkedRecord{} // a list, also when empty: [] rather than null
	}
	return recs, err
}

// ResolveRequest republishes or drops a parked record.
type ResolveRequest struct {
	DryRun bool `json:"dry_run"`
	// Topic produces to this topic instead of the record's own (republish).
	Topic string `json:"topic"`
}

func (s *Server) parkedResolve(republish bool) func(*http.Request, []byte) (Action, error) {
	return func(r *http.Request, body []byte) (Action, error) {
		var req ResolveRequest
		if err := decode(body, &req); err != nil {
			return Action{}, err
		}
		a := Action{Target: "parked " + r.PathValue("position"), DryRun: req.DryRun}
		pos, err := strconv.ParseInt(r.PathValue("position"), 10, 64)
		if err != nil || pos < 1 {
			return a, atField("position", invalid("position %q: want a position >= 1", r.PathValue("position")))
		}
		ctx := r.Context()
		cfg := s.opts.Process
		ps := relay.NewParkedStore(s.opts.StorePool)
		opts := relay.ResolveOptions{Topic: req.Topic, DryRun: req.DryRun}
		var p relay.ParkedRecord
		if republish {
			opts.Spec = kafka.TopicSpec(cfg.Kafka)
			cl, kerr := kafka.NewClient(cfg.Kafka, kafka.MaxBuffered(1))
			if kerr != nil {
				return a, kerr
			}
			defer cl.Close()
			p, err = relay.RepublishParked(ctx, ps, cl, cfg.Relay.Name, pos, opts)
		} else {
			if req.Topic != "" {
				return a, atField("topic", invalid("topic applies to republish only"))
			}
			p, err = relay.DropParked(ctx, ps, cfg.Relay.Name, pos, opts)
		}
		switch {
		case errors.Is(err, relay.ErrParkedNotFound):
			return a, atField("position", kind(errNotFound, err))
		case errors.Is(err, relay.ErrNotParked):
			return a, kind(errConflict, err)
		case err != nil:
			return a, err
		}
		a.Result = map[string]any{"dry_run": req.DryRun, "position": p.Position, "event_id": p.EventID, "topic": p.Topic,
			"reason": p.Reason, "envelope_bytes": p.EnvelopeBytes, "republished": republish && !req.DryRun, "dropped": !republish && !req.DryRun}
		return a, nil
	}
}

// ---- consumer groups ------------------------------------------------------

func (s *Server) kadm() (*kadm.Client, func(), error) {
	cl, err := kafka.NewClient(s.opts.Process.Kafka)
	if err != nil {
		return nil, nil, err
	}
	return kadm.NewClient(cl), cl.Close, nil
}

func (s *Server) groupLag(r *http.Request) (any, error) {
	adm, closeFn, err := s.kadm()
	if err != nil {
		return nil, err
	}
	defer closeFn()
	if err := worker.FindGroup(r.Context(), adm, r.PathValue("group")); err != nil {
		return nil, atField("group", err)
	}
	if topic := r.URL.Query().Get("topic"); topic != "" {
		if err := worker.FindTopic(r.Context(), adm, topic); err != nil {
			return nil, atField("topic", err)
		}
	}
	return worker.Lag(r.Context(), adm, r.PathValue("group"), r.URL.Query().Get("topic"))
}

// ResetRequest resets a group's offsets (sluice consumer reset).
type ResetRequest struct {
	Topic  string `json:"topic"`
	To     string `json:"to"`
	DryRun bool   `json:"dry_run"`
	Force  bool   `json:"force"`
}

func (s *Server) groupReset(r *http.Request, body []byte) (Action, error) {
	var req ResetRequest
	if err := decode(body, &req); err != nil {
		return Action{}, err
	}
	group := r.PathValue("group")
	a := Action{Target: "group " + group + " to " + req.To, DryRun: req.DryRun}
	to, err := worker.ParseResetTarget(req.To)
	if err != nil {
		return a, atField("to", invalid("%s", strings.Replace(err.Error(), "--to", "to", 1)))
	}
	adm, closeFn, err := s.kadm()
	if err != nil {
		return a, err
	}
	defer closeFn()
	// As sluice consumer reset: a group or topic that does not exist is
	// 404 naming the nearest that does — committing offsets for a
	// mistyped group would create it, and Kafka's own answers
	// (GROUP_ID_NOT_FOUND, UNKNOWN_TOPIC_OR_PARTITION) read as an outage.
	if err := worker.FindGroup(r.Context(), adm, group); err != nil {
		return a, atField("group", err)
	}
	if req.Topic != "" {
		if err := worker.FindTopic(r.Context(), adm, req.Topic); err != nil {
			return a, atField("topic", err)
		}
	}
	res, err := worker.ResetOffsets(r.Context(), adm, worker.ResetOptions{Group: group, Topic: req.Topic, To: to, DryRun: req.DryRun, Force: req.Force})
	a.Result = res
	if errors.Is(err, worker.ErrGroupActive) {
		return a, kind(errConflict, errors.New(res.MembersText()+" (or force)"))
	}
	return a, err
}

func (s *Server) groupPauseState(r *http.Request) (any, error) {
	return s.opts.Registry.GroupPaused(r.Context(), r.PathValue("group"))
}

// PauseRequest pauses or resumes a worker group (sluice consumer
// pause|resume); the result is a registry.PauseChange.
type PauseRequest struct {
	Reason string `json:"reason"`
	DryRun bool   `json:"dry_run"`
	// AllowNew sets the flag of a group that is neither configured here
	// nor known to Kafka (its workers start later), as --allow-new.
	AllowNew bool `json:"allow_new"`
}

func (s *Server) groupPause(pause bool) func(*http.Request, []byte) (Action, error) {
	return func(r *http.Request, body []byte) (Action, error) {
		var req PauseRequest
		if err := decode(body, &req); err != nil {
			return Action{}, err
		}
		group := r.PathValue("group")
		a := Action{Target: "group " + group, DryRun: req.DryRun}
		if err := checkText("reason", req.Reason); err != nil {
			return a, err
		}
		if !req.AllowNew {
			if err := s.checkPauseGroup(r.Context(), group); err != nil {
				return a, atField("group", err)
			}
		}
		res, err := s.opts.Registry.SetGroupPaused(r.Context(), group, pause, whoOf(r), req.Reason, req.DryRun)
		if err != nil {
			return a, err
		}
		a.Result = res
		return a, nil
	}
}

// planRollback asks projectionworker.PlanRollback (as sluice projection
// rollback does) for the version Rollback would switch to and names it in
// a's target; a dry run's result is the plan (done). Without one the
// rollback is refused here, so that neither the dry run says it would roll
// back nor the act answers 202 for a job that can only fail.
func (s *Server) planRollback(ctx context.Context, name string, a *Action, dryRun bool) (done bool, err error) {
	plan, err := projectionworker.PlanRollback(ctx, s.opts.ES, s.opts.Process.Elasticsearch.IndexPrefix, name)
	if errors.Is(err, projectionworker.ErrNothingToRollBack) {
		return false, kind(errUnsafe, err)
	}
	if err != nil {
		return false, err
	}
	a.Target = fmt.Sprintf("projection %s v%d to v%d", name, plan.From, plan.To)
	if dryRun {
		a.Result = map[string]any{"dry_run": true, "from": plan.From, "to": plan.To, "indices": plan.Indices}
		return true, nil
	}
	return false, nil
}

// checkPauseGroup refuses, as sluice consumer pause|resume does, a group
// that is neither configured here (Workers) nor known to Kafka, naming the
// nearest that is (404): a mistyped group would otherwise get a durable
// flag no worker reads. A group whose flag is set may always be paused
// again or resumed.
// When Kafka cannot be asked within a few seconds the flag is set all the
// same: a pause must work while Kafka is out.
func (s *Server) checkPauseGroup(ctx context.Context, group string) error {
	configured := make([]string, 0, len(s.opts.Workers))
	for _, w := range s.opts.Workers {
		if w.Group == group {
			return nil
		}
		configured = append(configured, w.Group)
	}
	// A group whose flag is set was named on purpose once: it may be
	// paused again (idempotent) or resumed without allow_new.
	if st, err := s.opts.Registry.GroupPaused(ctx, group); err == nil && st.Paused {
		return nil
	}
	adm, closeFn, err := s.kadm()
	if err != nil {
		return nil
	}
	defer closeFn()
	kctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err = worker.FindGroup(kctx, adm, group)
	var nf *suggest.NotFoundError
	if !errors.As(err, &nf) {
		if err != nil {
			s.opts.Logger.Warn("admin: could not check that the group exists; setting its pause flag anyway", "group", group, "err", err)
		}
		return nil
	}
	if nf.Nearest == "" {
		nf.Nearest = suggest.Nearest(group, configured)
	}
	nf.Note += `; send "allow_new": true to set the flag before its workers start`
	return nf
}

// ---- dead letters ---------------------------------------------------------

// queue opens the dead-letter queue of topic. As sluice dlq, a topic that
// does not exist is 404 naming the nearest (dlq.(*Queue).Find), not
// Kafka's UNKNOWN_TOPIC_OR_PARTITION read as an outage.
func (s *Server) queue(ctx context.Context, topic string) (*dlq.Queue, error) {
	if topic == "" {
		return nil, atField("topic", invalid("topic is required (e.g. %s)", s.opts.Process.Kafka.CommandsDLQTopic))
	}
	q, err := dlq.New(dlq.Config{Topic: topic, Kafka: s.opts.Process.Kafka, By: who(RoleOperator)}, dlq.Deps{Registry: s.opts.Registry})
	if err != nil {
		return nil, err
	}
	if err := q.Find(ctx, s.opts.Process.Kafka.CommandsDLQTopic, s.opts.Process.Kafka.EventsDLQTopic); err != nil {
		q.Close()
		return nil, atField("topic", err)
	}
	return q, nil
}

// letterError is err of a queue operation on a letter as the admin API
// answers it: no letter there is 404, a letter named without its
// partition on a topic of several is 400 naming the field letter.
func letterError(err error) error {
	var pe *dlq.PartitionRequiredError
	switch {
	case errors.Is(err, dlq.ErrNoLetter):
		return atField("letter", kind(errNotFound, err))
	case errors.As(err, &pe):
		return atField("letter", invalid("topic %s has %d partitions: name the letter as partition:offset", pe.Topic, pe.Partitions))
	}
	return err
}

// parseLetter reads "partition:offset" (or "offset" for a single-partition topic).
func parseLetter(s string) (dlq.Ref, error) {
	p, o, found := strings.Cut(s, ":")
	if !found {
		p, o = "-1", s
	}
	part, err1 := strconv.ParseInt(p, 10, 32)
	off, err2 := strconv.ParseInt(o, 10, 64)
	if err1 != nil || err2 != nil || off < 0 || part < -1 {
		return dlq.Ref{}, atField("letter", invalid("letter %q: want partition:offset", s))
	}
	return dlq.Ref{Partition: int32(part), Offset: off}, nil
}

// LetterView is a letter as the admin API shows it.
type LetterView struct {
	Letter    string    `json:"letter"`
	State     string    `json:"state"`
	Timestamp time.Time `json:"produced_at"`
	Original  string    `json:"original,omitempty"`
	Handler   string    `json:"handler,omitempty"`
	EventID   string    `json:"event_id,omitempty"`
	Class     string    `json:"error_class,omitempty"`
	Attempts  int       `json:"attempts,omitempty"`
	FailedAt  time.Time `json:"failed_at,omitzero"`
	Error     string    `json:"error"`
	Pointer   bool      `json:"pointer_form,omitempty"`
}

func letterView(l *dlq.Letter, state string) LetterView {
	v := LetterView{Letter: l.ID(), State: state, Timestamp: l.Timestamp.UTC()}
	if l.Bad != nil {
		v.Error = l.Bad.Error()
		return v
	}
	v.Original, v.Handler, v.EventID, v.Class, v.Attempts, v.FailedAt, v.Error, v.Pointer = l.OriginalRef(), l.Record.Handler, l.EventID(),
		l.Record.ErrorClass, l.Record.AttemptCount, l.Record.FailedAt.UTC(), l.Record.Error, l.Record.OriginalTruncated
	return v
}

func (s *Server) dlqList(r *http.Request) (any, error) {
	q := r.URL.Query()
	// limit 0 lists every letter (dlq.ListOptions).
	limit, err := queryInt(q, "limit", 100, 0, maxListLimit)
	if err != nil {
		return nil, err
	}
	all, err := queryBool(q, "all")
	if err != nil {
		return nil, err
	}
	queue, err := s.queue(r.Context(), q.Get("topic"))
	if err != nil {
		return nil, err
	}
	defer queue.Close()
	res, err := queue.List(r.Context(), dlq.ListOptions{All: all, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := map[string]any{"topic": res.Topic, "total": res.Total, "handled": res.Handled, "hidden": res.Hidden, "more": res.More}
	ls := make([]LetterView, 0, len(res.Letters))
	for _, e := range res.Letters {
		ls = append(ls, letterView(e.Letter, e.State))
	}
	out["letters"] = ls
	return out, nil
}

func (s *Server) dlqShow(r *http.Request) (any, error) {
	q := r.URL.Query()
	ref, err := parseLetter(q.Get("letter"))
	if err != nil {
		return nil, err
	}
	queue, err := s.queue(r.Context(), q.Get("topic"))
	if err != nil {
		return nil, err
	}
	defer queue.Close()
	res, err := queue.Show(r.Context(), ref)
	if err != nil {
		return nil, letterError(err)
	}
	out := map[string]any{"letter": letterView(res.Letter, res.State), "marker": res.Marker}
	if res.OriginalErr != nil {
		out["original_error"] = res.OriginalErr.Error()
	} else if o := res.Original; o != nil {
		hdrs := map[string]string{}
		for _, h := range o.Headers {
			hdrs[h.Key] = string(h.Value)
		}
		out["original"] = map[string]any{"topic": o.Topic, "key": string(o.Key), "value": string(o.Value), "headers": hdrs}
	}
	return out, nil
}

// RedriveRequest redrives one letter (Letter, "partition:offset") or all
// letters not yet handled (All) of Topic.
type RedriveRequest struct {
	Topic  string `json:"topic"`
	Letter string `json:"letter"`
	All    bool   `json:"all"`
	DryRun bool   `json:"dry_run"`
}

func (s *Server) dlqRedrive(r *http.Request, body []byte) (Action, error) {
	var req RedriveRequest
	if err := decode(body, &req); err != nil {
		return Action{}, err
	}
	a := Action{Target: req.Topic + " " + req.Letter, DryRun: req.DryRun}
	if req.All {
		a.Target = req.Topic + " all"
	}
	if req.All == (req.Letter != "") {
		return a, atField("letter", invalid("give exactly one of letter or all"))
	}
	o := dlq.RedriveOptions{All: req.All, DryRun: req.DryRun}
	if !req.All {
		ref, err := parseLetter(req.Letter)
		if err != nil {
			return a, err
		}
		o.Ref = &ref
	}
	queue, err := s.queue(r.Context(), req.Topic)
	if err != nil {
		return a, err
	}
	defer queue.Close()
	res, err := queue.Redrive(r.Context(), o)
	a.Result = res
	return a, letterError(err)
}

// DropRequest drops one letter.
type DropRequest struct {
	Topic  string `json:"topic"`
	Letter string `json:"letter"`
	Reason string `json:"reason"`
	DryRun bool   `json:"dry_run"`
}

func (s *Server) dlqDrop(r *http.Request, body []byte) (Action, error) {
	var req DropRequest
	if err := decode(body, &req); err != nil {
		return Action{}, err
	}
	a := Action{Target: req.Topic + " " + req.Letter, DryRun: req.DryRun}
	ref, err := parseLetter(req.Letter)
	if err != nil {
		return a, err
	}
	queue, err := s.queue(r.Context(), req.Topic)
	if err != nil {
		return a, err
	}
	defer queue.Close()
	res, err := queue.Drop(r.Context(), ref, req.Reason, req.DryRun)
	if err != nil {
		return a, letterError(err)
	}
	out := map[string]any{"letter": res.Letter.ID(), "dry_run": req.DryRun, "dropped": res.Dropped, "already": res.Already}
	a.Result = out
	return a, nil
}

// ---- projections ----------------------------------------------------------

// SwitchRequest is a projection rebuild (Version, newer than every existing
// one) or rollback. Acting starts a job in this process (202); its progress
// is in the overview's jobs.
type SwitchRequest struct {
	Version int    `json:"version"`
	DryRun  bool   `json:"dry_run"`
	Settle  string `json:"settle"`
}

func (s *Server) projectionSwitch(rebuild bool) func(*http.Request, []byte) (Action, error) {
	return func(r *http.Request, body []byte) (Action, error) {
		var req SwitchRequest
		if err := decode(body, &req); err != nil {
			return Action{}, err
		}
		name := r.PathValue("name")
		a := Action{Target: "projection " + name, DryRun: req.DryRun}
		p, err := projectionworker.Lookup(name)
		if err != nil {
			return a, atField("name", kind(errNotFound, err))
		}
		settle := 5 * time.Second
		if req.Settle != "" {
			if settle, err = time.ParseDuration(req.Settle); err != nil || settle < 0 {
				return a, atField("settle", invalid("settle %q: want a duration >= 0 such as 5s", req.Settle))
			}
		}
		// The request is checked whole before anything is read.
		if rebuild && req.Version <= 0 {
			return a, atField("version", invalid("version N (>= 1, newer than every existing version) is required"))
		}
		if s.opts.ES == nil {
			return a, errors.New("admin: Elasticsearch is not configured in this process")
		}
		cfg := s.opts.Process
		if rebuild {
			a.Target = fmt.Sprintf("projection %s v%d", name, req.Version)
			adm, closeFn, err := s.kadm()
			if err != nil {
				return a, err
			}
			plan, err := projectionworker.PlanRebuild(r.Context(), s.opts.ES, adm, cfg.Elasticsearch.IndexPrefix, cfg.Kafka.GroupPrefix, p, req.Version)
			closeFn()
			if errors.Is(err, projectionworker.ErrStaleVersion) || errors.Is(err, projectionworker.ErrAlreadyLive) {
				return a, atField("version", kind(errUnsafe, err))
			}
			if err != nil {
				return a, err
			}
			if req.DryRun {
				a.Result = map[string]any{"dry_run": true, "plan": plan}
				return a, nil
			}
		} else if done, err := s.planRollback(r.Context(), name, &a, req.DryRun); err != nil || done {
			return a, err
		}
		k := map[bool]string{true: "rebuild", false: "rollback"}[rebuild]
		job := s.jobs.start(k, name, req.Version)
		if job == nil {
			return a, kind(errConflict, fmt.Errorf("a rebuild or rollback of %s is already running in this process", name))
		}
		op := projectionworker.Rollback
		if rebuild {
			op = projectionworker.Rebuild
		}
		go func() {
			// The job outlives the request; it stops with the process.
			sum, err := op(context.WithoutCancel(r.Context()), projectionworker.SwitchOptions{Config: cfg.ProjectionWorker(),
				Deps:       projectionworker.Deps{Pool: s.opts.RegistryPool, ES: s.opts.ES, Logger: s.log},
				Projection: p, Version: req.Version, Settle: settle,
				Progress: func(pr projectionworker.Progress) { s.jobs.update(func() { job.Progress = &pr }) }})
			s.jobs.update(func() {
				job.EndedAt = time.Now().UTC()
				if err != nil {
					job.Error = err.Error()
				} else {
					job.Summary = &sum
				}
			})
			s.log.Info("admin job ended", "job", job.ID, "err", err)
		}()
		a.Status, a.Result = http.StatusAccepted, map[string]any{"job": job.ID, "started": true}
		return a, nil
	}
}

// ---- verify ---------------------------------------------------------------

// VerifyRequest compares one db/class (sluice verify). DryRun only checks
// the request and names what would be compared, without reading it: a
// verify reads the whole class from the store and Elasticsearch.
type VerifyRequest struct {
	DB           string `json:"db"`
	Class        string `json:"class"`
	IndexVersion int    `json:"index_version"`
	DryRun       bool   `json:"dry_run"`
}

// VerifyPlan is a verify's dry run: what it would compare.
type VerifyPlan struct {
	DryRun     bool   `json:"dry_run"`
	DB         string `json:"db"`
	Class      string `json:"class"`
	Index      string `json:"index"`
	WriteAlias string `json:"write_alias"`
	Compares   string `json:"compares"`
}

func (s *Server) verify(r *http.Request, body []byte) (Action, error) {
	var req VerifyRequest
	if err := decode(body, &req); err != nil {
		return Action{}, err
	}
	a := Action{Target: req.DB + "/" + req.Class, DryRun: true} // verify changes nothing
	if req.DryRun {
		if err := envelope.ValidateDBName(req.DB); err != nil {
			return a, atField("db", invalid("db: %v", err))
		}
		if err := envelope.ValidateClassName(req.Class); err != nil {
			return a, atField("class", invalid("class: %v", err))
		}
		n := readmodel.InstanceNames(s.opts.Process.Elasticsearch.IndexPrefix, req.DB, req.IndexVersion)
		target, err := instanceworker.VerifyIndex(s.opts.Process.Elasticsearch.IndexPrefix, req.DB, req.IndexVersion)
		if err != nil {
			return a, atField("index_version", invalid("%v", err))
		}
		a.Result = VerifyPlan{DryRun: true, DB: req.DB, Class: req.Class, Index: target, WriteAlias: n.WriteAlias,
			Compares: "every instance of " + req.DB + "/" + req.Class + " in the event store (its last domain event) against its document in " +
				target + "; reads the whole class, changes nothing"}
		return a, nil
	}
	if s.opts.Store == nil || s.opts.ES == nil {
		return a, errors.New("admin: verify needs the event store and Elasticsearch")
	}
	rep, err := instanceworker.Verify(r.Context(), instanceworker.VerifyOptions{Store: s.opts.Store, ES: s.opts.ES,
		IndexPrefix: s.opts.Process.Elasticsearch.IndexPrefix, DB: req.DB, Class: req.Class, IndexVersion: req.IndexVersion})
	for _, f := range []string{"db", "class", "index_version"} {
		if err != nil && strings.HasPrefix(err.Error(), f+":") {
			return a, atField(f, kind(errInvalid, err))
		}
	}
	a.Result = rep
	return a, err
}
