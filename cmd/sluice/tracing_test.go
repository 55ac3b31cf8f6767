package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/observability"
	"github.com/sluicehq/sluice/shared/tracing"
)

// TestTraceOneCommand runs one create through the real pipeline (the wiring
// of `sluice dev`: api, event store on MinIO and Postgres, relay, kfake,
// instance worker, projection worker, the Elasticsearch test server) with
// an in-memory span recorder, and checks that the command makes one trace,
// continuing the caller's traceparent, with every step where it belongs:
//
//	POST (server) ← client's span
//	├─ eventstore append
//	└─ publish commands (producer)
//	   └─ process commands (consumer, instanceworker)
//	      ├─ registry claim, elasticsearch …, registry mark_done, kafka commit offsets
//	      └─ eventstore append (the domain event)
//	         └─ publish events (producer)
//	            └─ process events (consumer, projection:history:v1)
//	               └─ registry claim, elasticsearch bulk, registry mark_done, kafka commit offsets
func TestTraceOneCommand(t *testing.T) {
	mi, err := testenv.StartMinIO(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mi.Close)
	t.Setenv("DATABASE_URL", testenv.NewDatabase(t))
	t.Setenv("EVENT_STORE_BACKEND", "s3")
	t.Setenv("EVENT_STORE_S3_ENDPOINT", mi.Endpoint)
	t.Setenv("EVENT_STORE_S3_ACCESS_KEY_ID", mi.AccessKey)
	t.Setenv("EVENT_STORE_S3_SECRET_ACCESS_KEY", mi.SecretKey)
	t.Setenv("EVENT_STORE_BUCKET", mi.NewBucket(t))
	t.Setenv("SLUICE_HTTP_ADDR", "off")
	t.Setenv("SLUICE_LOG_LEVEL", "warn")
	apiAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	t.Setenv("SLUICE_API_ADDR", apiAddr)

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	cfg, err := sluiceconfig.FromOS()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	logger, err := observability.NewLogger(&errb, cfg.Log.Format, cfg.Log.Level)
	if err != nil {
		t.Fatal(err)
	}
	commands, events := cfg.Kafka.CommandsTopic, cfg.Kafka.EventsTopic
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	f := devFlags{dataDir: t.TempDir(), esAddr: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)), kafkaAddr: "127.0.0.1:0", tracerProvider: tp}
	go func() { done <- runDev(ctx, &out, cfg, logger, f) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("dev did not stop within a minute")
		}
	})

	// The caller's own span: the trace it starts must run to the end.
	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	client := &http.Client{Timeout: 5 * time.Second}
	testenv.WaitFor(t, time.Minute, "the api to accept the create", func() bool {
		select {
		case err := <-done:
			t.Fatalf("dev stopped: %v\n%s\n%s", err, out.String(), errb.String())
		default:
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+apiAddr+"/v1/dbs/shop/classes/orders/instances",
			strings.NewReader(`{"instance_id":"42","data":{"total":10}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Traceparent", "00-"+traceID+"-"+clientSpan+"-01")
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			return false
		}
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("create: %d %s", resp.StatusCode, body)
		}
		return true
	})

	historyHandler := projectionworker.HandlerName("history", 1)
	var spans []sdktrace.ReadOnlySpan
	testenv.WaitFor(t, time.Minute, "the history projection's offset commit span", func() bool {
		spans = spans[:0]
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID().String() == traceID {
				spans = append(spans, s)
			}
		}
		for _, s := range spans {
			if s.Name() == "process "+events && attr(s, tracing.AttrHandler) == historyHandler {
				return true
			}
		}
		return false
	})

	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	// one finds the single span named name (with handler, when given)
	// whose parent is parent.
	one := func(name, handler string, parent sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
		t.Helper()
		var found []sdktrace.ReadOnlySpan
		for _, s := range spans {
			if !strings.HasPrefix(s.Name(), name) || (handler != "" && attr(s, tracing.AttrHandler) != handler) {
				continue
			}
			if parent != nil && s.Parent().SpanID() != parent.SpanContext().SpanID() {
				continue
			}
			found = append(found, s)
		}
		if len(found) != 1 {
			t.Fatalf("want one span %q (handler %q) under %v, got %d; the trace:\n%s", name, handler, spanName(parent), len(found), dump(spans, byID))
		}
		return found[0]
	}

	server := one("POST /v1/dbs/{db}/classes/{class}/instances", "", nil)
	if got := server.Parent().SpanID().String(); got != clientSpan || !server.Parent().IsRemote() {
		t.Errorf("server span's parent %s (remote %v), want the caller's %s", got, server.Parent().IsRemote(), clientSpan)
	}
	if server.SpanKind() != trace.SpanKindServer {
		t.Errorf("server span kind %v", server.SpanKind())
	}
	one("eventstore append", "", server)
	pubCmd := one("publish "+commands, "", server)
	procCmd := one("process "+commands, instanceworker.HandlerName, pubCmd)
	if !procCmd.Parent().IsRemote() {
		t.Error("the instance worker's span does not continue the Kafka header (its parent is not remote)")
	}
	for _, step := range []string{"registry claim", "elasticsearch ", "registry mark_done", "kafka commit offsets"} {
		one(step, "", procCmd)
	}
	appendEv := one("eventstore append", "", procCmd)
	pubEv := one("publish "+events, "", appendEv)
	procEv := one("process "+events, historyHandler, pubEv)
	for _, step := range []string{"registry claim", "elasticsearch bulk", "registry mark_done", "kafka commit offsets"} {
		one(step, "", procEv)
	}
	// The record spans end at the offset commit, after every step.
	for _, p := range []sdktrace.ReadOnlySpan{procCmd, procEv} {
		commit := one("kafka commit offsets", "", p)
		if p.EndTime().Before(commit.EndTime()) {
			t.Errorf("%s ended at %v, before its offset commit at %v", p.Name(), p.EndTime(), commit.EndTime())
		}
	}
	// Every span of the trace hangs from the caller's span.
	for _, s := range spans {
		for cur := s; cur != server; {
			p, ok := byID[cur.Parent().SpanID()]
			if !ok {
				t.Fatalf("%s: parent %s is not in the trace\n%s", s.Name(), cur.Parent().SpanID(), dump(spans, byID))
			}
			cur = p
		}
	}
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value.String()
		}
	}
	return ""
}

func spanName(s sdktrace.ReadOnlySpan) string {
	if s == nil {
		return "(any)"
	}
	return s.Name()
}

// dump prints the trace as a tree, for failures.
func dump(spans []sdktrace.ReadOnlySpan, byID map[trace.SpanID]sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, s := range spans {
		depth := 0
		for p, ok := byID[s.Parent().SpanID()]; ok; p, ok = byID[p.Parent().SpanID()] {
			depth++
		}
		fmt.Fprintf(&b, "%s%s [%s] parent %s handler %q\n", strings.Repeat("  ", depth), s.Name(), s.SpanContext().SpanID(), s.Parent().SpanID(), attr(s, tracing.AttrHandler))
	}
	return b.String()
}
