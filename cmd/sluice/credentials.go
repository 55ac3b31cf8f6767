package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A wrong credential is a fatal start-up error naming the dependency and
// the variable (issue 23.4), not an outage waited out for ever: these
// checks run once, when a process opens its dependencies. After a
// successful start the same refusal is classified as today (shared/failure:
// a pause, since a rotated secret may come back).

// ErrCredentials marks a dependency that refused the configured credentials
// at start-up.
var ErrCredentials = errors.New("credentials refused")

// s3CredentialCodes are the S3 error codes of a refused credential.
var s3CredentialCodes = map[string]bool{
	"InvalidAccessKeyId": true, "SignatureDoesNotMatch": true, "AccessDenied": true,
	"InvalidToken": true, "ExpiredToken": true, "InvalidSecurity": true,
}

// s3CredentialError returns err as a fatal "S3 refused the credentials"
// error when the object store refused the configured keys (403,
// InvalidAccessKeyId, SignatureDoesNotMatch, AccessDenied); nil otherwise.
func s3CredentialError(err error) error {
	if err == nil {
		return nil
	}
	code := ""
	if ae, ok := errors.AsType[smithy.APIError](err); ok {
		code = ae.ErrorCode()
	}
	status := 0
	if re, ok := errors.AsType[*awshttp.ResponseError](err); ok {
		status = re.HTTPStatusCode()
	}
	if !s3CredentialCodes[code] && status != http.StatusForbidden && status != http.StatusUnauthorized {
		return nil
	}
	return fmt.Errorf("%w: S3 refused the credentials in EVENT_STORE_S3_ACCESS_KEY_ID / EVENT_STORE_S3_SECRET_ACCESS_KEY (%s): %w",
		ErrCredentials, firstNonEmpty(code, http.StatusText(status)), err)
}

// checkPostgresCredentials connects once: a server that refuses the
// credentials (SQLSTATE 28P01 invalid_password, 28000
// invalid_authorization_specification: unknown role, pg_hba rejection) is
// a fatal error naming vars (DATABASE_URL, or the role variables pointing
// at that database). Any other failure (unreachable, starting up) is left
// to the callers, who treat it as an outage.
func checkPostgresCredentials(ctx context.Context, pool *pgxpool.Pool, vars string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := pool.Ping(ctx)
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok && (pe.Code == "28P01" || pe.Code == "28000") {
		return fmt.Errorf("%w: Postgres refused the credentials in %s (SQLSTATE %s): %s", ErrCredentials, vars, pe.Code, pe.Message)
	}
	return nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
