package relay

import (
	"errors"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/failure"
)

// A relay over a store of four shards on two Postgres servers
// (EVENT_STORE_SHARD_MAP: 0-1 on the env's server, which also holds the
// relay's leases, 2-3 on a second one) publishes every shard. When the
// second server is stopped, its shards' appends fail as an outage naming
// it while the first server's are appended and published to their heads;
// when it is back, its shards catch up and every acknowledged event is on
// Kafka exactly once, each aggregate in order.
func TestRelayOverTwoServers(t *testing.T) {
	const shards = 4
	e := newEnv(t, 30*time.Second)
	e.url, e.pool = testenv.NewMigratedDatabase(t) // shards 0-1 and the relay's tables
	srvB := testenv.NewPGServer(t)
	urlB, poolB := srvB.NewMigratedDatabase(t)
	st, err := eventstore.New(eventstore.Config{
		Shards: shards, ShardMap: config.Secret("0-1=" + e.url + ",2-3=" + urlB),
		GroupCommitMaxWait: 2 * time.Millisecond, GroupCommitMaxEvents: 500, AppendTimeout: e.appendTO,
	}, eventstore.Deps{ShardPools: map[string]*pgxpool.Pool{e.url: e.pool, urlB: poolB}, Bucket: e.bucket, Logger: testLogger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e.store = st
	a := e.opts(t)
	a.Config.MetricsLogInterval = 0
	runRelay(t, e, a)

	stored := map[string]eventstore.Event{}
	maps.Copy(stored, appendAll(t, st, 8, mixedEnvelopes(400, 40, "")))
	testenv.WaitFor(t, time.Minute, "every shard of both servers published to its head", func() bool { return e.allPublished(t) })

	// Server B down: its shards pause, A's go on.
	srvB.Stop()
	var onA, onB []envelope.Envelope
	for i, env := range mixedEnvelopes(200, 40, "") {
		env.AggregateID = "down-" + env.AggregateID
		if sh := eventstore.ShardOf(env.AggregateType, env.AggregateID, shards); sh < 2 {
			onA = append(onA, env)
		} else if i%4 == 0 {
			onB = append(onB, env)
		}
	}
	maps.Copy(stored, appendAll(t, st, 4, onA))
	ctx := ctxT(t, 2*time.Minute)
	for _, env := range onB[:3] {
		_, err := st.AppendOne(ctx, env)
		var se *eventstore.ServerError
		if !errors.As(err, &se) || se.Server != "shards 2-3" || !failure.IsOutage(ctx, err) {
			t.Fatalf("append to a shard of the stopped server: %v, want an outage naming shards 2-3", err)
		}
	}
	shardPublished := func(sh int) bool {
		head, err := st.ShardLog(sh).Head(ctx)
		return err == nil && e.shardCheckpoint(t, sh, shards).Position == head
	}
	testenv.WaitFor(t, time.Minute, "shards 0-1 published to their heads while server B is down", func() bool {
		return shardPublished(0) && shardPublished(1)
	})

	// Server B back: the appends refused meanwhile go in (retried as is),
	// and everything is published.
	srvB.Start()
	testenv.WaitFor(t, time.Minute, "appends to server B again", func() bool {
		_, err := st.AppendOne(ctx, onB[0])
		return err == nil
	})
	maps.Copy(stored, appendAll(t, st, 4, onB))
	testenv.WaitFor(t, 2*time.Minute, "every shard published to its head after server B's restart", func() bool { return e.allPublished(t) })
	seen := verify(t, e, stored, e.consumeAll(t, e.commandsTopic(), e.eventsTopic()), "")
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s published %d times", id, n)
		}
	}
	if len(seen) != len(stored) {
		t.Errorf("%d events on Kafka, %d stored", len(seen), len(stored))
	}
}
