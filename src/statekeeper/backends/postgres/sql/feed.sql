-- Migration 7: the change feed. Every event row gets a position from a sequence (a
-- column default: the append functions are unchanged), and every statement that
-- inserts events first takes a shared transaction-level advisory lock (key
-- hashtext('statekeeper-feed:' || schema)), held until the append commits or rolls
-- back. Sequence values are taken in one order and committed in another; a reader
-- counts a position as safe only once every transaction that held the lock when it
-- read that position has ended (sk_feed_frontier), so it never passes a position
-- that is still to commit. Shared locks do not conflict with each other:
-- writers never wait for one another, nor for readers.

CREATE SEQUENCE IF NOT EXISTS {s}.sk_feed_seq;
ALTER TABLE {s}.sk_events ADD COLUMN IF NOT EXISTS position bigint;
-- events stored before the feed existed get positions in (agent, seq) order
UPDATE {s}.sk_events SET position = nextval('{s}.sk_feed_seq')
 WHERE position IS NULL;
ALTER TABLE {s}.sk_events ALTER COLUMN position SET DEFAULT nextval('{s}.sk_feed_seq');
-- (a schema created partitioned has it already, on (position, agent_id): PostgreSQL
-- checks a unique index's columns against the partition key before IF NOT EXISTS)
DO $do$ BEGIN
    IF to_regclass('{s}.sk_events_position') IS NULL THEN
        CREATE UNIQUE INDEX sk_events_position ON {s}.sk_events (position);
    END IF;
END $do$;
-- the floor: positions <= floor were trimmed from the feed (the events stay)
CREATE TABLE IF NOT EXISTS {s}.sk_feed_floor (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    floor bigint NOT NULL
);
INSERT INTO {s}.sk_feed_floor (floor) VALUES (0) ON CONFLICT DO NOTHING;

CREATE OR REPLACE FUNCTION {s}.sk_feed_mark() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(23117, hashtext('statekeeper-feed:' || TG_TABLE_SCHEMA));
    RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS sk_feed_mark ON {s}.sk_events;
-- a statement-level BEFORE trigger fires before the statement computes any row (and
-- so before the position defaults call nextval)
CREATE TRIGGER sk_feed_mark BEFORE INSERT ON {s}.sk_events
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.sk_feed_mark();

-- The safe frontier, one round trip. p_candidate / p_holders: what the previous call
-- returned as next_candidate / next_holders. Returns safe: a position such that every
-- append of a position at or below it has ended - the candidate, once none of its
-- holders holds the lock any more, or the newest committed position when no append
-- holds it - and the next candidate. Why it holds: a position <= M (the newest one
-- committed when M is read) was taken before M was read, by a transaction that took
-- the lock first and keeps it until it ends, so if it has not ended it is among the
-- holders read after M. Needs only SELECT on sk_events (read-only roles follow it).
CREATE OR REPLACE FUNCTION {s}.sk_feed_frontier(
    p_schema text, p_candidate bigint, p_holders text[],
    OUT safe bigint, OUT next_candidate bigint, OUT next_holders text[])
LANGUAGE plpgsql AS $fn$
DECLARE
    k oid := hashtext('statekeeper-feed:' || p_schema)::oid;
    newest bigint;
BEGIN
    safe := 0;
    IF p_candidate IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM pg_locks l
         WHERE l.locktype = 'advisory' AND l.classid = 23117 AND l.objid = k
           AND l.objsubid = 2 AND l.virtualtransaction = ANY (p_holders)) THEN
        safe := p_candidate;
    END IF;
    -- the newest committed position first (a statement of its own: its own snapshot),
    -- then the appends in flight
    SELECT coalesce(max(e.position), 0) INTO newest FROM {s}.sk_events e;
    SELECT coalesce(array_agg(l.virtualtransaction), '{{}}') INTO next_holders FROM pg_locks l
     WHERE l.locktype = 'advisory' AND l.classid = 23117 AND l.objid = k
       AND l.objsubid = 2 AND l.granted AND l.pid <> pg_backend_pid();
    IF cardinality(next_holders) = 0 THEN
        safe := greatest(safe, newest);
        next_candidate := NULL;
    ELSE
        next_candidate := newest;
    END IF;
END
$fn$;
