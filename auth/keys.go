package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// KeyPrefix begins every API key: "sluice_{key id}_{secret}". The key id
// is public (it names the key in lists, logs and the audit); the secret is
// 32 random bytes, base64url.
const KeyPrefix = "sluice_"

// SplitKey splits an API key into its id and secret.
func SplitKey(tok string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(tok, KeyPrefix)
	if !ok {
		return "", "", false
	}
	id, secret, ok = strings.Cut(rest, "_")
	if !ok || !validKeyID(id) || secret == "" {
		return "", "", false
	}
	return id, secret, true
}

// validKeyID reports whether id is a key id: 16 hex digits.
func validKeyID(id string) bool {
	_, err := hex.DecodeString(id)
	return len(id) == 16 && err == nil
}

// Key is one API key as stored, without its secret.
type Key struct {
	ID          string     `json:"key_id"`
	Principal   string     `json:"principal"`
	Grants      []Grant    `json:"grants"`
	Description string     `json:"description"`
	CreatedAt   time.Time  `json:"created_at"`
	CreatedBy   string     `json:"created_by"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
	RevokedBy   string     `json:"revoked_by,omitempty"`
	RotatedFrom string     `json:"rotated_from,omitempty"`
}

// Active reports whether the key works at t.
func (k Key) Active(t time.Time) bool {
	return k.RevokedAt == nil && (k.ExpiresAt == nil || t.Before(*k.ExpiresAt))
}

// KeysOptions configure Keys.
type KeysOptions struct {
	// Refresh is how long a snapshot of the active keys serves lookups
	// (SLUICE_AUTH_KEY_REFRESH): a key revoked by another process stops
	// working within it.
	Refresh time.Duration
	Logger  *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Keys is the API keys of sluice.auth_keys. Lookups are served from an
// in-memory snapshot of the active keys (no Postgres round trip per
// request), reloaded in the background when older than Refresh; the first
// lookup waits for the first load.
type Keys struct {
	pool *pgxpool.Pool
	o    KeysOptions

	mu      sync.Mutex
	snap    map[string]snapKey
	loaded  time.Time
	loading bool
	stale   bool
}

type snapKey struct {
	hash      [sha256.Size]byte
	expiresAt *time.Time
	p         *Principal
}

// NewKeys returns the key store on pool.
func NewKeys(pool *pgxpool.Pool, o KeysOptions) *Keys {
	if o.Refresh <= 0 {
		o.Refresh = DefaultConfig().KeyRefresh
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Keys{pool: pool, o: o}
}

// Errors of the key operations.
var (
	ErrKeyNotFound = errors.New("no such API key")
	ErrKeyRevoked  = errors.New("the API key is revoked")
)

// CreateRequest describes a new key.
type CreateRequest struct {
	Principal   string
	Grants      []Grant
	Description string
	// ExpiresAt, when set, ends the key.
	ExpiresAt *time.Time
	// By names who made it (the audit's principal, or "cli:{user}").
	By string
}

// MaxDescriptionLen bounds a key's description, in bytes.
const MaxDescriptionLen = 1000

// ValidateDescription checks a key's description: at most
// MaxDescriptionLen bytes of UTF-8 text without NUL, which a Postgres text
// column refuses (it was a failed insert, not a refusal of the request).
func ValidateDescription(s string) error {
	if len(s) > MaxDescriptionLen {
		return fmt.Errorf("the description is longer than %d bytes", MaxDescriptionLen)
	}
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return errors.New("the description must be UTF-8 text without NUL")
	}
	return nil
}

// NewSecret returns a fresh key id and full key.
func newKeyMaterial() (id, key string, sum [sha256.Size]byte, err error) {
	var idb [8]byte
	var sec [32]byte
	if _, err = rand.Read(idb[:]); err != nil {
		return
	}
	if _, err = rand.Read(sec[:]); err != nil {
		return
	}
	id = hex.EncodeToString(idb[:])
	secret := base64.RawURLEncoding.EncodeToString(sec[:])
	return id, KeyPrefix + id + "_" + secret, sha256.Sum256([]byte(secret)), nil
}

// Create stores a new key and returns it with its full secret form, shown
// this once.
func (k *Keys) Create(ctx context.Context, req CreateRequest) (Key, string, error) {
	for _, g := range req.Grants {
		if err := CheckAdminScope(g); err != nil {
			return Key{}, "", err
		}
	}
	return k.create(ctx, k.pool, req, "")
}

type execer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (k *Keys) create(ctx context.Context, q execer, req CreateRequest, rotatedFrom string) (Key, string, error) {
	if err := ValidatePrincipal(req.Principal); err != nil {
		return Key{}, "", err
	}
	if len(req.Grants) == 0 {
		return Key{}, "", errors.New("a key needs at least one grant")
	}
	grants, err := CompileGrants(req.Grants)
	if err != nil {
		return Key{}, "", err
	}
	if err := ValidateDescription(req.Description); err != nil {
		return Key{}, "", err
	}
	id, full, sum, err := newKeyMaterial()
	if err != nil {
		return Key{}, "", fmt.Errorf("auth: random: %w", err)
	}
	gj, _ := json.Marshal(grants)
	row := q.QueryRow(ctx, `INSERT INTO sluice.auth_keys (key_id, principal, secret_sha256, grants, description, created_by, expires_at, rotated_from)
		VALUES ($1, $2, $3, $4, $5, $6, $7, NULLIF($8, '')) RETURNING `+keyColumns, id, req.Principal, sum[:], gj, req.Description, req.By, req.ExpiresAt, rotatedFrom)
	key, err := scanKey(row)
	if err != nil {
		return Key{}, "", fmt.Errorf("auth: create key: %w", err)
	}
	k.invalidate()
	return key, full, nil
}

const keyColumns = `key_id, principal, grants, description, created_at, created_by, expires_at, revoked_at, coalesce(revoked_by, ''), coalesce(rotated_from, '')`

func scanKey(row pgx.Row) (Key, error) {
	var key Key
	var gj []byte
	if err := row.Scan(&key.ID, &key.Principal, &gj, &key.Description, &key.CreatedAt, &key.CreatedBy, &key.ExpiresAt, &key.RevokedAt, &key.RevokedBy, &key.RotatedFrom); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return Key{}, ErrKeyNotFound
		}
		return Key{}, err
	}
	if err := json.Unmarshal(gj, &key.Grants); err != nil {
		return Key{}, fmt.Errorf("key %s: grants: %w", key.ID, err)
	}
	return key, nil
}

// ListFilter selects keys; the zero value lists the active ones.
type ListFilter struct {
	Principal string
	// All includes revoked and expired keys.
	All bool
}

// List returns keys, oldest first.
func (k *Keys) List(ctx context.Context, f ListFilter) ([]Key, error) {
	rows, err := k.pool.Query(ctx, `SELECT `+keyColumns+` FROM sluice.auth_keys
		WHERE ($1 = '' OR principal = $1) AND ($2 OR (revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())))
		ORDER BY created_at, key_id`, f.Principal, f.All)
	if err != nil {
		return nil, fmt.Errorf("auth: list keys: %w", err)
	}
	defer rows.Close()
	out := []Key{}
	for rows.Next() {
		key, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("auth: list keys: %w", err)
		}
		out = append(out, key)
	}
	return out, rows.Err()
}

// Get returns one key.
func (k *Keys) Get(ctx context.Context, id string) (Key, error) {
	return scanKey(k.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM sluice.auth_keys WHERE key_id = $1`, id))
}

