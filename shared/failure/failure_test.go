package failure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"
)

type statusErr int

func (e statusErr) Error() string   { return fmt.Sprintf("status %d", int(e)) }
func (e statusErr) HTTPStatus() int { return int(e) }

type awsErr int

func (e awsErr) Error() string       { return fmt.Sprintf("aws status %d", int(e)) }
func (e awsErr) HTTPStatusCode() int { return int(e) }

func TestClassify(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "x"}}
	cases := []struct {
		name string
		ctx  context.Context
		err  error
		want Class
	}{
		{"nil", nil, nil, Unknown},
		{"plain", nil, errors.New("boom"), Unknown},
		{"refused", nil, fmt.Errorf("dial: %w", syscall.ECONNREFUSED), Outage},
		{"reset", nil, fmt.Errorf("read: %w", syscall.ECONNRESET), Outage},
		{"unexpected eof", nil, fmt.Errorf("body: %w", io.ErrUnexpectedEOF), Outage},
		{"deadline", nil, fmt.Errorf("es: %w", context.DeadlineExceeded), Outage},
		{"caller cancelled", cancelled, fmt.Errorf("es: %w", syscall.ECONNREFUSED), Unknown},
		{"net op error", nil, refused, Outage},
		{"408", nil, statusErr(408), Outage},
		{"429", nil, statusErr(429), Outage},
		{"502", nil, statusErr(502), Outage},
		{"503", nil, fmt.Errorf("wrapped: %w", statusErr(503)), Outage},
		{"504", nil, statusErr(504), Outage},
		{"500", nil, statusErr(500), Unknown},
		{"400", nil, statusErr(400), Permanent},
		{"413", nil, statusErr(413), Permanent},
		{"aws 503", nil, awsErr(503), Outage},
		{"aws 403", nil, awsErr(403), Outage},
		{"401", nil, statusErr(401), Outage},
		{"es 403 read-only block", nil, statusErr(403), Outage},
		{"404", nil, statusErr(404), Permanent},
		{"kafka topic authorization", nil, kerr.TopicAuthorizationFailed, Outage},
		{"kafka sasl", nil, kerr.SaslAuthenticationFailed, Outage},
		{"kafka retriable", nil, kerr.NotLeaderForPartition, Outage},
		{"kafka too large", nil, kerr.MessageTooLarge, Permanent},
		{"kafka invalid topic", nil, fmt.Errorf("produce: %w", kerr.InvalidTopicException), Permanent},
		{"pg admin shutdown", nil, &pgconn.PgError{Code: "57P01"}, Outage},
		{"pg connection", nil, &pgconn.PgError{Code: "08006"}, Outage},
		{"pg too many connections", nil, &pgconn.PgError{Code: "53300"}, Outage},
		{"pg statement timeout", nil, &pgconn.PgError{Code: "57014"}, Outage},
		{"pg read-only standby", nil, &pgconn.PgError{Code: "25006"}, Outage},
		{"pg idle session timeout", nil, &pgconn.PgError{Code: "57P05"}, Outage},
		{"pg disk i/o", nil, &pgconn.PgError{Code: "58030"}, Outage},
		{"pg unique violation", nil, &pgconn.PgError{Code: "23505"}, Unknown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.ctx, tc.err); got != tc.want {
				t.Fatalf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestClassifyRealRefusedConnection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = net.Dial("tcp", addr)
	if err == nil {
		t.Fatal("dial to a closed port succeeded")
	}
	if got := Classify(context.Background(), err); got != Outage {
		t.Fatalf("Classify(%v) = %v, want outage", err, got)
	}
}

func TestDependency(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"postgres error", fmt.Errorf("claim: %w", &pgconn.PgError{Code: "57P01"}), Postgres},
		{"kafka error", fmt.Errorf("produce: %w", kerr.MessageTooLarge), Kafka},
		{"http status", statusErr(503), ""},
		{"plain", errors.New("x"), ""},
		{"nil", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Dependency(tc.err); got != tc.want {
				t.Errorf("Dependency(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}
