package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice/client"
)

// Append two events to a new stream, atomically, and read them back.
func Example() {
	ctx := context.Background()
	c, err := client.New("http://localhost:8080", client.WithToken("secret"))
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Append(ctx, "Device", "dev-1", client.NoStream,
		client.EventData{EventType: "READING_TAKEN", Data: map[string]any{"celsius": 21.5}},
		client.EventData{EventType: "READING_TAKEN", Data: map[string]any{"celsius": 21.7}},
	)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored at", res.FirstSequence, "to", res.LastSequence)
	for ev, err := range c.ReadStream(ctx, "Device", "dev-1", client.StreamOptions{}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.SequenceNumber, ev.EventType, string(ev.Data))
	}
}

// Optimistic concurrency: append at the sequence last read; on a
// conflict, the error says where the stream is. The server here answers
// as the API does when the stream has moved on.
func ExampleConflictError() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"type":"urn:sluice:problem:optimistic_concurrency_conflict","title":"Optimistic concurrency conflict",`+
			`"status":409,"detail":"expected_sequence 3 does not hold: the stream's last sequence is 5; nothing was written",`+
			`"code":"optimistic_concurrency_conflict","field":"expected_sequence","expected_seq":3,"actual_seq":5}`)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Append(context.Background(), "Account", "acc-7", client.AtSequence(3),
		client.EventData{EventType: "DEPOSITED", Data: map[string]any{"amount": 10}})
	var conflict *client.ConflictError
	if errors.As(err, &conflict) {
		fmt.Println("expected", *conflict.Expected, "but the stream is at", conflict.Actual)
	}
	// Output: expected 3 but the stream is at 5
}

// A validation error names the offending field in the API's notation.
func ExampleValidationError() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprint(w, `{"type":"urn:sluice:problem:validation_failed","title":"Validation failed","status":422,`+
			`"detail":"event_type must match [A-Z][A-Z0-9_]{0,127}","code":"validation_failed",`+
			`"field":"events[0].event_type","limit":"[A-Z][A-Z0-9_]{0,127}"}`)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Append(context.Background(), "Device", "dev-1", "", client.EventData{EventType: "reading"})
	var invalid *client.ValidationError
	if errors.As(err, &invalid) {
		fmt.Println(invalid.Code, "at", invalid.Field)
	}
	// Output: validation_failed at events[0].event_type
}

// Follow the log from its start, on a store of any number of shards:
// page through what is there by cursor, then subscribe after the last
// page. The subscription reconnects by itself and resumes after the last
// event delivered; storing ev.Cursor once an event is handled lets a
// restarted process resume there too (pass it as the first cursor).
func ExampleClient_Subscribe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.New("http://localhost:8080")
	if err != nil {
		log.Fatal(err)
	}
	handle := func(ev client.Event) {
		fmt.Println(ev.AggregateType, ev.AggregateID, ev.SequenceNumber, ev.EventType)
	}
	cursor := "" // or the cursor stored by an earlier run
	for {
		page, err := c.ReadLogPage(ctx, client.LogOptions{Cursor: cursor, Limit: 500})
		if err != nil {
			log.Fatal(err)
		}
		for _, ev := range page.Events {
			handle(ev)
		}
		if page.NextCursor == cursor {
			break // caught up
		}
		cursor = page.NextCursor
	}
	opts := client.SubscribeOptions{
		Cursor: cursor,
		OnReconnect: func(err error, _ int64, delay time.Duration) {
			log.Printf("subscription: %v; resuming in %s", err, delay)
		},
	}
	for ev, err := range c.Subscribe(ctx, opts) {
		if err != nil {
			log.Fatal(err) // the context ended, or the API refused (401, …)
		}
		handle(ev)
		cursor = ev.Cursor // store it to resume here after a restart
	}
}

// Create an instance and wait until the instance worker applied it.
func ExampleClient_WaitForCommand() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New("http://localhost:8080")
	if err != nil {
		log.Fatal(err)
	}
	acc, err := c.CreateInstance(ctx, "shop", "order", "42", map[string]any{"total": 10},
		client.WithIdempotencyKey("order-42-create"))
	if err != nil {
		log.Fatal(err)
	}
	st, err := c.WaitForCommand(ctx, acc.CommandID)
	var failed *client.CommandFailedError
	switch {
	case errors.As(err, &failed):
		fmt.Println("rejected:", failed.Status.Reason)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println(st.Status) // APPLIED
	}
	// The next command can name the sequence the create took.
	if _, err := c.PatchInstance(ctx, "shop", "order", "42", map[string]any{"total": 12},
		client.WithExpectedSeq(acc.SequenceNumber)); err != nil {
		log.Fatal(err)
	}
}

// Retries: at most 10 attempts within 2 minutes, from 100 ms up to 5 s
// apart (a Retry-After of the server is honoured instead).
func ExampleWithRetry() {
	c, err := client.New("https://sluice.example.com",
		client.WithToken("secret"),
		client.WithRetry(client.RetryPolicy{MaxAttempts: 10, InitialInterval: 100 * time.Millisecond,
			MaxInterval: 5 * time.Second, MaxElapsed: 2 * time.Minute}),
		client.WithHTTPClient(&http.Client{Transport: http.DefaultTransport}),
	)
	if err != nil {
		log.Fatal(err)
	}
	_ = c
}
