-- +goose Up
-- HOT commits of the event store's rows (docs/eventstore.md#open-blocks-and-hot-commits),
-- owned by package eventstore. Every appends row is inserted as reserved
-- and updated once, to committed, after its segment is written. The two
-- partial indexes of uncommitted rows named `state` in their predicates,
-- so that update could never be a HOT update: each commit wrote a new
-- heap tuple and a new entry in each of the table's three unique indexes,
-- besides the two partial entries each reservation wrote. They are
-- replaced by appends_open, one row per block of positions a reservation
-- took in a shard (a few rows: the groups in flight, plus blocks that hold
-- abandoned rows). appends keeps its state column, the truth; appends_open
-- only says where rows that are not committed may be. No index of appends
-- covers a column the commit changes, and with the fillfactor below the
-- commit's update of a row finds room on its page: a HOT update, no index
-- entry written.
--
-- Cost on an existing store: one scan of appends for its rows that are not
-- committed (through the partial index, dropped after it), and the
-- fillfactor applies to pages written from now on. The store's own
-- statements (from this version on) keep appends_open themselves; the
-- trigger below covers a writer that does not (a build from before this
-- migration during a rolling upgrade, a row written by hand): every row
-- inserted, or put back from committed, in another state than committed
-- gets a block of its own. docs/migrations.md, "Rolling out 26".
CREATE TABLE sluice.appends_open (
    shard       integer NOT NULL CHECK (shard >= 0),
    first       bigint  NOT NULL CHECK (first >= 1),
    last        bigint  NOT NULL,
    segment_key text    NOT NULL,
    PRIMARY KEY (shard, first),
    CHECK (last >= first)
);
COMMENT ON TABLE sluice.appends_open IS 'event store: blocks of positions (per shard) that may hold rows not committed; appends.state is the truth';

-- Writers wait from here to the end of the migration's transaction (the
-- DROP INDEX below would make them wait anyway): a row a writer of an older
-- build inserted in a transaction still open when the copy below took its
-- snapshot would otherwise commit after it, before the trigger exists, and
-- be in no block — Log, Repair and the relay's abandonment would never see
-- it (TestOpenBlocksMigrationWaitsForWriters).
LOCK TABLE sluice.appends IN ACCESS EXCLUSIVE MODE;
INSERT INTO sluice.appends_open (shard, first, last, segment_key)
SELECT shard, position, position, segment_key FROM sluice.appends WHERE state <> 'committed';

DROP INDEX sluice.appends_uncommitted_idx;
DROP INDEX sluice.appends_reserved_age_idx;
ALTER TABLE sluice.appends SET (fillfactor = 70);

-- +goose StatementBegin
CREATE FUNCTION sluice.eventstore_open_row() RETURNS trigger
LANGUAGE plpgsql
AS $fn$
BEGIN
    INSERT INTO sluice.appends_open (shard, first, last, segment_key)
    VALUES (NEW.shard, NEW.position, NEW.position, NEW.segment_key)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd
-- The store's write sets sluice.appends_open = 'kept' for its transaction
-- (it inserts the block itself): the condition is evaluated per row without
-- calling the function.
CREATE TRIGGER appends_open_insert AFTER INSERT ON sluice.appends
    FOR EACH ROW
    WHEN (NEW.state <> 'committed' AND current_setting('sluice.appends_open', true) IS DISTINCT FROM 'kept')
    EXECUTE FUNCTION sluice.eventstore_open_row();
CREATE TRIGGER appends_open_reopen AFTER UPDATE OF state ON sluice.appends
    FOR EACH ROW
    WHEN (OLD.state = 'committed' AND NEW.state <> 'committed')
    EXECUTE FUNCTION sluice.eventstore_open_row();

-- +goose Down
DROP TRIGGER appends_open_reopen ON sluice.appends;
DROP TRIGGER appends_open_insert ON sluice.appends;
DROP FUNCTION sluice.eventstore_open_row();
ALTER TABLE sluice.appends RESET (fillfactor);
CREATE INDEX appends_uncommitted_idx ON sluice.appends (shard, position) WHERE state <> 'committed';
CREATE INDEX appends_reserved_age_idx ON sluice.appends (reserved_at) WHERE state = 'reserved';
DROP TABLE sluice.appends_open;
