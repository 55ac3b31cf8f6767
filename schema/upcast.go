package schema

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/shared/celexpr"
	"github.com/sluicehq/sluice/shared/envelope"
)

// UpcastError is an event that could not be brought to its type's latest
// version on read: the step that failed (the upcaster from From to To),
// or the final check of the result against the latest schema (Upcaster
// ""). Retrying does not help: the upcaster or the schema must change.
type UpcastError struct {
	EventType string
	EventID   string
	// Stored is the event's recorded schema_version; Latest the version
	// asked for.
	Stored, Latest int
	// From and To are the failed step; Upcaster names its upcaster ("":
	// the step has none, or the result failed the latest schema).
	From, To int
	Upcaster string
	Err      error
}

func (e *UpcastError) Error() string {
	head := fmt.Sprintf("event %s of %s cannot be upcast from schema v%d to v%d", e.EventID, e.EventType, e.Stored, e.Latest)
	if e.Upcaster == "" {
		if e.From == e.To {
			return fmt.Sprintf("%s: the upcast data does not match schema v%d: %v", head, e.To, e.Err)
		}
		return fmt.Sprintf("%s: step v%d→v%d: %v", head, e.From, e.To, e.Err)
	}
	return fmt.Sprintf("%s: upcaster %s failed: %v", head, e.Upcaster, e.Err)
}

func (e *UpcastError) Unwrap() error { return e.Err }

// UnavailableError is a registry that could not be read (Postgres) and
// has nothing in memory yet: an outage, retried later
// (failure.Classify reads its HTTPStatus as one).
type UnavailableError struct{ Err error }

