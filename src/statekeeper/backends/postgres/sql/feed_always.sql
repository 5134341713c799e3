-- Migration 13: the change feed's trigger fires in every session, and its frontier counts
-- the appends in flight in this database only. An ordinary trigger
-- does not fire in a session with session_replication_role = replica (set on a role or
-- in a URL's options, as bulk loads and replication tools do): an append made there
-- took no shared advisory lock, the frontier (sk_feed_frontier) could not see it in
-- flight, and a subscriber passed its position before it committed, for good.
ALTER TABLE {s}.sk_events ENABLE ALWAYS TRIGGER sk_feed_mark;

-- An advisory lock is a database's, but pg_locks shows every database's: the frontier
-- counted the appends in flight of a store of the same schema name in another database
-- of the server (every store in "public" shares the name) and waited for them - a
-- writer frozen there for idle_transaction_timeout stopped this store's feed as long.
-- sk_feed_frontier of migration 7, its lock reads narrowed to this database.
CREATE OR REPLACE FUNCTION {s}.sk_feed_frontier(
    p_schema text, p_candidate bigint, p_holders text[],
    OUT safe bigint, OUT next_candidate bigint, OUT next_holders text[])
LANGUAGE plpgsql AS $fn$
DECLARE
    k oid := hashtext('statekeeper-feed:' || p_schema)::oid;
    db oid := (SELECT d.oid FROM pg_database d WHERE d.datname = current_database());
    newest bigint;
BEGIN
    safe := 0;
    IF p_candidate IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM pg_locks l
         WHERE l.locktype = 'advisory' AND l.database = db AND l.classid = 23117
           AND l.objid = k AND l.objsubid = 2 AND l.virtualtransaction = ANY (p_holders)) THEN
        safe := p_candidate;
    END IF;
    -- the newest committed position first (a statement of its own: its own snapshot),
    -- then the appends in flight
    SELECT coalesce(max(e.position), 0) INTO newest FROM {s}.sk_events e;
    SELECT coalesce(array_agg(l.virtualtransaction), '{{}}') INTO next_holders FROM pg_locks l
     WHERE l.locktype = 'advisory' AND l.database = db AND l.classid = 23117
       AND l.objid = k AND l.objsubid = 2 AND l.granted AND l.pid <> pg_backend_pid();
    IF cardinality(next_holders) = 0 THEN
        safe := greatest(safe, newest);
        next_candidate := NULL;
    ELSE
        next_candidate := newest;
    END IF;
END
$fn$;
