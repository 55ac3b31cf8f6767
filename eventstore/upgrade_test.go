package eventstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"

	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/migrations"
)

// upgradeFixture is a store written by the build of main before shards
// (commit b7e64fa, schema version 22): its index as COPY files, its bucket
// (segments/), and every committed event as that build read it back
// (events.json). testdata/upgrade-n1/generate_test.go.txt made it.
const upgradeFixture = "testdata/upgrade-n1"

// appendsColumns are the columns of sluice.appends at schema 22, in the
// fixture's order.
const appendsColumns = `position, event_id, kind, aggregate_type, aggregate_id, sequence_number, state, segment_key,
	byte_offset, byte_length, canonical_hash, occurred_at, writer_id, reserved_at, committed_at`

type fixtureEvent struct {
	EventID        string `json:"event_id"`
	AggregateType  string `json:"aggregate_type"`
	AggregateID    string `json:"aggregate_id"`
	Kind           string `json:"kind"`
	SequenceNumber int64  `json:"sequence_number"`
	Position       int64  `json:"position"`
	SegmentKey     string `json:"segment_key"`
	Offset         int64  `json:"offset"`
	Raw            string `json:"raw"`
}

// Upgrading a store of one log (made by the build before shards) loses
// nothing: migration 23 keeps every index row as shard 0's, byte for byte,
// and the store opened on it (one shard) reads every event back exactly
// as that build did — by event_id, by stream, in the log, by segment —,
// repairs the reservation a crash left, and appends after the old head
// with segment keys of the old form. Opening it with more shards is
// refused: it is a store of one shard.
func TestUpgradeFromOneLog(t *testing.T) {
	ctx := ctxT(t)
	url := testenv.NewDatabase(t)
	db, err := migrations.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS sluice`); err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS("../migrations"),
		goose.WithTableName("sluice.schema_migrations"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 22); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	oldHead := loadFixture(t, pool)
	readRows := func(t *testing.T) []string {
		return queryStrings(t, pool, `SELECT concat_ws('|', `+appendsColumns+`) FROM sluice.appends ORDER BY position`)
	}
	before := readRows(t)
	var evs []fixtureEvent
	b, err := os.ReadFile(filepath.Join(upgradeFixture, "events.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &evs); err != nil {
		t.Fatal(err)
	}
	if len(evs) < 50 || len(before) <= len(evs) {
		t.Fatalf("fixture: %d events, %d rows: too small, or no crashed reservation in it", len(evs), len(before))
	}

	t.Run("migrate up keeps every row as shard 0's", func(t *testing.T) {
		res, err := migrations.Up(ctx, db, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(res, func(r migrations.Result) bool { return r.Version == 23 }) {
			t.Fatalf("Up applied %+v, want 23 among them", res)
		}
		if after := readRows(t); strings.Join(after, "\n") != strings.Join(before, "\n") {
			t.Fatalf("appends changed:\n got  %v\n want %v", after, before)
		}
		var shards, other, head int64
		if err := pool.QueryRow(ctx, `SELECT (SELECT shards FROM sluice.eventstore_layout), (SELECT count(*) FROM sluice.appends WHERE shard <> 0),
			(SELECT next_position FROM sluice.log_head WHERE shard = 0)`).Scan(&shards, &other, &head); err != nil {
			t.Fatal(err)
		}
		if shards != 1 || other != 0 || head != oldHead {
			t.Fatalf("layout %d shards, %d rows outside shard 0, head %d; want 1, 0, %d", shards, other, head, oldHead)
		}
	})

	bucket, err := filestore.New(copyDir(t, filepath.Join(upgradeFixture, "bucket")))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("opening it with four shards is refused", func(t *testing.T) {
		_, err := New(shardedConfig(4), Deps{Pool: pool, Bucket: bucket})
		var me *ShardsMismatchError
		if !errors.As(err, &me) || me.Stored != 1 {
			t.Fatalf("New with four shards: %v", err)
		}
	})
	s, err := New(testConfig(), Deps{Pool: pool, Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	check := func(t *testing.T, what string, ev Event, f fixtureEvent) {
		t.Helper()
		e := ev.Envelope
		if string(ev.Raw) != f.Raw || e.EventID != f.EventID || e.Position != f.Position || e.SequenceNumber != f.SequenceNumber ||
			ev.SegmentKey != f.SegmentKey || ev.Offset != f.Offset || ev.Shard != 0 {
			t.Fatalf("%s: %s at %d (seq %d, %s@%d, shard %d)\n got  %s\n want %s", what, e.EventID, e.Position, e.SequenceNumber,
				ev.SegmentKey, ev.Offset, ev.Shard, ev.Raw, f.Raw)
		}
	}
	t.Run("every event by event_id", func(t *testing.T) {
		for _, f := range evs {
			ev, err := s.ByEventID(ctx, f.EventID)
			if err != nil {
				t.Fatal(err)
			}
			check(t, "ByEventID", ev, f)
		}
	})
	t.Run("every stream", func(t *testing.T) {
		streams := map[[2]string][]fixtureEvent{}
		for _, f := range evs {
			k := [2]string{f.AggregateType, f.AggregateID}
			streams[k] = append(streams[k], f)
		}
		for k, want := range streams {
			slices.SortFunc(want, func(a, b fixtureEvent) int {
				if a.SequenceNumber != b.SequenceNumber {
					return int(a.SequenceNumber - b.SequenceNumber)
				}
				return strings.Compare(a.Kind, b.Kind)
			})
			got, err := s.Stream(ctx, k[0], k[1], 1, 0, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%v: %d events, want %d", k, len(got), len(want))
			}
			for j := range got {
				check(t, "Stream", got[j], want[j])
			}
		}
	})
	t.Run("the crashed reservation is repaired, then the whole log reads back", func(t *testing.T) {
		if _, err := pool.Exec(ctx, `UPDATE sluice.appends SET reserved_at = now() - interval '1 hour' WHERE state = 'reserved'`); err != nil {
			t.Fatal(err)
		}
		rep, err := s.Repair(ctx, 0)
		if err != nil || rep.Abandoned != 1 {
			t.Fatalf("repair %+v, %v; want the one reservation left abandoned", rep, err)
		}
		byPos := slices.Clone(evs)
		slices.SortFunc(byPos, func(a, b fixtureEvent) int { return int(a.Position - b.Position) })
		var got []Event
		for after := int64(0); ; {
			page, err := s.Log(ctx, LogQuery{After: after, Limit: 17})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page.Events...)
			if page.Through == after {
				break
			}
			after = page.Through
		}
		if len(got) != len(byPos) {
			t.Fatalf("the log holds %d events, want %d", len(got), len(byPos))
		}
		for j := range got {
			check(t, "Log", got[j], byPos[j])
		}
		if h, err := s.Head(ctx); err != nil || h != byPos[len(byPos)-1].Position {
			t.Fatalf("Head %d, %v", h, err)
		}
	})
	t.Run("every segment reads back byte for byte", func(t *testing.T) {
		segs, err := s.Segments(ctx, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]bool{}
		for _, f := range evs {
			keys[f.SegmentKey] = true
		}
		if len(segs) != len(keys) {
			t.Fatalf("%d segments listed, the events are in %d", len(segs), len(keys))
		}
		for _, sg := range segs {
			evs, err := s.ReadSegment(ctx, sg.Key)
			if err != nil {
				t.Fatal(err)
			}
			body, err := os.ReadFile(filepath.Join(upgradeFixture, "bucket", sg.Key))
			if err != nil {
				t.Fatal(err)
			}
			var lines [][]byte
			for _, ev := range evs {
				lines = append(lines, ev.Raw)
			}
			if !bytes.Equal(append(bytes.Join(lines, []byte("\n")), '\n'), body) {
				t.Fatalf("%s does not read back as stored", sg.Key)
			}
		}
	})
	t.Run("appends go on after the old head", func(t *testing.T) {
		r := mustAppend(t, s, command("Order", "a-0", "after the upgrade"))[0]
		want := SegmentKey(oldHead, oldHead)
		if r.Event.Envelope.Position != oldHead || r.Event.SegmentKey != want || r.Event.Shard != 0 || r.Event.Envelope.SequenceNumber != 4 {
			t.Fatalf("%s in %s, want position %d seq 4 in %s", describe(r), r.Event.SegmentKey, oldHead, want)
		}
	})
}

// loadFixture writes the fixture's index into a schema-22 database and
// returns its log_head.
func loadFixture(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for file, sql := range map[string]string{
		"appends.copy":   `COPY sluice.appends (` + appendsColumns + `) FROM STDIN`,
		"sequences.copy": `COPY sluice.sequences (aggregate_type, aggregate_id, last_sequence, updated_at) FROM STDIN`,
	} {
		f, err := os.Open(filepath.Join(upgradeFixture, file))
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.Conn().PgConn().CopyFrom(ctx, f, sql)
		_ = f.Close()
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(upgradeFixture, "log_head.copy"))
	if err != nil {
		t.Fatal(err)
	}
	head, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE sluice.log_head SET next_position = $1`, head); err != nil {
		t.Fatal(err)
	}
	return head
}

// copyDir copies a directory tree into a temporary one.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