func (e *UnavailableError) Error() string { return "schema registry unavailable: " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// HTTPStatus is 503: the registry is out, the request may succeed later.
func (e *UnavailableError) HTTPStatus() int { return http.StatusServiceUnavailable }

// UpcasterCheckError is an upcaster whose examples do not hold: an input
// that is not valid data of its version, an output that is not valid data
// of the next one, or an output other than the example's want.
type UpcasterCheckError struct {
	EventType string
	From      int
	Reasons   []string
}

func (e *UpcasterCheckError) Error() string {
	return fmt.Sprintf("schema: the upcaster of %s v%d→v%d breaks its examples: %s", e.EventType, e.From, e.From+1, strings.Join(e.Reasons, "; "))
}

// Latest returns e with its data upcast to the latest registered version
// of its type, and SchemaVersion set to that version: the one function
// stream reads with ?as=latest, declarative projections with
// `upcast: latest` and Go projections use
// (docs/schemas.md#upcasting-on-read). The upcasters from e's recorded
// schema_version to the latest are applied in turn (a step without an
// upcaster leaves the data as it is), and the result is validated against
// the latest schema. Stored events are never rewritten: only the returned
// copy changes.
//
// e is returned unchanged when it records no schema_version (0), when its
// type has no registered schema, or when it is at (or above) the latest
// version. Errors: *UpcastError (a step or the final validation failed;
// permanent for this event), *UnavailableError (the registry was never
// loaded and Postgres does not answer; an outage). It reads only memory,
// like Validate.
func (r *Registry) Latest(ctx context.Context, e envelope.Envelope) (envelope.Envelope, error) {
	if e.SchemaVersion < 1 {
		return e, nil
	}
	s, err := r.current(ctx)
	if err != nil {
		return e, err
	}
	return s.upcast(e)
}

func (s *snapshot) upcast(e envelope.Envelope) (envelope.Envelope, error) {
	latest, ok := s.latest[e.EventType]
	if !ok {
		if err := s.broken[e.EventType]; err != nil {
			return e, &UpcastError{EventType: e.EventType, EventID: e.EventID, Stored: e.SchemaVersion, From: e.SchemaVersion, To: e.SchemaVersion, Err: err}
		}
		return e, nil
	}
	if e.SchemaVersion >= latest.Version {
		return e, nil
	}
	fail := func(from int, up string, err error) error {
		return &UpcastError{EventType: e.EventType, EventID: e.EventID, Stored: e.SchemaVersion, Latest: latest.Version,
			From: from, To: from + 1, Upcaster: up, Err: err}
	}
	if err := s.broken[e.EventType]; err != nil {
		return e, fail(e.SchemaVersion, "", err)
	}
	vars, data, err := decodeEvent(e)
	if err != nil {
		return e, fail(e.SchemaVersion, "", err)
	}
	for v := e.SchemaVersion; v < latest.Version; v++ {
		k := versionKey{e.EventType, v}
		if err := s.brokenUp[k]; err != nil {
			return e, fail(v, fmt.Sprintf("%s v%d→v%d", e.EventType, v, v+1), err)
		}
		u := s.upcasters[k]
		if u == nil {
			continue // no upcaster: the data of v is read as v+1's
		}
		if err := u.applyTo(vars, data); err != nil {
			return e, fail(v, u.Name(), err)
		}
	}
	if err := latest.Schema.validateValue(data); err != nil {
		return e, &UpcastError{EventType: e.EventType, EventID: e.EventID, Stored: e.SchemaVersion, Latest: latest.Version,
			From: latest.Version, To: latest.Version, Err: errors.New(dataReason(err))}
	}
	b, err := celexpr.EncodeJSON(data)
	if err != nil {
		return e, fail(latest.Version, "", err)
	}
	out := e
	out.Data, out.SchemaVersion = b, latest.Version
	return out, nil
}

// UpcasterResult is what SetUpcaster (or Register with an upcaster) did.
type UpcasterResult struct {
	EventType string `json:"event_type"`
	From      int    `json:"from"`
	To        int    `json:"to"`
	// Replaced: an upcaster from From existed and was replaced. Existing:
	// the same file was set already; nothing changed.
	Replaced bool `json:"replaced"`
	Existing bool `json:"existing"`
	Examples int  `json:"examples"`
	DryRun   bool `json:"dry_run,omitempty"`
}

// UpcasterOptions qualify SetUpcaster.
type UpcasterOptions struct {
	// Source names the file in messages (stored with the upcaster).
	Source string
	// DryRun checks and reports without storing.
	DryRun bool
}

// SetUpcaster stores (or replaces) the upcaster of raw, from its
// event_type's version `from` to from+1, once it compiles and its
// examples hold: each example's data is valid v`from`, its upcast valid
// v`from+1` (and equal to its want). Both versions must be registered.
// Errors: *UpcasterError (does not parse or compile), *UpcasterCheckError,
// ErrNotFound (a version is missing).
func (r *Registry) SetUpcaster(ctx context.Context, raw []byte, o UpcasterOptions) (UpcasterResult, error) {
	u, err := ParseUpcaster(o.Source, raw)
	if err != nil {
		return UpcasterResult{DryRun: o.DryRun}, err
	}
	res := UpcasterResult{EventType: u.EventType, From: u.From, To: u.To(), Examples: len(u.Examples), DryRun: o.DryRun}
	defer r.invalidate()
	err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, _, err := lockType(ctx, tx, u.EventType, ""); err != nil {
			return err
		}
		versions, err := loadVersions(ctx, tx, u.EventType)
		if err != nil {
			return err
		}
		var from, to *Compiled
		for _, v := range versions {
			if v.Version != u.From && v.Version != u.To() {
				continue
			}
			c, err := Compile([]byte(v.raw))
			if err != nil {
				return fmt.Errorf("schema: stored v%d of %s no longer compiles: %w", v.Version, u.EventType, err)
			}
			if v.Version == u.From {
				from = c
			} else {
				to = c
			}
		}
		switch {
		case from == nil:
			return notFound(MissingUpcasterVersion, "event type %s has no schema version %d for the upcaster to read", u.EventType, u.From)
		case to == nil:
			return notFound(MissingUpcasterVersion, "event type %s has no schema version %d for the upcaster to produce (register it with --upcaster)", u.EventType, u.To())
		}
		if reasons := u.CheckExamples(from, to); len(reasons) > 0 {
			return &UpcasterCheckError{EventType: u.EventType, From: u.From, Reasons: reasons}
		}
		return r.storeUpcaster(ctx, tx, u, &res)
	})
	if errors.Is(err, errDryRun) {
		err = nil
	}
	if err != nil {
		return res, wrapUpcasterErr(err)
	}
	return res, nil
}

func wrapUpcasterErr(err error) error {
	var ce *UpcasterCheckError
	var ue *UpcasterError
	if errors.As(err, &ce) || errors.As(err, &ue) || errors.Is(err, ErrNotFound) {
		return err
	}
	return fmt.Errorf("schema: upcaster: %w", err)
}

