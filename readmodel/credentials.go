package readmodel

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
)

// ErrCredentials marks an Elasticsearch cluster that refused the configured
// credentials when a process started (docs/failures.md, "Wrong
// credentials").
var ErrCredentials = errors.New("credentials refused")

// CheckCredentials asks the cluster once who the configured credentials
// are (GET /): a 401 or 403 is a fatal start-up error naming the variables
// (ELASTICSEARCH_USERNAME / ELASTICSEARCH_PASSWORD / ELASTICSEARCH_API_KEY),
// wrapping ErrCredentials. Anything else, an unreachable or slow cluster
// included, returns nil: that is an outage the worker waits out once it
// runs, as it would after a successful start. The same refusal after the
// start stays an outage (a rotated secret may come back).
func CheckCredentials(ctx context.Context, es *elasticsearch.Client, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := es.Info(es.Info.WithContext(ctx))
	if err != nil {
		return nil
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized && res.StatusCode != http.StatusForbidden {
		return nil
	}
	se := NewStatusError("start-up check", res.StatusCode, res.Body)
	return fmt.Errorf("%w: Elasticsearch refused the credentials in ELASTICSEARCH_USERNAME / ELASTICSEARCH_PASSWORD / ELASTICSEARCH_API_KEY (%d %s): %w",
		ErrCredentials, res.StatusCode, http.StatusText(res.StatusCode), se)
}
