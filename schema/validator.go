package schema

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Validate checks the data of one event of eventType against the type's
// latest registered version and returns that version. An unregistered
// type answers 0 and nil in open mode, *NotRegisteredError in strict
// mode; data that does not validate answers *DataError.
//
// It reads only memory: the compiled versions are refreshed when the
// registry's stamp moves, which is asked of Postgres at most once per
// EVENT_SCHEMA_REFRESH_INTERVAL (and at once after this process changed
// the registry) — never once per event.
func (r *Registry) Validate(ctx context.Context, eventType string, data []byte) (int, error) {
	return r.ValidateVersion(ctx, eventType, 0, data)
}

// ValidateVersion is Validate against a version the producer names
// (0: the latest). A named version the type does not have is a
// *NotRegisteredError; for a type without any schema, open mode accepts
// the named version unchecked (it is the producer's own label).
func (r *Registry) ValidateVersion(ctx context.Context, eventType string, version int, data []byte) (int, error) {
	s, err := r.current(ctx)
	if err != nil {
		return 0, err
	}
	if err := s.broken[eventType]; err != nil {
		return 0, err
	}
	v, ok := s.latest[eventType]
	if !ok {
		if r.cfg.Mode == ModeStrict {
			return 0, &NotRegisteredError{EventType: eventType, Version: version}
		}
		return version, nil
	}
	if version != 0 && version != v.Version {
		c, ok := s.compiled[versionKey{eventType, version}]
		if !ok {
			return 0, &NotRegisteredError{EventType: eventType, Version: version}
		}
		v = Version{Version: version, Schema: c}
	}
	if err := v.Schema.Validate(data); err != nil {
		var de *DataError
		if errors.As(err, &de) {
			de.EventType, de.Version = eventType, v.Version
		}
		return v.Version, err
	}
	return v.Version, nil
}

// Strict reports whether unregistered types are refused.
func (r *Registry) Strict() bool { return r.cfg.Mode == ModeStrict }

// invalidate makes the next Validate ask for the stamp.
func (r *Registry) invalidate() { r.lastCheck.Store(0) }

// current returns the snapshot, refreshing it when due. Only one caller
// refreshes at a time; the others go on with the snapshot they have (the
// first load waits).
func (r *Registry) current(ctx context.Context) (*snapshot, error) {
	s := r.snap.Load()
	due := time.Now().UnixNano()-r.lastCheck.Load() >= int64(r.cfg.RefreshInterval)
	if s != nil && !due {
		return s, nil
	}
	if s != nil {
		if !r.refresh.TryLock() {
			return s, nil
		}
	} else {
		r.refresh.Lock()
	}
	defer r.refresh.Unlock()
	if cur := r.snap.Load(); cur != nil && time.Now().UnixNano()-r.lastCheck.Load() < int64(r.cfg.RefreshInterval) {
		return cur, nil // refreshed while we waited
	}
	ns, err := r.load(ctx, r.snap.Load())
	if err != nil {
		if s != nil {
			r.log.Warn("schema registry: refresh failed; validating with the schemas known", "err", err)
			r.lastCheck.Store(time.Now().UnixNano())
			return s, nil
		}
		return nil, &UnavailableError{Err: err}
	}
	r.snap.Store(ns)
	r.lastCheck.Store(time.Now().UnixNano())
	return ns, nil
}

// load reads the stamp and, when it moved, every type's latest version.
func (r *Registry) load(ctx context.Context, old *snapshot) (*snapshot, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var stamp string
	// rev only grows per row, so count and sum change with every commit,
	// whatever order concurrent changes commit in.
	if err := r.pool.QueryRow(ctx, `SELECT count(*)::text || ':' || coalesce(sum(rev), 0)::text FROM sluice.event_schema_types`).Scan(&stamp); err != nil {
		return nil, err
	}
	if old != nil && old.stamp == stamp {
		return old, nil
	}
	rows, err := r.pool.Query(ctx, `SELECT event_type, version, schema, fingerprint
		FROM sluice.event_schemas ORDER BY event_type, version`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ns := &snapshot{stamp: stamp, latest: map[string]Version{}, compiled: map[versionKey]*Compiled{}, byFingerprint: map[compiledKey]*Compiled{},
		broken: map[string]error{}, upcasters: map[versionKey]*Upcaster{}, upByFingerprint: map[compiledKey]*Upcaster{}, brokenUp: map[versionKey]error{}}
	for rows.Next() {
		var k compiledKey
		var raw string
		if err := rows.Scan(&k.eventType, &k.version, &raw, &k.fingerprint); err != nil {
			return nil, err
		}
		c := (*Compiled)(nil)
		if old != nil {
			c = old.byFingerprint[k]
		}
		if c == nil {
			if c, err = Compile([]byte(raw)); err != nil {
				// One type's stored schema must not stop every append:
				// that type is refused until an operator fixes it.
				ns.broken[k.eventType] = fmt.Errorf("schema: stored v%d of %s does not compile (fix or delete it with sluice schema): %w", k.version, k.eventType, err)
				r.log.Error("schema registry: a stored schema does not compile; appends of its type are refused", "event_type", k.eventType, "version", k.version, "err", err)
				continue
			}
		}
		ns.byFingerprint[k] = c
		ns.compiled[versionKey{k.eventType, k.version}] = c
		ns.latest[k.eventType] = Version{Version: k.version, Schema: c} // ascending: the last is the latest
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	if err := r.loadUpcasters(ctx, old, ns); err != nil {
		return nil, err
	}
	return ns, nil
}
