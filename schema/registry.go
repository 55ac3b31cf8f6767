package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/shared/envelope"
)

// Registry is the schema registry on Postgres, and the validator of the
// door (Validate), which keeps the compiled latest version of every type
// in memory.
type Registry struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *slog.Logger

	snap      atomic.Pointer[snapshot]
	refresh   sync.Mutex
	lastCheck atomic.Int64 // unix nanos of the last stamp query; 0: check now
}

// snapshot is the registry as of one stamp: every registered version,
// compiled, and the latest of each type.
type snapshot struct {
	stamp    string
	latest   map[string]Version
	compiled map[versionKey]*Compiled
	// byFingerprint holds the same by type, version and fingerprint, so
	// that a refresh recompiles only what changed.
	byFingerprint map[compiledKey]*Compiled
	// broken holds the types with a stored version that does not compile
	// (rules tightened since it was registered, say): their appends are
	// refused as unavailable, every other type goes on validating.
	broken map[string]error
	// upcasters holds the compiled upcasters by (type, from version);
	// upByFingerprint the same by their text, so that a refresh compiles
	// only what changed; brokenUp the steps whose stored upcaster does not
	// compile (reads through them fail, never skip the step).
	upcasters       map[versionKey]*Upcaster
	upByFingerprint map[compiledKey]*Upcaster
	brokenUp        map[versionKey]error
}

type versionKey struct {
	eventType string
	version   int
}

type compiledKey struct {
	eventType   string
	version     int
	fingerprint string
}

// New returns the registry on pool. A zero cfg field takes its default.
func New(pool *pgxpool.Pool, cfg Config, log *slog.Logger) *Registry {
	def := DefaultConfig()
	if cfg.Mode == "" {
		cfg.Mode = def.Mode
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = def.RefreshInterval
	}
	if log == nil {
		log = slog.Default()
	}
	return &Registry{pool: pool, cfg: cfg, log: log}
}

// Errors of the registry.
var (
	// ErrNotFound: no such type or version.
	ErrNotFound = errors.New("schema: not found")
)

// What a NotFoundError says is missing.
const (
	// MissingType: no schema is registered for the event type.
	MissingType = "type"
	// MissingVersion: the event type has no such schema version.
	MissingVersion = "version"
	// MissingUpcasterVersion: a version an upcaster reads or produces
	// is not registered.
	MissingUpcasterVersion = "upcaster_version"
	// MissingUpcaster: the event type has no upcaster from the version.
	MissingUpcaster = "upcaster"
)

// NotFoundError is an ErrNotFound (errors.Is) that says what is missing
// (Missing, one of the Missing* constants), so that a caller can name the
// part of its request at fault without reading the message.
type NotFoundError struct {
	Missing string
	Detail  string
}

func (e *NotFoundError) Error() string        { return ErrNotFound.Error() + ": " + e.Detail }
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// notFound is a *NotFoundError of missing with the detail formatted.
func notFound(missing, format string, a ...any) error {
	return &NotFoundError{Missing: missing, Detail: fmt.Sprintf(format, a...)}
}

// InvalidSchemaError: the document is not a JSON Schema the registry takes.
type InvalidSchemaError struct{ Reason string }

func (e *InvalidSchemaError) Error() string { return "schema: " + e.Reason }

// IncompatibleError: the candidate breaks the type's compatibility mode.
type IncompatibleError struct {
	EventType     string
	Version       int
	Compatibility Compatibility
	Reasons       []string
}

func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("schema: v%d of %s breaks %s compatibility: %s", e.Version, e.EventType, e.Compatibility, strings.Join(e.Reasons, "; "))
}

// NotRegisteredError: EVENT_SCHEMA_MODE=strict and the type has no
// schema, or the producer named a Version the type does not have.
type NotRegisteredError struct {
	EventType string
	Version   int
}

