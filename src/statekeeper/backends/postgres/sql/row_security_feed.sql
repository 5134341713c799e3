-- Row-level security, the change feed's part (statekeeper.backends.postgres.row_security).
-- The feed's events are rows of sk_events (their position is a column), so the policies
-- on sk_events already give each role only the events of namespaces it may read. What
-- is left is the feed's floor (sk_feed_floor: trimming the feed, for every subscriber):
-- readable by every role, changed only by a role whose principal is admin of every
-- namespace ('**'), as the store itself requires for trim_feed.

-- name: mark
-- the appends' feed lock (sql/feed.sql), its calls named in pg_catalog: the trigger runs
-- in the session of the role that appends, with its search_path, and a role's own
-- pg_advisory_xact_lock_shared found first (a no-op) would let its appends commit
-- behind the feed's safe frontier: their events passed over by every subscriber. Its
-- wait is bounded (migration 25): any role may take the lock exclusively
-- (pg_advisory_xact_lock is PUBLIC's; only a superuser could revoke it), and every
-- insert of events of the store waited on that role's transaction; now at most the
-- session's statekeeper.audit_lock_timeout (milliseconds, set by the backend in each
-- governed transaction; 0: no bound; unset: 10 s), then lock_not_available (55P03),
-- raised by the backend as FeedLocked. (The SET clause keeps the timeout to the call.)
CREATE OR REPLACE FUNCTION {s}.sk_feed_mark() RETURNS trigger
LANGUAGE plpgsql SET lock_timeout = '10s' AS $fn$
DECLARE
    wait text := pg_catalog.current_setting('statekeeper.audit_lock_timeout', true);
BEGIN
    IF wait IS NOT NULL AND wait <> '' THEN
        PERFORM pg_catalog.set_config('lock_timeout', wait, true);
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(23117, pg_catalog.hashtext(
        'statekeeper-feed:' OPERATOR(pg_catalog.||) TG_TABLE_SCHEMA));
    RETURN NULL;
END
$fn$;

-- name: setup
ALTER TABLE {s}.sk_feed_floor ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS sk_read ON {s}.sk_feed_floor;
CREATE POLICY sk_read ON {s}.sk_feed_floor FOR SELECT USING (true);
DROP POLICY IF EXISTS sk_trim ON {s}.sk_feed_floor;
CREATE POLICY sk_trim ON {s}.sk_feed_floor FOR UPDATE USING (true) WITH CHECK (true);

-- name: reader
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON {s}.sk_feed_floor FROM {r};

-- name: trimmer
GRANT SELECT, UPDATE ON {s}.sk_feed_floor TO {r};
REVOKE INSERT, DELETE, TRUNCATE ON {s}.sk_feed_floor FROM {r};
