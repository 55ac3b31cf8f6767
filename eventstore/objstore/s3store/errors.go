package s3store

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/sluicehq/sluice/eventstore/objstore"
)

// classify wraps an SDK error for op on key with the objstore error callers
// branch on, keeping the cause.
func classify(ctx context.Context, op, key string, err error) error {
	if kind := kindOf(ctx, err); kind != nil {
		return fmt.Errorf("s3store: %s %s: %w: %w", op, key, kind, err)
	}
	return fmt.Errorf("s3store: %s %s: %w", op, key, err)
}

func kindOf(ctx context.Context, err error) error {
	status := 0
	if re, ok := errors.AsType[*awshttp.ResponseError](err); ok {
		status = re.HTTPStatusCode()
	}
	switch code := errorCode(err); {
	case code == "PreconditionFailed" || code == "ConditionalRequestConflict" ||
		status == http.StatusPreconditionFailed || status == http.StatusConflict:
		return objstore.ErrPreconditionFailed
	case code == "NoSuchKey" || code == "NoSuchBucket" || code == "NotFound" || status == http.StatusNotFound:
		return objstore.ErrNotFound
	case code == "InvalidRange" || status == http.StatusRequestedRangeNotSatisfiable:
		return objstore.ErrInvalidRange
	case code == "SlowDown" || code == "RequestTimeout" || code == "ServiceUnavailable" ||
		status >= 500 || status == http.StatusTooManyRequests:
		return objstore.ErrUnavailable
	case status != 0:
		return nil // 400, 403, …: a request or configuration problem, not an outage
	}
	// No response at all.
	if _, ok := errors.AsType[smithy.InvalidParamsError](err); ok {
		return nil
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil // the caller gave up; not the store's fault
	}
	return objstore.ErrUnavailable // refused, reset, DNS, timeouts, deadline
}

func errorCode(err error) string {
	if ae, ok := errors.AsType[smithy.APIError](err); ok {
		return ae.ErrorCode()
	}
	return ""
}