func (e *NotRegisteredError) Error() string {
	if e.Version > 0 {
		return fmt.Sprintf("event type %s has no registered schema version %d", e.EventType, e.Version)
	}
	return fmt.Sprintf("event type %s has no registered schema, and EVENT_SCHEMA_MODE is strict", e.EventType)
}

// RegisterResult is what Register did.
type RegisterResult struct {
	EventType     string        `json:"event_type"`
	Version       int           `json:"version"`
	Compatibility Compatibility `json:"compatibility"`
	// Existing: the same document was registered already as Version;
	// nothing changed.
	Existing bool `json:"existing"`
	DryRun   bool `json:"dry_run,omitempty"`
	// Upcaster is what was done with RegisterOptions.Upcaster.
	Upcaster *UpcasterResult `json:"upcaster,omitempty"`
}

// RegisterOptions qualify Register.
type RegisterOptions struct {
	// Compatibility sets the type's mode before the check ("" keeps it;
	// a new type gets DefaultCompatibility).
	Compatibility Compatibility
	// DryRun checks and reports without storing.
	DryRun bool
	// Upcaster, when set, is an upcaster file (docs/schemas.md) from the
	// version before the one registered: it is checked (its examples
	// upcast and validated against the new version) and stored in the same
	// transaction. UpcasterSource names the file in messages.
	Upcaster       []byte
	UpcasterSource string
}