// Revoke ends a key now. Revoking a revoked key is a no-op that returns it.
func (k *Keys) Revoke(ctx context.Context, id, by string) (Key, error) {
	if !validKeyID(id) {
		return Key{}, ErrKeyNotFound // no such key: nothing to ask Postgres (which refuses a NUL)
	}
	key, err := scanKey(k.pool.QueryRow(ctx, `UPDATE sluice.auth_keys SET revoked_at = coalesce(revoked_at, now()), revoked_by = coalesce(revoked_by, $2)
		WHERE key_id = $1 RETURNING `+keyColumns, id, by))
	if err != nil {
		if errors.Is(err, ErrKeyNotFound) {
			return Key{}, err
		}
		return Key{}, fmt.Errorf("auth: revoke key: %w", err)
	}
	k.invalidate()
	return key, nil
}

// Rotation is the result of Rotate.
type Rotation struct {
	New Key `json:"new"`
	Old Key `json:"old"`
}

// Rotate makes a new key of the old key's principal and grants and ends
// the old one after grace (at once when grace is 0: revoked), so that
// clients can move to the new secret before the old stops working. It
// returns the new key's full secret form, shown this once.
func (k *Keys) Rotate(ctx context.Context, id string, grace time.Duration, by string) (Rotation, string, error) {
	if grace < 0 {
		return Rotation{}, "", errors.New("the grace period must not be negative")
	}
	if !validKeyID(id) {
		return Rotation{}, "", ErrKeyNotFound
	}
	tx, err := k.pool.Begin(ctx)
	if err != nil {
		return Rotation{}, "", fmt.Errorf("auth: rotate key: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	old, err := scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM sluice.auth_keys WHERE key_id = $1 FOR UPDATE`, id))
	if err != nil {
		return Rotation{}, "", err
	}
	if !old.Active(k.o.Now()) {
		return Rotation{}, "", fmt.Errorf("%w (or expired): make a new key with sluice auth key create", ErrKeyRevoked)
	}
	nk, full, err := k.create(ctx, tx, CreateRequest{Principal: old.Principal, Grants: old.Grants, Description: old.Description,
		ExpiresAt: old.ExpiresAt, By: by}, old.ID)
	if err != nil {
		return Rotation{}, "", err
	}
	if grace == 0 {
		old, err = scanKey(tx.QueryRow(ctx, `UPDATE sluice.auth_keys SET revoked_at = now(), revoked_by = $2 WHERE key_id = $1 RETURNING `+keyColumns, id, by))
	} else {
		old, err = scanKey(tx.QueryRow(ctx, `UPDATE sluice.auth_keys SET expires_at = least(expires_at, now() + make_interval(secs => $2))
			WHERE key_id = $1 RETURNING `+keyColumns, id, grace.Seconds()))
	}
	if err != nil {
		return Rotation{}, "", fmt.Errorf("auth: rotate key: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Rotation{}, "", fmt.Errorf("auth: rotate key: %w", err)
	}
	k.invalidate()
	return Rotation{New: nk, Old: old}, full, nil
}

// invalidate makes the next lookup reload the snapshot first.
func (k *Keys) invalidate() {
	k.mu.Lock()
	k.stale = true
	k.mu.Unlock()
}

// Lookup returns the principal of a presented key (ErrInvalid when none
// is active with this id and secret).
func (k *Keys) Lookup(ctx context.Context, id, secret string) (*Principal, error) {
	snap, err := k.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(secret))
	e, ok := snap[id]
	if !ok {
		e.hash = [sha256.Size]byte{} // compare anyway: same work for unknown ids
	}
	match := subtle.ConstantTimeCompare(sum[:], e.hash[:]) == 1
	if !ok || !match || e.expiresAt != nil && !k.o.Now().Before(*e.expiresAt) {
		return nil, ErrInvalid
	}
	return e.p, nil
}

// snapshot returns the active keys: loaded now when there is none yet or
// it was invalidated here, else the current one, reloaded in the
// background when older than Refresh.
func (k *Keys) snapshot(ctx context.Context) (map[string]snapKey, error) {
	k.mu.Lock()
	snap, now := k.snap, k.o.Now()
	if snap == nil || k.stale {
		k.mu.Unlock()
		return k.load(ctx)
	}
	if now.Sub(k.loaded) >= k.o.Refresh && !k.loading {
		k.loading = true
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := k.load(ctx); err != nil {
				k.o.Logger.Warn("auth: reloading the API keys failed; the last snapshot stays in use", "err", err)
			}
			k.mu.Lock()
			k.loading = false
			k.mu.Unlock()
		}()
	}
	k.mu.Unlock()
	return snap, nil
}

// ErrUnavailable wraps a failed first load of the keys (answered 503).
var ErrUnavailable = errors.New("auth: the API keys cannot be read")

func (k *Keys) load(ctx context.Context) (map[string]snapKey, error) {
	k.mu.Lock()
	k.stale = false
	k.mu.Unlock()
	rows, err := k.pool.Query(ctx, `SELECT key_id, principal, secret_sha256, grants, expires_at FROM sluice.auth_keys
		WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`)
	if err != nil {
		k.invalidate()
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer rows.Close()
	snap := map[string]snapKey{}
	for rows.Next() {
		var id, principal string
		var hash, gj []byte
		var exp *time.Time
		if err := rows.Scan(&id, &principal, &hash, &gj, &exp); err != nil {
			k.invalidate()
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		var gs []Grant
		if err := json.Unmarshal(gj, &gs); err != nil {
			k.o.Logger.Error("auth: a key's grants do not parse; the key is ignored", "key_id", id, "err", err)
			continue
		}
		gs, err := CompileGrants(gs)
		if err != nil || len(hash) != sha256.Size {
			k.o.Logger.Error("auth: a key's row is invalid; the key is ignored", "key_id", id, "err", err)
			continue
		}
		e := snapKey{expiresAt: exp, p: &Principal{Name: principal, KeyID: id, Grants: gs}}
		copy(e.hash[:], hash)
		snap[id] = e
	}
	if err := rows.Err(); err != nil {
		k.invalidate()
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	k.mu.Lock()
	k.snap, k.loaded = snap, k.o.Now()
	k.mu.Unlock()
	return snap, nil
}

// Check reads the keys table (a readiness check).
func (k *Keys) Check(ctx context.Context) error {
	_, err := k.load(ctx)
	return err
}

// DefaultRotationGrace is how long a rotated key's old secret keeps
// working unless the rotation names another grace period.
const DefaultRotationGrace = 24 * time.Hour
