package registry

// This file holds the operator pause flag of a worker group
// (sluice.registry_group_pause, migration 00017).

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/shared/claim"
)

// GroupPause is the pause state of one consumer group. A group that was
// never paused has Paused false and a zero ChangedAt.
type GroupPause struct {
	Group     string    `json:"group"`
	Paused    bool      `json:"paused"`
	ChangedAt time.Time `json:"changed_at,omitzero"`
	By        string    `json:"by,omitempty"`
	Reason    string    `json:"reason,omitempty"`
}

// GroupPaused reads the pause state of group.
func (r *Registry) GroupPaused(ctx context.Context, group string) (GroupPause, error) {
	p := GroupPause{Group: group}
	err := r.pool.QueryRow(ctx, `SELECT paused, changed_at, by, reason FROM sluice.registry_group_pause WHERE group_name = $1`, group).
		Scan(&p.Paused, &p.ChangedAt, &p.By, &p.Reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, nil
	}
	if err != nil {
		return p, r.wrap(ctx, "group pause", err)
	}
	p.ChangedAt = p.ChangedAt.UTC()
	return p, nil
}

// Paused reports whether an operator paused group: the worker runtime's
// consumer.PauseSource.
func (r *Registry) Paused(ctx context.Context, group string) (bool, error) {
	p, err := r.GroupPaused(ctx, group)
	return p.Paused, err
}

// PauseChange is what SetGroupPaused did (or, in a dry run, would do).
type PauseChange struct {
	Group   string     `json:"group"`
	DryRun  bool       `json:"dry_run"`
	Changed bool       `json:"changed"`
	Before  GroupPause `json:"before"`
	After   GroupPause `json:"after"`
}

// SetGroupPaused pauses (paused true) or resumes group durably, recording
// by and reason; the CLI and the admin API both call it. Setting the state
// the group already has changes nothing (the row keeps its time, by and
// reason): pause and resume are idempotent. A dry run reads the state and
// returns the change it would make.
func (r *Registry) SetGroupPaused(ctx context.Context, group string, paused bool, by, reason string, dryRun bool) (PauseChange, error) {
	ch := PauseChange{Group: group, DryRun: dryRun}
	if group == "" {
		return ch, &claim.RequestError{Field: "group", Reason: "must not be empty"}
	}
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		ch.Before = GroupPause{Group: group}
		err := tx.QueryRow(ctx, `SELECT paused, changed_at, by, reason FROM sluice.registry_group_pause WHERE group_name = $1 FOR UPDATE`, group).
			Scan(&ch.Before.Paused, &ch.Before.ChangedAt, &ch.Before.By, &ch.Before.Reason)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		ch.Before.ChangedAt = ch.Before.ChangedAt.UTC()
		ch.After, ch.Changed = ch.Before, ch.Before.Paused != paused
		if !ch.Changed {
			return nil
		}
		ch.After = GroupPause{Group: group, Paused: paused, By: by, Reason: reason}
		if dryRun {
			return nil
		}
		return tx.QueryRow(ctx, `INSERT INTO sluice.registry_group_pause (group_name, paused, by, reason) VALUES ($1, $2, $3, $4)
			ON CONFLICT (group_name) DO UPDATE SET paused = EXCLUDED.paused, by = EXCLUDED.by, reason = EXCLUDED.reason, changed_at = now()
			RETURNING changed_at`, group, paused, by, reason).Scan(&ch.After.ChangedAt)
	})
	if err != nil {
		return ch, r.wrap(ctx, "group pause", err)
	}
	ch.After.ChangedAt = ch.After.ChangedAt.UTC()
	return ch, nil
}