// storeUpcaster writes u in tx (unless res.DryRun: errDryRun) and moves
// the type's revision, so every process reloads it.
func (r *Registry) storeUpcaster(ctx context.Context, tx pgx.Tx, u *Upcaster, res *UpcasterResult) error {
	var old string
	err := tx.QueryRow(ctx, `SELECT spec FROM sluice.event_schema_upcasters WHERE event_type = $1 AND from_version = $2`, u.EventType, u.From).Scan(&old)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return err
	case old == string(u.Spec()):
		res.Existing = true
		return nil
	default:
		res.Replaced = true
	}
	if res.DryRun {
		return errDryRun
	}
	if _, err := tx.Exec(ctx, `INSERT INTO sluice.event_schema_upcasters (event_type, from_version, spec, source) VALUES ($1, $2, $3, $4)
		ON CONFLICT (event_type, from_version) DO UPDATE SET spec = EXCLUDED.spec, source = EXCLUDED.source, updated_at = now()`,
		u.EventType, u.From, string(u.Spec()), u.Source); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE sluice.event_schema_types SET rev = nextval('sluice.event_schema_rev'), updated_at = now() WHERE event_type = $1`, u.EventType)
	return err
}

// StoredUpcaster is one registered upcaster.
type StoredUpcaster struct {
	EventType string    `json:"event_type"`
	From      int       `json:"from"`
	To        int       `json:"to"`
	Source    string    `json:"source"`
	Spec      string    `json:"spec"`
	UpdatedAt time.Time `json:"updated_at"`
}

// GetUpcaster returns the upcaster of eventType from version from.
// ErrNotFound when there is none.
func (r *Registry) GetUpcaster(ctx context.Context, eventType string, from int) (StoredUpcaster, error) {
	s := StoredUpcaster{EventType: eventType, From: from, To: from + 1}
	err := r.pool.QueryRow(ctx, `SELECT source, spec, updated_at FROM sluice.event_schema_upcasters WHERE event_type = $1 AND from_version = $2`,
		eventType, from).Scan(&s.Source, &s.Spec, &s.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, notFound(MissingUpcaster, "event type %s has no upcaster from version %d", eventType, from)
	}
	if err != nil {
		return s, fmt.Errorf("schema: get upcaster: %w", err)
	}
	return s, nil
}

// DeleteUpcaster removes the upcaster of eventType from version from:
// reads then take v`from` data as v`from+1` data (and refuse it when it
// does not validate). ErrNotFound when there is none.
func (r *Registry) DeleteUpcaster(ctx context.Context, eventType string, from int, dryRun bool) error {
	defer r.invalidate()
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM sluice.event_schema_upcasters WHERE event_type = $1 AND from_version = $2`, eventType, from)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return notFound(MissingUpcaster, "event type %s has no upcaster from version %d", eventType, from)
		}
		if dryRun {
			return errDryRun
		}
		_, err = tx.Exec(ctx, `UPDATE sluice.event_schema_types SET rev = nextval('sluice.event_schema_rev'), updated_at = now() WHERE event_type = $1`, eventType)
		return err
	})
	if errors.Is(err, errDryRun) {
		return nil
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		err = fmt.Errorf("schema: delete upcaster: %w", err)
	}
	return err
}

// loadUpcasters reads every stored upcaster into ns, compiling only those
// that changed since old; one that no longer compiles breaks its step
// (reads through it fail; they never skip it).
func (r *Registry) loadUpcasters(ctx context.Context, old, ns *snapshot) error {
	rows, err := r.pool.Query(ctx, `SELECT event_type, from_version, source, spec FROM sluice.event_schema_upcasters`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k versionKey
		var source, spec string
		if err := rows.Scan(&k.eventType, &k.version, &source, &spec); err != nil {
			return err
		}
		sum := sha256.Sum256([]byte(source + "\x00" + spec))
		ck := compiledKey{k.eventType, k.version, hex.EncodeToString(sum[:])}
		u := (*Upcaster)(nil)
		if old != nil {
			u = old.upByFingerprint[ck]
		}
		if u == nil {
			if u, err = ParseUpcaster(source, []byte(spec)); err == nil && (u.EventType != k.eventType || u.From != k.version) {
				err = fmt.Errorf("the stored file declares %s from %d", u.EventType, u.From)
			}
			if err != nil {
				ns.brokenUp[k] = fmt.Errorf("the stored upcaster does not compile (set it again or delete it with sluice schema upcaster): %w", err)
				r.log.Error("schema registry: a stored upcaster does not compile; reads through it fail", "event_type", k.eventType, "from", k.version, "err", err)
				continue
			}
		}
		ns.upByFingerprint[ck] = u
		ns.upcasters[k] = u
	}
	return rows.Err()
}
