package eventstore

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/objstore/s3store"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/failure"
)

// An object-store outage fails appends fast with *UnavailableError (503,
// Retry-After, an outage) instead of holding them until the store comes
// back (issue 26), through the real s3 client: a frozen store after
// EVENT_STORE_OBJECT_TIMEOUT, with the outcome unknown (the request was
// sent), so the rows stay reserved for the relay's rule 3; a refused one at
// once, with the segment definitely not written, so the rows are released
// and the next append after the outage is publishable without waiting.
func TestObjectStoreOutage(t *testing.T) {
	cases := []struct {
		name       string
		frozen     bool
		wantState  string
		notWritten bool
	}{
		{"frozen", true, stateReserved, false},
		{"refused", false, stateAbandoned, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			minio := minioServer(t)
			name := minio.NewBucket(t)
			upstream := strings.TrimPrefix(minio.Endpoint, "http://")
			proxy := testenv.NewTCPProxy(t, upstream)
			endpoint := "http://" + proxy.Addr()
			if c.frozen {
				endpoint = "http://" + testenv.BlackHole(t)
			}
			b, err := s3store.New(context.Background(), s3store.Options{
				Bucket: name, Endpoint: endpoint, PathStyle: true, AccessKeyID: minio.AccessKey, SecretAccessKey: minio.SecretKey,
				Timeout: 500 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			if !c.frozen {
				proxy.Stop()
			}
			s, err := New(testConfig(), Deps{Pool: e.pool, Bucket: b})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			// the caller sets no deadline: only the store's own bounds end
			// the append (the guard keeps a failing run from hanging)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			guard := time.AfterFunc(time.Minute, cancel)
			defer guard.Stop()
			envs := crashBatch()
			rs, err := s.Append(ctx, envs...)
			if err != nil {
				t.Fatalf("append during the outage did not return by itself: %v", err)
			}
			for i, r := range rs {
				var ue *UnavailableError
				if !errors.As(r.Err, &ue) || ue.HTTPStatus() != http.StatusServiceUnavailable || ue.RetryAfter <= 0 ||
					ue.NotWritten != c.notWritten || ue.Dependency != failure.ObjectStore || !failure.IsOutage(context.Background(), r.Err) {
					t.Errorf("envelope %d: %s, want *UnavailableError (503, Retry-After, objectstore outage, NotWritten %v)", i, describe(r), c.notWritten)
				}
			}
			for _, ev := range envs {
				if st := rowState(t, e.pool, ev.EventID); st != c.wantState {
					t.Errorf("row after the failed PUT is %s, want %s", st, c.wantState)
				}
			}
			if c.frozen {
				return
			}
			// The store is back: the next append is committed and nothing
			// below it is in flight — the relay passes the released
			// positions and publishes it at once.
			proxy.Start()
			next := mustAppend(t, s, command("Order", "next", 1))[0]
			rows, err := s.Index(ctxT(t), IndexQuery{FromPosition: 1, ToPosition: next.Event.Envelope.Position, UncommittedOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.State != stateAbandoned {
					t.Errorf("position %d is %s below the next append, want abandoned", r.Position, r.State)
				}
			}
		})
	}
}
