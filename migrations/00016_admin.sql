-- +goose Up
-- The audit log of the admin API (docs/console.md, "Audit log"), owned by
-- package admin: one row per request that acts or would act (dry runs
-- included), written before the answer. who is the token's role (operator
-- or read) and name; what is the action and its target; outcome is ok or
-- the error's code; detail is the request body and a summary of the result.
CREATE TABLE sluice.admin_audit (
    id       bigserial   PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    who      text        NOT NULL,
    role     text        NOT NULL CHECK (role IN ('operator', 'read')),
    action   text        NOT NULL,
    target   text        NOT NULL DEFAULT '',
    dry_run  boolean     NOT NULL,
    outcome  text        NOT NULL,
    status   integer     NOT NULL,
    detail   jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX admin_audit_at ON sluice.admin_audit (at DESC);
COMMENT ON TABLE sluice.admin_audit IS 'admin: the audit log of the admin API, one row per action (dry runs included)';

-- +goose Down
DROP TABLE sluice.admin_audit;
