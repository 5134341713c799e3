-- Migration 13: the change feed's trigger fires in every session. An ordinary trigger
-- does not fire in a session with session_replication_role = replica (set on a role or
-- in a URL's options, as bulk loads and replication tools do): an append made there
-- took no shared advisory lock, the frontier (sk_feed_frontier) could not see it in
-- flight, and a subscriber passed its position before it committed, for good.
ALTER TABLE {s}.sk_events ENABLE ALWAYS TRIGGER sk_feed_mark;
