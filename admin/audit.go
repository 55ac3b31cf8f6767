package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
)

// auditEntry is one audited request.
type auditEntry struct {
	Who     string // default who(Role)
	Role    string
	Action  string
	Target  string
	DryRun  bool
	Outcome string
	Code    string
	Status  int
	Request []byte
	Result  any
}

// AuditRecord is one row of the audit log.
type AuditRecord struct {
	ID      int64           `json:"id"`
	At      time.Time       `json:"at"`
	Who     string          `json:"who"`
	Role    string          `json:"role"`
	Action  string          `json:"action"`
	Target  string          `json:"target"`
	DryRun  bool            `json:"dry_run"`
	Outcome string          `json:"outcome"`
	Status  int             `json:"status"`
	Detail  json.RawMessage `json:"detail"`
}

// who names a role's token: the tokens are shared secrets, so the name
// is the role's ("admin:operator", "admin:read"). A request with an API
// key is recorded under the key's principal (whoOf).
func who(role string) string { return "admin:" + role }

// audit records e in sluice.admin_audit and the log.
func (s *Server) audit(ctx context.Context, e auditEntry) error {
	if e.Who == "" {
		e.Who = who(e.Role)
	}
	req := json.RawMessage(`{}`)
	if json.Valid(e.Request) && len(e.Request) > 0 {
		req = e.Request
	}
	detail, err := json.Marshal(map[string]any{"request": req, "result": e.Result})
	if err != nil {
		detail, _ = json.Marshal(map[string]any{"request": req, "result_error": err.Error()})
	}
	detail = forJSONB(detail)
	// A path may hold %00 or %FF, which a text column refuses.
	e.Target = strings.ReplaceAll(strings.ToValidUTF8(e.Target, "\uFFFD"), "\x00", "\uFFFD")
	s.log.Info("admin action", "who", e.Who, "role", e.Role, "action", e.Action, "target", e.Target,
		"dry_run", e.DryRun, "outcome", e.Outcome, "status", e.Status)
	// The record survives a client that went away.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.opts.Pool.Exec(ctx, `INSERT INTO sluice.admin_audit (who, role, action, target, dry_run, outcome, status, detail)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, e.Who, e.Role, e.Action, e.Target, e.DryRun, e.Outcome, e.Status, detail); err != nil {
		s.log.Error("admin audit: write", "err", err, "action", e.Action)
		return fmt.Errorf("admin: audit: %w", err)
	}
	return nil
}

// forJSONB returns the JSON detail as Postgres jsonb takes it: every
// U+0000 in its strings replaced by U+FFFD, and so every lone surrogate
// escape (\ud800) and byte that is not UTF-8, which the request body kept
// as sent (Go's decoder reads them as U+FFFD, so the action ran). jsonb
// refuses all three, so a request (or an error echoing it) holding one
// made the audit row fail: 503 audit_failed for an action that was done,
// and no record of it.
func forJSONB(detail []byte) []byte {
	if utf8.Valid(detail) && !bytes.Contains(detail, []byte(`\u0000`)) &&
		!bytes.Contains(detail, []byte(`\ud`)) && !bytes.Contains(detail, []byte(`\uD`)) {
		return detail
	}
	dec := json.NewDecoder(bytes.NewReader(detail))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return detail
	}
	out, err := json.Marshal(scrubNUL(v))
	if err != nil {
		return detail
	}
	return out
}

func scrubNUL(v any) any {
	const nul, repl = "\x00", "\uFFFD"
	switch t := v.(type) {
	case string:
		return strings.ReplaceAll(t, nul, repl)
	case []any:
		for i := range t {
			t[i] = scrubNUL(t[i])
		}
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[strings.ReplaceAll(k, nul, repl)] = scrubNUL(x)
		}
		return m
	}
	return v
}

// Audit returns the latest audit records, newest first (at most limit).
func (s *Server) Audit(ctx context.Context, limit int) ([]AuditRecord, error) {
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	rows, err := s.opts.Pool.Query(ctx, `SELECT id, at, who, role, action, target, dry_run, outcome, status, detail
		FROM sluice.admin_audit ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("admin: audit: %w", err)
	}
	defer rows.Close()
	out := []AuditRecord{}
	for rows.Next() {
		var a AuditRecord
		if err := rows.Scan(&a.ID, &a.At, &a.Who, &a.Role, &a.Action, &a.Target, &a.DryRun, &a.Outcome, &a.Status, &a.Detail); err != nil {
			return nil, fmt.Errorf("admin: audit: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// RecordCLI writes the audit record of an action taken by a `sluice`
// command outside the admin API (sluice auth key …), in the same table and
// shape, with the operator role: who is "cli:{user}". The record is written
// after the action, as the admin API's; a failure is returned so that the
// command reports it.
func RecordCLI(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger, who, action, target string, request, result any) error {
	req, _ := json.Marshal(request)
	if log == nil {
		log = slog.Default()
	}
	s := &Server{opts: settings{Deps: Deps{Pool: pool}}, log: log}
	return s.audit(ctx, auditEntry{Who: who, Role: RoleOperator, Action: action, Target: target, Outcome: "ok", Status: 200, Request: req, Result: result})
}
