-- Row-level security, the change feed's part (statekeeper.backends.postgres.row_security).
-- The feed's events are rows of sk_events (their position is a column), so the policies
-- on sk_events already give each role only the events of namespaces it may read. What
-- is left is the feed's floor (sk_feed_floor: trimming the feed, for every subscriber):
-- readable by every role, changed only by a role whose principal is admin of every
-- namespace ('**'), as the store itself requires for trim_feed.

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