// Register adds raw as the next version of eventType when it compiles and
// keeps the type's compatibility mode; the same document again answers the
// existing version. With o.Upcaster, the upcaster from the previous
// version is checked and stored with it. Errors: *InvalidSchemaError,
// *IncompatibleError, and for the upcaster *UpcasterError and
// *UpcasterCheckError.
func (r *Registry) Register(ctx context.Context, eventType string, raw []byte, o RegisterOptions) (RegisterResult, error) {
	res := RegisterResult{EventType: eventType, DryRun: o.DryRun}
	if err := envelope.ValidateEventType(eventType); err != nil {
		return res, &InvalidSchemaError{Reason: err.Error()}
	}
	cand, err := Compile(raw)
	if err != nil {
		return res, &InvalidSchemaError{Reason: err.Error()}
	}
	var up *Upcaster
	if o.Upcaster != nil {
		if up, err = ParseUpcaster(o.UpcasterSource, o.Upcaster); err != nil {
			return res, err
		}
		if up.EventType != eventType {
			return res, &UpcasterError{Pos: up.Examples[0].Pos, Msg: fmt.Sprintf("the upcaster is for %s, not %s", up.EventType, eventType)}
		}
	}
	fp, _ := Fingerprint(raw)
	defer r.invalidate()
	err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		mode, last, err := lockType(ctx, tx, eventType, o.Compatibility)
		if err != nil {
			return err
		}
		res.Compatibility = mode
		earlier, err := loadVersions(ctx, tx, eventType)
		if err != nil {
			return err
		}
		for _, v := range earlier {
			if v.fingerprint == fp {
				res.Version, res.Existing = v.Version, true
				if up == nil {
					return nil
				}
				if err := r.registerUpcaster(ctx, tx, up, earlier, cand, &res); err != nil || !o.DryRun {
					return err
				}
				return errDryRun
			}
		}
		res.Version = last + 1
		var prev []Version
		for _, v := range earlier {
			c, err := Compile([]byte(v.raw))
			if err != nil {
				return fmt.Errorf("schema: stored v%d of %s no longer compiles: %w", v.Version, eventType, err)
			}
			prev = append(prev, Version{Version: v.Version, Schema: c})
		}
		if reasons := CheckCompatibility(mode, Version{Version: res.Version, Schema: cand}, prev); len(reasons) > 0 {
			return &IncompatibleError{EventType: eventType, Version: res.Version, Compatibility: mode, Reasons: reasons}
		}
		if o.DryRun && up == nil {
			return errDryRun
		}
		if !o.DryRun {
			if _, err := tx.Exec(ctx, `INSERT INTO sluice.event_schemas (event_type, version, schema, fingerprint) VALUES ($1, $2, $3, $4)`,
				eventType, res.Version, string(raw), fp); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE sluice.event_schema_types SET last_version = $2, rev = nextval('sluice.event_schema_rev'), updated_at = now() WHERE event_type = $1`,
				eventType, res.Version); err != nil {
				return err
			}
		}
		if up == nil {
			return nil
		}
		if err := r.registerUpcaster(ctx, tx, up, earlier, cand, &res); err != nil || !o.DryRun {
			return err
		}
		return errDryRun
	})
	if errors.Is(err, errDryRun) {
		err = nil
	}
	if err != nil {
		var ie *IncompatibleError
		var ce *UpcasterCheckError
		var ue *UpcasterError
		if !errors.As(err, &ie) && !errors.As(err, &ce) && !errors.As(err, &ue) {
			err = fmt.Errorf("schema: register %s: %w", eventType, err)
		}
		return res, err
	}
	return res, nil
}

// registerUpcaster checks up, the upcaster into res.Version (whose schema
// is cand), against the stored version before it and stores it in tx.
func (r *Registry) registerUpcaster(ctx context.Context, tx pgx.Tx, up *Upcaster, earlier []storedVersion, cand *Compiled, res *RegisterResult) error {
	ur := &UpcasterResult{EventType: up.EventType, From: up.From, To: up.To(), Examples: len(up.Examples), DryRun: res.DryRun}
	res.Upcaster = ur
	if up.To() != res.Version {
		return &UpcasterError{Pos: up.Examples[0].Pos, Msg: fmt.Sprintf("the upcaster reads v%d, but the version registered is v%d: its from must be %d", up.From, res.Version, res.Version-1)}
	}
	var from *Compiled
	for _, v := range earlier {
		if v.Version == up.From {
			c, err := Compile([]byte(v.raw))
			if err != nil {
				return fmt.Errorf("stored v%d no longer compiles: %w", v.Version, err)
			}
			from = c
		}
	}
	if from == nil {
		return notFound(MissingUpcasterVersion, "event type %s has no schema version %d for the upcaster to read", up.EventType, up.From)
	}
	if reasons := up.CheckExamples(from, cand); len(reasons) > 0 {
		return &UpcasterCheckError{EventType: up.EventType, From: up.From, Reasons: reasons}
	}
	return r.storeUpcaster(ctx, tx, up, ur)
}

var errDryRun = errors.New("dry run")

// lockType creates the type's row when missing, sets its mode when given,
// and locks it for the transaction.
func lockType(ctx context.Context, tx pgx.Tx, eventType string, mode Compatibility) (Compatibility, int, error) {
	if mode == "" {
		mode = DefaultCompatibility
		if _, err := tx.Exec(ctx, `INSERT INTO sluice.event_schema_types (event_type) VALUES ($1) ON CONFLICT DO NOTHING`, eventType); err != nil {
			return "", 0, err
		}
	} else if _, err := tx.Exec(ctx, `INSERT INTO sluice.event_schema_types (event_type, compatibility) VALUES ($1, $2)
		ON CONFLICT (event_type) DO UPDATE SET compatibility = EXCLUDED.compatibility, rev = nextval('sluice.event_schema_rev'), updated_at = now()`,
		eventType, string(mode)); err != nil {
		return "", 0, err
	}
	var m string
	var last int
	if err := tx.QueryRow(ctx, `SELECT compatibility, last_version FROM sluice.event_schema_types WHERE event_type = $1 FOR UPDATE`, eventType).Scan(&m, &last); err != nil {
		return "", 0, err
	}
	return Compatibility(m), last, nil
}

type storedVersion struct {
	Version     int
	raw         string
	fingerprint string
	created     time.Time
}

func loadVersions(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, eventType string) ([]storedVersion, error) {
	rows, err := q.Query(ctx, `SELECT version, schema, fingerprint, created_at FROM sluice.event_schemas WHERE event_type = $1 ORDER BY version`, eventType)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (storedVersion, error) {
		var v storedVersion
		err := row.Scan(&v.Version, &v.raw, &v.fingerprint, &v.created)
		return v, err
	})
}

// SetCompatibility sets a type's mode (the type need not have versions).
func (r *Registry) SetCompatibility(ctx context.Context, eventType string, mode Compatibility) error {
	if err := envelope.ValidateEventType(eventType); err != nil {
		return &InvalidSchemaError{Reason: err.Error()}
	}
	defer r.invalidate()
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		_, _, err := lockType(ctx, tx, eventType, mode)
		return err
	})
}

// TypeInfo describes one registered type.
type TypeInfo struct {
	EventType     string        `json:"event_type"`
	Compatibility Compatibility `json:"compatibility"`
	Versions      []int         `json:"versions"`
	Latest        int           `json:"latest"`
	// Upcasters are the versions with an upcaster to the next one.
	Upcasters []int `json:"upcasters"`
}

// Types lists the types with a mode or versions, by name.
func (r *Registry) Types(ctx context.Context) ([]TypeInfo, error) {
	rows, err := r.pool.Query(ctx, `SELECT t.event_type, t.compatibility, coalesce(array_agg(s.version ORDER BY s.version) FILTER (WHERE s.version IS NOT NULL), '{}'),
		coalesce((SELECT array_agg(u.from_version ORDER BY u.from_version) FROM sluice.event_schema_upcasters u WHERE u.event_type = t.event_type), '{}')
		FROM sluice.event_schema_types t LEFT JOIN sluice.event_schemas s USING (event_type)
		GROUP BY t.event_type, t.compatibility ORDER BY t.event_type`)
	if err != nil {
		return nil, fmt.Errorf("schema: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TypeInfo, error) {
		var ti TypeInfo
		var versions, upcasters []int32
		err := row.Scan(&ti.EventType, &ti.Compatibility, &versions, &upcasters)
		ti.Versions, ti.Upcasters = []int{}, []int{}
		for _, v := range versions {
			ti.Versions = append(ti.Versions, int(v))
		}
		for _, v := range upcasters {
			ti.Upcasters = append(ti.Upcasters, int(v))
		}
		if len(ti.Versions) > 0 {
			ti.Latest = ti.Versions[len(ti.Versions)-1]
		}
		return ti, err
	})
	if err != nil {
		return nil, fmt.Errorf("schema: list: %w", err)
	}
	return out, nil
}

// Stored is one registered version.
type Stored struct {
	EventType     string          `json:"event_type"`
	Version       int             `json:"version"`
	Compatibility Compatibility   `json:"compatibility"`
	Schema        json.RawMessage `json:"schema"`
	CreatedAt     time.Time       `json:"created_at"`
}

// Get returns version of eventType (0: the latest). ErrNotFound when there
// is none.
func (r *Registry) Get(ctx context.Context, eventType string, version int) (Stored, error) {
	s := Stored{EventType: eventType}
	var raw string
	err := r.pool.QueryRow(ctx, `SELECT s.version, t.compatibility, s.schema, s.created_at
		FROM sluice.event_schemas s JOIN sluice.event_schema_types t USING (event_type)
		WHERE s.event_type = $1 AND ($2 = 0 OR s.version = $2) ORDER BY s.version DESC LIMIT 1`, eventType, version).
		Scan(&s.Version, &s.Compatibility, &raw, &s.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		if version == 0 {
			return s, notFound(MissingType, "event type %s has no registered schema", eventType)
		}
		return s, notFound(MissingVersion, "event type %s has no schema version %d", eventType, version)
	}
	if err != nil {
		return s, fmt.Errorf("schema: get: %w", err)
	}
	s.Schema = json.RawMessage(raw)
	return s, nil
}

// Delete removes one version of eventType (version > 0) or all of them
// (0) and returns the versions removed, with the upcasters from and into
// them. Stored events keep the schema_version they were checked against;
// a deleted version's number is never given again. ErrNotFound when
// nothing matched.
func (r *Registry) Delete(ctx context.Context, eventType string, version int, dryRun bool) ([]int, error) {
	var out []int
	defer r.invalidate()
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM sluice.event_schemas WHERE event_type = $1 AND ($2 = 0 OR version = $2) RETURNING version`, eventType, version)
		if err != nil {
			return err
		}
		if out, err = pgx.CollectRows(rows, pgx.RowTo[int]); err != nil {
			return err
		}
		if len(out) == 0 {
			return ErrNotFound
		}
		if _, err := tx.Exec(ctx, `DELETE FROM sluice.event_schema_upcasters WHERE event_type = $1 AND ($2 = 0 OR from_version IN ($2, $2 - 1))`, eventType, version); err != nil {
			return err
		}
		if dryRun {
			return errDryRun
		}
		_, err = tx.Exec(ctx, `UPDATE sluice.event_schema_types SET rev = nextval('sluice.event_schema_rev'), updated_at = now() WHERE event_type = $1`, eventType)
		return err
	})
	switch {
	case errors.Is(err, errDryRun):
		err = nil
	case errors.Is(err, ErrNotFound) && version > 0:
		err = notFound(MissingVersion, "event type %s has no schema version %d", eventType, version)
	case errors.Is(err, ErrNotFound):
		err = notFound(MissingType, "event type %s has no registered schema", eventType)
	case err != nil:
		err = fmt.Errorf("schema: delete: %w", err)
	}
	return out, err
}

