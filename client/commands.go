package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// Command statuses of GET /v1/commands/{id} (docs/api.md, "Command
// status"). APPLIED, REJECTED and DEAD are final.
const (
	StatusPending    = "PENDING"
	StatusProcessing = "PROCESSING"
	StatusFailed     = "FAILED"
	StatusApplied    = "APPLIED"
	StatusRejected   = "REJECTED"
	StatusDead       = "DEAD"
)

// CommandOption sets a precondition or the idempotency key of an instance
// command.
type CommandOption func(*commandOpts)

type commandOpts struct {
	key      string
	expected *int64
}

// WithIdempotencyKey sets the command's Idempotency-Key, its command id
// (1..255 printable ASCII characters, no space, no ':'). The same key
// with the same request replays the stored command; with a different one
// it is a *ValidationError with Code idempotency_key_reused. Without it
// the client generates a random UUID per call, which makes the call's own
// retries safe but not a second call with the same intent.
func WithIdempotencyKey(key string) CommandOption {
	return func(o *commandOpts) { o.key = key }
}

// WithExpectedSeq makes the command conditional on the instance's last
// sequence being n (expected_seq; 0: the instance never had a command, a
// "create if new"). A mismatch is a *ConflictError.
func WithExpectedSeq(n int64) CommandOption {
	return func(o *commandOpts) { o.expected = &n }
}

// Accepted is the 202 reply to an instance command: stored, and on its way
// to the instance worker (WaitForCommand waits for its outcome).
type Accepted struct {
	CommandID      string `json:"command_id"`
	EventID        string `json:"event_id"`
	AggregateID    string `json:"aggregate_id"`
	InstanceID     string `json:"instance_id"`
	SequenceNumber int64  `json:"sequence_number"`
	StatusURL      string `json:"status_url"`
	// Replayed is true when the command was stored already with this
	// idempotency key (an earlier attempt or call).
	Replayed bool `json:"-"`
}

func instancesPath(db, class string) string {
	return "/v1/dbs/" + seg(db) + "/classes/" + seg(class) + "/instances"
}

// CreateInstance creates an instance of class in db. instanceID may be
// empty: the API then takes data's "{class}_id", else derives one from
// the command id. data is a JSON object (a json.RawMessage or a value
// encoding/json encodes as one), or nil.
func (c *Client) CreateInstance(ctx context.Context, db, class, instanceID string, data any, opts ...CommandOption) (*Accepted, error) {
	body, err := jsonBody(struct {
		InstanceID string `json:"instance_id,omitempty"`
		Data       any    `json:"data,omitempty"`
	}{instanceID, data})
	if err != nil {
		return nil, err
	}
	return c.command(ctx, http.MethodPost, instancesPath(db, class), body, "application/json", opts)
}

// PatchInstance applies a JSON Merge Patch (RFC 7386: a member set to null
// is removed) to an instance.
func (c *Client) PatchInstance(ctx context.Context, db, class, instanceID string, patch any, opts ...CommandOption) (*Accepted, error) {
	body, err := jsonBody(patch)
	if err != nil {
		return nil, err
	}
	return c.command(ctx, http.MethodPatch, instancesPath(db, class)+"/"+seg(instanceID), body, "application/merge-patch+json", opts)
}

// DeleteInstance deletes an instance.
func (c *Client) DeleteInstance(ctx context.Context, db, class, instanceID string, opts ...CommandOption) (*Accepted, error) {
	return c.command(ctx, http.MethodDelete, instancesPath(db, class)+"/"+seg(instanceID), nil, "", opts)
}

func (c *Client) command(ctx context.Context, method, path string, body []byte, ctype string, opts []CommandOption) (*Accepted, error) {
	var o commandOpts
	for _, f := range opts {
		f(&o)
	}
	if o.key == "" {
		o.key = uuid.NewString()
	}
	q := url.Values{}
	if o.expected != nil {
		q.Set("expected_seq", strconv.FormatInt(*o.expected, 10))
	}
	res, err := c.do(ctx, request{method: method, path: path, query: q, body: body, ctype: ctype,
		header: http.Header{"Idempotency-Key": {o.key}}, idempotent: true})
	if err != nil {
		return nil, err
	}
	var out Accepted
	if err := decode(res, &out); err != nil {
		return nil, err
	}
	out.Replayed = res.header.Get("Idempotent-Replayed") == "true"
	return &out, nil
}

