-- +goose Up
-- The API keys of access control (docs/security.md), owned by package
-- auth: one row per key. secret_sha256 is the SHA-256 of the key's 32
-- random bytes (base64url), never the secret itself; grants are the key's
-- permissions, [{"ops": [...], "resource": "pattern"}]. A key works while
-- revoked_at is null and expires_at is null or later than now; a rotation
-- makes a new row (rotated_from names the old key) and sets the old key's
-- expires_at to the end of the grace period. Rows are kept after
-- revocation: they name the principal of what a key once appended.
CREATE TABLE sluice.auth_keys (
    key_id        text COLLATE "C" PRIMARY KEY,
    principal     text        NOT NULL,
    secret_sha256 bytea       NOT NULL CHECK (length(secret_sha256) = 32),
    grants        jsonb       NOT NULL,
    description   text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    created_by    text        NOT NULL,
    expires_at    timestamptz,
    revoked_at    timestamptz,
    revoked_by    text,
    rotated_from  text
);
CREATE INDEX auth_keys_principal ON sluice.auth_keys (principal);
COMMENT ON TABLE sluice.auth_keys IS 'auth: API keys (hashed secrets, grants, expiry, revocation)';

-- +goose Down
DROP TABLE sluice.auth_keys;