// CheckResult is the verdict on a candidate, stored or not.
type CheckResult struct {
	EventType     string        `json:"event_type"`
	Version       int           `json:"version"`
	Compatibility Compatibility `json:"compatibility"`
	Compatible    bool          `json:"compatible"`
	Existing      bool          `json:"existing"`
	Reasons       []string      `json:"reasons"`
	// Upcaster is the verdict on the upcaster checked with the candidate
	// (CheckWithUpcaster); its failures are in Reasons, prefixed
	// "upcaster: ".
	Upcaster *UpcasterResult `json:"upcaster,omitempty"`
}

// Check is Register as a dry run, answering the verdict instead of an
// *IncompatibleError.
func (r *Registry) Check(ctx context.Context, eventType string, raw []byte) (CheckResult, error) {
	return r.CheckWithUpcaster(ctx, eventType, raw, nil, "")
}

// CheckWithUpcaster is Check of the candidate and of an upcaster from the
// version before it (nil: none), as Register with RegisterOptions.Upcaster
// would check them: an upcaster whose examples fail makes the verdict
// incompatible, with its reasons; one that does not parse is an
// *UpcasterError.
func (r *Registry) CheckWithUpcaster(ctx context.Context, eventType string, raw, upcaster []byte, source string) (CheckResult, error) {
	res, err := r.Register(ctx, eventType, raw, RegisterOptions{DryRun: true, Upcaster: upcaster, UpcasterSource: source})
	out := CheckResult{EventType: eventType, Version: res.Version, Compatibility: res.Compatibility, Existing: res.Existing, Compatible: err == nil,
		Reasons: []string{}, Upcaster: res.Upcaster}
	var ie *IncompatibleError
	var ce *UpcasterCheckError
	switch {
	case errors.As(err, &ie):
		out.Reasons, out.Compatibility = ie.Reasons, ie.Compatibility
		return out, nil
	case errors.As(err, &ce):
		for _, reason := range ce.Reasons {
			out.Reasons = append(out.Reasons, "upcaster: "+reason)
		}
		return out, nil
	}
	return out, err
}