// CommandStatus is the state of a command (GET /v1/commands/{id}).
type CommandStatus struct {
	CommandID      string     `json:"command_id"`
	EventID        string     `json:"event_id"`
	Status         string     `json:"status"`
	Reason         string     `json:"reason,omitempty"`
	EventType      string     `json:"event_type"`
	AggregateID    string     `json:"aggregate_id"`
	InstanceID     string     `json:"instance_id,omitempty"`
	SequenceNumber int64      `json:"sequence_number"`
	Attempts       int        `json:"attempts,omitempty"`
	NextAttemptAt  *time.Time `json:"next_attempt_at,omitempty"`
	ProcessedAt    *time.Time `json:"processed_at,omitempty"`
	// ReadModel is "stale" for an applied command whose instance document
	// could not be written (Reason says why).
	ReadModel string `json:"read_model,omitempty"`
}

// Final says whether the status will not change any more.
func (s *CommandStatus) Final() bool {
	return s.Status == StatusApplied || s.Status == StatusRejected || s.Status == StatusDead
}

// CommandStatus returns a command's status. An unknown command is a
// *NotFoundError (command_not_found).
func (c *Client) CommandStatus(ctx context.Context, commandID string) (*CommandStatus, error) {
	res, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/commands/" + seg(commandID), idempotent: true})
	if err != nil {
		return nil, err
	}
	var out CommandStatus
	if err := decode(res, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CommandFailedError is a command that reached a final status other than
// APPLIED: REJECTED by the instance worker (Status.Reason says why:
// "instance exists", "instance not found", …) or DEAD (dead-lettered).
type CommandFailedError struct {
	Status *CommandStatus
}

func (e *CommandFailedError) Error() string {
	return fmt.Sprintf("command %s %s: %s", e.Status.CommandID, e.Status.Status, e.Status.Reason)
}

// WaitForCommand polls a command's status until it is final, backing off
// (WithPollPolicy) until ctx ends. APPLIED returns the status and nil;
// REJECTED and DEAD return the status and a *CommandFailedError; the end
// of ctx returns the last status seen and the context's error.
func (c *Client) WaitForCommand(ctx context.Context, commandID string) (*CommandStatus, error) {
	b := c.poll.backoff()
	var last *CommandStatus
	for {
		st, err := c.CommandStatus(ctx, commandID)
		if err != nil {
			if ctx.Err() != nil {
				return last, fmt.Errorf("sluice client: wait for command %s: %w", commandID, errors.Join(context.Cause(ctx), err))
			}
			return last, err
		}
		last = st
		switch st.Status {
		case StatusApplied:
			return st, nil
		case StatusRejected, StatusDead:
			return st, &CommandFailedError{Status: st}
		}
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return last, fmt.Errorf("sluice client: wait for command %s (last %s): %w", commandID, st.Status, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// Wait is WaitForCommand of the accepted command.
func (a *Accepted) Wait(ctx context.Context, c *Client) (*CommandStatus, error) {
	return c.WaitForCommand(ctx, a.CommandID)
}

// Instance is an instance's state, folded from the event store
// (read-your-writes).
type Instance struct {
	AggregateID string `json:"aggregate_id"`
	DB          string `json:"db"`
	Class       string `json:"class"`
	InstanceID  string `json:"instance_id"`
	// SequenceNumber is the instance's last sequence: the value for
	// WithExpectedSeq.
	SequenceNumber int64 `json:"sequence_number"`
	// StateSequenceNumber is the slot Data comes from.
	StateSequenceNumber int64           `json:"state_sequence_number"`
	Data                json.RawMessage `json:"data"`
	UpdatedAt           string          `json:"updated_at,omitempty"`
	// PendingCommands are accepted commands not applied yet.
	PendingCommands int `json:"pending_commands"`
}

// GetInstance reads an instance. A missing or deleted one is a
// *NotFoundError (instance_not_found, instance_deleted) saying how many
// commands are pending.
func (c *Client) GetInstance(ctx context.Context, db, class, instanceID string) (*Instance, error) {
	res, err := c.do(ctx, request{method: http.MethodGet, path: instancesPath(db, class) + "/" + seg(instanceID), idempotent: true})
	if err != nil {
		return nil, err
	}
	var out Instance
	if err := decode(res, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
