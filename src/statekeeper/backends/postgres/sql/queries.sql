-- The statements of the PostgreSQL backend, one per "-- name:" block; {s} is the
-- schema, %s / %(name)s are psycopg parameters (%b: sent in binary). Loaded by queries.py.

-- name: append
SELECT status, a, b, h FROM {s}.sk_append(%s, %s, %s::bigint[], %s::text[], %s::float8[], %s::bytea[], %s::bytea[], %s::text, %s::bigint, %s::float8, %s::bytea, %s::bytea, %s::bytea, %s::boolean, %s::bytea, %s::text, %s::bigint)

-- name: append_batch
SELECT idx, status, a, b, h FROM {s}.sk_append_batch(%b::text[], %b::bigint[], %b::int[], %b::text[], %b::bigint[], %b::float8[], %b::bytea[], %b::bytea[], %b::bigint[], %b::text[], %b::float8[], %b::bytea[], %b::bytea[], %b::bytea[], %b::boolean[], %b::bytea[], %b::text[], %b::bigint[]) ORDER BY idx

-- name: append1
SELECT status, a, b, h FROM {s}.sk_append1(%s, %s, %s::bigint, %s::text, %s::float8, %s::bytea, %s::bytea, %s::text, %s::bigint, %s::float8, %s::bytea, %s::bytea, %s::bytea, %s::boolean, %s::bytea, %s::text, %s::bigint)

-- name: key
SELECT first_seq, last_seq FROM {s}.sk_idempotency WHERE agent_id = %s AND key = %s

-- name: keys
SELECT key, first_seq, last_seq FROM {s}.sk_idempotency WHERE agent_id = %s ORDER BY first_seq

-- name: lease_acquire
-- the token: the stored one plus one, and at least the timeline's floor (its WAL
-- timeline - 1, times 2^40): after a promotion every token is greater than any the
-- old timeline gave, also one whose grant was lost in the failover (see lease_next)
INSERT INTO {s}.sk_leases AS l (agent_id, holder, token, expires_at) VALUES (%(agent)s, %(holder)s, greatest(1, ((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 40)), extract(epoch FROM clock_timestamp()) + %(ttl)s) ON CONFLICT (agent_id) DO UPDATE SET holder = EXCLUDED.holder, token = greatest(l.token + 1, ((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 40)), expires_at = EXCLUDED.expires_at WHERE l.holder IS NULL OR l.holder = EXCLUDED.holder OR l.expires_at <= extract(epoch FROM clock_timestamp()) RETURNING holder, token, expires_at

-- name: lease_renew
UPDATE {s}.sk_leases SET expires_at = extract(epoch FROM clock_timestamp()) + %(ttl)s WHERE agent_id = %(agent)s AND holder = %(holder)s AND token = %(token)s RETURNING holder, token, expires_at

-- name: lease_release
UPDATE {s}.sk_leases SET holder = NULL, expires_at = 0 WHERE agent_id = %(agent)s AND holder = %(holder)s AND token = %(token)s RETURNING token

-- name: lease_release_again
-- lease_release sent again after its reply was lost (the first try may have released
-- it): a row back also for the lease nobody holds whose token is still the one given,
-- released with that token (any grant since would have moved the token on). The
-- SELECT sees the row as it was before the UPDATE, so one row at most comes back.
WITH r AS (UPDATE {s}.sk_leases SET holder = NULL, expires_at = 0 WHERE agent_id = %(agent)s AND holder = %(holder)s AND token = %(token)s RETURNING token) SELECT token FROM r UNION ALL SELECT token FROM {s}.sk_leases WHERE agent_id = %(agent)s AND holder IS NULL AND token = %(token)s

-- name: lease_get
SELECT holder, token, expires_at FROM {s}.sk_leases WHERE agent_id = %(agent)s

-- name: lease_next
-- the token the agent's next grant gives: the stored one plus one, at least the floor
-- of the server's WAL timeline ((timeline - 1) * 2^40; 0 on a server never promoted),
-- and that floor (kept by the backend: read again only when a grant is refused).
-- A standby promoted after its primary granted a token it never received is on the
-- next timeline: its tokens are all greater (the timeline in the WAL file name: read
-- by any role, on the primary only, where every grant runs)
SELECT greatest(coalesce((SELECT token FROM {s}.sk_leases WHERE agent_id = %(agent)s), 0) + 1, f.floor), f.floor FROM (SELECT ((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 40) AS floor) f

-- name: lease_put
-- a grant of append_together (LeaseChange): the token given must be the one
-- lease_next gives; no row back when another holder's lease runs or the token moved on
INSERT INTO {s}.sk_leases AS l (agent_id, holder, token, expires_at) SELECT %(agent)s, %(holder)s, %(token)s, extract(epoch FROM clock_timestamp()) + %(ttl)s WHERE %(token)s::bigint = greatest(coalesce((SELECT token FROM {s}.sk_leases WHERE agent_id = %(agent)s), 0) + 1, ((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 40)) ON CONFLICT (agent_id) DO UPDATE SET holder = EXCLUDED.holder, token = EXCLUDED.token, expires_at = EXCLUDED.expires_at WHERE EXCLUDED.token = greatest(l.token + 1, ((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 40)) AND (l.holder IS NULL OR l.holder = EXCLUDED.holder OR l.expires_at <= extract(epoch FROM clock_timestamp())) RETURNING token

-- name: lease_carry
-- a token carried from another store (Backend.carry_lease_tokens): the row raised to
-- it, nobody holding it; a row already at or above it is left alone
INSERT INTO {s}.sk_leases AS l (agent_id, holder, token, expires_at) SELECT a, NULL, t, 0 FROM unnest(%(agents)s::text[], %(tokens)s::bigint[]) AS u(a, t) ON CONFLICT (agent_id) DO UPDATE SET holder = NULL, token = EXCLUDED.token, expires_at = 0 WHERE l.token < EXCLUDED.token

-- name: lease_list
SELECT agent_id, holder, token, expires_at FROM {s}.sk_leases WHERE agent_id > %(after)s ORDER BY agent_id LIMIT %(limit)s

-- name: rw_lock
SELECT head_seq, head_tag FROM {s}.sk_agents WHERE agent_id = %s FOR UPDATE

-- name: rw_events
UPDATE {s}.sk_events e SET payload = u.payload, checksum = u.checksum FROM unnest(%s::bigint[], %s::bytea[], %s::bytea[]) AS u(seq, payload, checksum) WHERE e.agent_id = %s AND e.seq = u.seq

-- name: rw_snap
INSERT INTO {s}.sk_snapshots (agent_id, seq, ts, payload, checksum) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (agent_id, seq) DO UPDATE SET ts = EXCLUDED.ts, payload = EXCLUDED.payload, checksum = EXCLUDED.checksum

-- name: rw_tag
UPDATE {s}.sk_agents SET head_tag = %s WHERE agent_id = %s

-- name: rw_many_lock
-- rewrite_many, first: the page's head rows locked (in agent order, so two pages never
-- deadlock) before rw_many, in its transaction. rw_many's checks read the stream's base
-- in ITS snapshot: taken after these locks, it sees every prune of the page's agents
-- committed before (a prune holds the head row), and none can commit until the end.
-- The audit log's head last (a batch's order too, migration 20): a governed change
-- (together_locks.py) waiting on another agent's head holds nothing of the log meanwhile;
-- and the log's head waited for at most audit_lock_timeout (sk_lock_heads, migration 24)
SELECT {s}.sk_lock_heads(%(agents)s::text[])

-- name: together_leases
-- append_together with changes, first: the lease rows of its lease changes and fenced
-- appends locked in agent order, before its heads (rw_many_lock), as a batch's fences
-- (migration 17) and a lease change lock leases before heads (together_locks.py).
-- NO KEY UPDATE, not SHARE: a lease change writes its row, and two transactions
-- holding it in SHARE, each then writing it, were a deadlock
SELECT 1 FROM {s}.sk_leases WHERE agent_id = ANY(%(agents)s::text[]) ORDER BY agent_id FOR NO KEY UPDATE

-- name: rw_many
-- rewrite_many, after rw_many_lock in the same transaction: every request's head row
-- (locked) checked to be still the one expected (or, on a retry, already carries the
-- request's new tag), then the events, snapshots and head tags of the fresh ones
-- replaced. Answers the 1-based positions of the requests applied. A request naming
-- an event below the agent's first stored one (pruned), or a snapshot below the seq
-- before it (the stream's base: a prune removed it), at its expected head, refuses the
-- whole page: none applied (the caller raises: Rewrites.rewrite_many; was: the others
-- committed, which a migration's page took for none written).
WITH r AS (
  SELECT * FROM unnest(%(agents)s::text[], %(seqs)s::bigint[], %(tags)s::bytea[], %(new_tags)s::bytea[])
    WITH ORDINALITY AS r(agent_id, seq, tag, new_tag, idx)
), lo AS (
  SELECT v.idx, min(v.seq) AS seq
  FROM unnest(%(ev_idx)s::bigint[], %(ev_seq)s::bigint[]) AS v(idx, seq) GROUP BY v.idx
), slo AS (
  SELECT v.idx, min(v.seq) AS seq
  FROM unnest(%(sn_idx)s::bigint[], %(sn_seq)s::bigint[]) AS v(idx, seq) GROUP BY v.idx
), locked AS (
  SELECT r.idx, a.agent_id, r.new_tag, a.head_tag IS NOT DISTINCT FROM r.tag AS fresh,
    (lo.seq IS NULL OR lo.seq >= f.first) AND (slo.seq IS NULL OR slo.seq + 1 >= f.first)
      AS stored
  FROM {s}.sk_agents a JOIN r ON a.agent_id = r.agent_id LEFT JOIN lo ON lo.idx = r.idx
    LEFT JOIN slo ON slo.idx = r.idx
    CROSS JOIN LATERAL (
      SELECT coalesce(min(e.seq), r.seq + 1) AS first FROM {s}.sk_events e
      WHERE e.agent_id = a.agent_id) f
  WHERE a.head_seq = r.seq
    AND (a.head_tag IS NOT DISTINCT FROM r.tag
         OR (%(retry)s AND r.new_tag IS NOT NULL AND a.head_tag = r.new_tag))
  ORDER BY a.agent_id FOR UPDATE OF a
), hit AS (
  SELECT idx, agent_id, new_tag, fresh FROM locked
  WHERE stored AND NOT EXISTS (SELECT 1 FROM locked x WHERE x.fresh AND NOT x.stored)
), ev AS (
  UPDATE {s}.sk_events e SET payload = v.payload, checksum = v.checksum
  FROM unnest(%(ev_idx)s::bigint[], %(ev_seq)s::bigint[], %(ev_payload)s::bytea[], %(ev_checksum)s::bytea[])
    AS v(idx, seq, payload, checksum)
  JOIN hit h ON h.idx = v.idx AND h.fresh
  WHERE e.agent_id = h.agent_id AND e.seq = v.seq
  RETURNING 1
), sn AS (
  INSERT INTO {s}.sk_snapshots (agent_id, seq, ts, payload, checksum)
  SELECT h.agent_id, v.seq, v.ts, v.payload, v.checksum
  FROM unnest(%(sn_idx)s::bigint[], %(sn_seq)s::bigint[], %(sn_ts)s::float8[], %(sn_payload)s::bytea[], %(sn_checksum)s::bytea[])
    AS v(idx, seq, ts, payload, checksum)
  JOIN hit h ON h.idx = v.idx AND h.fresh
  ON CONFLICT (agent_id, seq) DO UPDATE
     SET ts = EXCLUDED.ts, payload = EXCLUDED.payload, checksum = EXCLUDED.checksum
  RETURNING 1
), tg AS (
  UPDATE {s}.sk_agents a SET head_tag = h.new_tag FROM hit h
  WHERE a.agent_id = h.agent_id AND h.fresh AND h.new_tag IS NOT NULL
  RETURNING 1
)
SELECT idx FROM hit ORDER BY idx

-- name: head
SELECT head_seq FROM {s}.sk_agents WHERE agent_id = %s

-- name: head_many
SELECT agent_id, head_seq FROM {s}.sk_agents WHERE agent_id = ANY(%s::text[])

-- name: head_tag
SELECT head_seq, head_tag FROM {s}.sk_agents WHERE agent_id = %s

-- name: head_tag_many
SELECT agent_id, head_seq, head_tag FROM {s}.sk_agents WHERE agent_id = ANY(%s::text[])

-- name: read
SELECT seq, kind, ts, payload, checksum FROM {s}.sk_events WHERE agent_id = %s AND seq > %s AND seq <= %s ORDER BY seq LIMIT %s

-- name: read_many
SELECT q.i, e.seq, e.kind, e.ts, e.payload, e.checksum FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::bigint[]) WITH ORDINALITY AS q(agent_id, after_seq, to_seq, lim, i) CROSS JOIN LATERAL (SELECT seq, kind, ts, payload, checksum FROM {s}.sk_events WHERE agent_id = q.agent_id AND seq > q.after_seq AND seq <= q.to_seq ORDER BY seq LIMIT q.lim) e ORDER BY q.i, e.seq

-- name: read_latest
WITH snap AS (SELECT seq, ts, payload, checksum FROM {s}.sk_snapshots WHERE agent_id = %s ORDER BY seq DESC LIMIT 1) SELECT seq, NULL::text AS kind, ts, payload, checksum FROM snap UNION ALL SELECT seq, kind, ts, payload, checksum FROM {s}.sk_events WHERE agent_id = %s AND seq > coalesce((SELECT seq FROM snap), 0) ORDER BY 1

-- name: read_state
WITH snap AS (SELECT seq, ts, payload, checksum FROM {s}.sk_snapshots WHERE agent_id = %s ORDER BY seq DESC LIMIT 1) SELECT 0 AS t, head_seq AS seq, NULL::text AS kind, 0::double precision AS ts, head_tag AS payload, NULL::bytea AS checksum FROM {s}.sk_agents WHERE agent_id = %s UNION ALL SELECT 1, seq, NULL, ts, payload, checksum FROM snap UNION ALL SELECT 2, seq, kind, ts, payload, checksum FROM {s}.sk_events WHERE agent_id = %s AND seq > coalesce((SELECT seq FROM snap), 0) ORDER BY 1, 2

-- name: read_latest_many
WITH a AS (SELECT agent_id, head_seq, head_tag FROM {s}.sk_agents WHERE agent_id = ANY(%s) AND head_seq > 0), snap AS (SELECT a.agent_id, s.seq, s.ts, s.payload, s.checksum FROM a CROSS JOIN LATERAL (SELECT seq, ts, payload, checksum FROM {s}.sk_snapshots WHERE agent_id = a.agent_id ORDER BY seq DESC LIMIT 1) s) SELECT 0 AS part, agent_id, head_seq AS seq, NULL::text AS kind, NULL::float8 AS ts, head_tag AS payload, NULL::bytea AS checksum FROM a UNION ALL SELECT 1, agent_id, seq, NULL::text, ts, payload, checksum FROM snap UNION ALL SELECT 2, e.agent_id, e.seq, e.kind, e.ts, e.payload, e.checksum FROM a JOIN {s}.sk_events e ON e.agent_id = a.agent_id AND e.seq <= a.head_seq AND e.seq > coalesce((SELECT snap.seq FROM snap WHERE snap.agent_id = a.agent_id), 0) ORDER BY 2, 1, 3

-- name: seq_at
SELECT max(seq) FROM {s}.sk_events WHERE agent_id = %s AND ts <= %s

-- name: snap_latest
SELECT seq, ts, payload, checksum FROM {s}.sk_snapshots WHERE agent_id = %s AND seq <= %s ORDER BY seq DESC LIMIT 1

-- name: snap_save
INSERT INTO {s}.sk_snapshots AS t (agent_id, seq, ts, payload, checksum) SELECT %s, %s::bigint, %s, %s, %s FROM {s}.sk_agents h WHERE h.agent_id = %s AND %s::bigint BETWEEN 1 AND h.head_seq ON CONFLICT (agent_id, seq) DO UPDATE SET ts = EXCLUDED.ts, payload = EXCLUDED.payload, checksum = EXCLUDED.checksum

-- name: list
SELECT agent_id, head_seq, created_at, updated_at FROM {s}.sk_agents WHERE agent_id > %s ORDER BY agent_id LIMIT %s

-- name: list_all
SELECT agent_id, head_seq, created_at, updated_at FROM {s}.sk_agents ORDER BY agent_id LIMIT %s

-- name: list_before
SELECT agent_id, head_seq, created_at, updated_at FROM {s}.sk_agents WHERE agent_id < %s ORDER BY agent_id DESC LIMIT %s

-- name: list_last
SELECT agent_id, head_seq, created_at, updated_at FROM {s}.sk_agents ORDER BY agent_id DESC LIMIT %s

-- name: list_newest_written
SELECT agent_id, head_seq, created_at, updated_at FROM {s}.sk_agents ORDER BY updated_at DESC, agent_id DESC LIMIT %s

-- name: list_newest_written_after
SELECT agent_id, head_seq, created_at, updated_at FROM {s}.sk_agents WHERE (updated_at, agent_id) < (%s, %s) ORDER BY updated_at DESC, agent_id DESC LIMIT %s

-- name: list_oldest_written
SELECT agent_id, head_seq, created_at, updated_at FROM {s}.sk_agents ORDER BY updated_at, agent_id LIMIT %s

-- name: list_oldest_written_after
SELECT agent_id, head_seq, created_at, updated_at FROM {s}.sk_agents WHERE (updated_at, agent_id) > (%s, %s) ORDER BY updated_at, agent_id LIMIT %s

-- name: read_heads
SELECT e.agent_id, e.seq, e.kind, e.ts, e.payload, e.checksum FROM {s}.sk_agents a JOIN {s}.sk_events e ON e.agent_id = a.agent_id AND e.seq = a.head_seq WHERE a.agent_id = ANY(%s)

-- name: orphaned_events
SELECT e.agent_id, min(e.seq), max(e.seq), count(*) FROM {s}.sk_events e LEFT JOIN {s}.sk_agents a ON a.agent_id = e.agent_id WHERE a.agent_id IS NULL OR e.seq > a.head_seq GROUP BY e.agent_id ORDER BY e.agent_id

-- name: count
SELECT count(*) FROM {s}.sk_agents

-- name: count_prefix
SELECT count(*) FROM {s}.sk_agents WHERE agent_id >= %s AND agent_id < %s

-- name: del_agent
DELETE FROM {s}.sk_agents WHERE agent_id = %s

-- name: absent_claim
-- (absence checks in append_together: a head row of 0 claimed for each agent, in agent
-- order - before any other lock, as a batch claims its new agents: migration 20; was the
-- order given, and two checks given p, q and q, p deadlocked - those claimed removed
-- again by absent_release in the same transaction;
-- a creation of an agent committing meanwhile makes it insert nothing for it, one still
-- to commit is waited for, and one after waits on it until the transaction ends: its
-- events follow what the transaction wrote)
INSERT INTO {s}.sk_agents (agent_id, head_seq, created_at, updated_at)
SELECT u.a, 0, 0, 0 FROM unnest(%s::text[]) AS u(a) ORDER BY u.a COLLATE "C"
ON CONFLICT (agent_id) DO NOTHING RETURNING agent_id

-- name: absent_release
DELETE FROM {s}.sk_agents WHERE agent_id = ANY(%s::text[]) AND head_seq = 0

-- name: absent_heads
SELECT agent_id, head_seq FROM {s}.sk_agents WHERE agent_id = ANY(%s::text[])
ORDER BY agent_id FOR UPDATE

-- name: del_agent_at
DELETE FROM {s}.sk_agents WHERE agent_id = %s AND head_seq = %s

-- name: del_agent_at_sum
-- (and only while its head event is the one read: its checksum, the record's identity)
DELETE FROM {s}.sk_agents a WHERE a.agent_id = %s AND a.head_seq = %s
   AND EXISTS (SELECT 1 FROM {s}.sk_events e
               WHERE e.agent_id = a.agent_id AND e.seq = a.head_seq AND e.checksum = %s)

-- name: rls_applies
-- row-level security (statekeeper.backends.postgres.row_security) binds this role:
-- its policies may have filtered a DELETE or an UPDATE to nothing (see .deletes)
SELECT row_security_active('{s}.sk_agents'::regclass)
   AND to_regprocedure('{s}.sk_allowed(text,integer)') IS NOT NULL

-- name: rls_may_write
SELECT {s}.sk_allowed(%s, 2)

-- name: rls_run_locks
-- the run locks' policies (sql/row_security_runlock.sql) are installed: a run lock is
-- the role's to write when sk_run_lock says so (sk_allowed reaches no run lock)
SELECT to_regprocedure('{s}.sk_run_lock(text,integer)') IS NOT NULL

-- name: rls_may_lock
SELECT {s}.sk_run_lock(%s, 2)

-- name: del_events
DELETE FROM {s}.sk_events WHERE agent_id = %s

-- name: del_snaps
DELETE FROM {s}.sk_snapshots WHERE agent_id = %s

-- name: del_keys
DELETE FROM {s}.sk_idempotency WHERE agent_id = %s

-- name: expire_keys
-- (a durable step's record, key 'step:...', is never expired: Backend.expire_keys)
DELETE FROM {s}.sk_idempotency WHERE created_at < %s AND left(key, 5) <> 'step:'

-- name: expire_agent_keys
DELETE FROM {s}.sk_idempotency WHERE agent_id = %s AND created_at < %s AND left(key, 5) <> 'step:'

-- name: key_rename
-- rekey: a record stored under its new form instead of its old one (Backend.rename_keys;
-- nothing when the new form is stored already: key_drop then drops the old one)
UPDATE {s}.sk_idempotency SET key = %s WHERE agent_id = %s AND key = %s AND NOT EXISTS (SELECT 1 FROM {s}.sk_idempotency WHERE agent_id = %s AND key = %s)

-- name: key_drop
DELETE FROM {s}.sk_idempotency WHERE agent_id = %s AND key = %s

-- name: expired_key_left
-- after expire_keys under row-level security: an expired record still there (readable,
-- not deletable by the role: see .keyexpiry)
SELECT agent_id FROM {s}.sk_idempotency WHERE created_at < %s AND left(key, 5) <> 'step:' LIMIT 1

-- name: count_expired_keys
SELECT count(*) FROM {s}.sk_idempotency WHERE (%s::text IS NULL OR agent_id = %s) AND created_at < %s AND left(key, 5) <> 'step:'

-- name: prune_lock
SELECT head_seq, EXISTS (SELECT 1 FROM {s}.sk_snapshots WHERE agent_id = %s AND seq = %s) FROM {s}.sk_agents WHERE agent_id = %s FOR UPDATE

-- name: prune_head_sum
-- (a prune at a head's identity: its head event's checksum, read under prune_lock)
SELECT checksum FROM {s}.sk_events WHERE agent_id = %s AND seq = %s

-- name: prune_base
-- (a prune dropping snapshots: the stream's first stored event, read under prune_lock:
-- the snapshot at the seq before it is the stream's base, never dropped; a rewrite
-- naming an event not stored: the base its error names)
SELECT min(seq) FROM {s}.sk_events WHERE agent_id = %s

-- name: prune_events
DELETE FROM {s}.sk_events WHERE agent_id = %s AND seq <= %s

-- name: key_keep
INSERT INTO {s}.sk_idempotency (agent_id, key, first_seq, last_seq) VALUES (%s, %s, %s, %s)

-- name: prune_snaps_below
DELETE FROM {s}.sk_snapshots WHERE agent_id = %s AND seq < %s

-- name: prune_snaps
DELETE FROM {s}.sk_snapshots WHERE agent_id = %s AND seq = ANY(%s::bigint[])

-- name: migrations
SELECT version FROM {s}.sk_migrations ORDER BY version

-- name: feed_frontier
SELECT safe, next_candidate, next_holders FROM {s}.sk_feed_frontier(%s, %s::bigint, %s::text[])

-- name: feed_read
SELECT position, agent_id, seq, kind, ts, payload, checksum FROM {s}.sk_events WHERE position > greatest(%s::bigint, (SELECT floor FROM {s}.sk_feed_floor)) AND position <= %s ORDER BY position LIMIT %s

-- name: feed_read_id
-- (feed_read with the feed's id, its newest generation: one statement, one snapshot)
SELECT position, agent_id, seq, kind, ts, payload, checksum, (SELECT name FROM {s}.sk_markers WHERE name LIKE 'feed-id:%%' ORDER BY name DESC LIMIT 1) FROM {s}.sk_events WHERE position > greatest(%s::bigint, (SELECT floor FROM {s}.sk_feed_floor)) AND position <= %s ORDER BY position LIMIT %s

-- name: feed_floor
SELECT floor FROM {s}.sk_feed_floor

-- name: feed_trim
UPDATE {s}.sk_feed_floor SET floor = greatest(floor, %s) RETURNING floor

-- name: feed_floor_over
UPDATE {s}.sk_feed_floor SET floor = greatest(floor, coalesce((SELECT position FROM {s}.sk_events WHERE agent_id = %s AND seq = %s), 0))

-- name: feed_position
SELECT position FROM {s}.sk_events WHERE agent_id = %s AND seq = %s AND position > (SELECT floor FROM {s}.sk_feed_floor)

-- name: feed_handed_out
SELECT CASE WHEN has_sequence_privilege('{s}.sk_feed_seq', 'SELECT,USAGE') THEN pg_sequence_last_value('{s}.sk_feed_seq') END

-- name: feed_trimmed
SELECT count(*) FROM {s}.sk_events WHERE position > (SELECT floor FROM {s}.sk_feed_floor) AND position <= %s

-- name: partitions
SELECT count(*) FROM pg_inherits WHERE inhparent = to_regclass(%s)

-- name: row_security
-- (and whether its policy knows the namespaces' feed tombstone streams: installed by a
-- statekeeper that writes them, sql/row_security.sql; and whether this role reads the
-- audit log's entries: one row security does not bind, or an admin's of every
-- namespace, sk_log_admin's test; and whether it knows the namespaces' forget intents;
-- and whether the role deletes through the delete functions: installed with row
-- security, migration 25, for the roles it gave no DELETE; was: row_security_active,
-- so a BYPASSRLS role given to install_row_security, which took its DELETE too, sent
-- a DELETE, refused)
SELECT relrowsecurity, to_regprocedure(%s) IS NOT NULL,
       NOT row_security_active(to_regclass(%s))
       OR has_table_privilege(current_user, to_regclass(%s), 'UPDATE'),
       to_regprocedure(%s) IS NOT NULL,
       NOT has_table_privilege(current_user, to_regclass(%s), 'DELETE')
       AND to_regprocedure(%s) IS NOT NULL
  FROM pg_class WHERE oid = to_regclass(%s)

-- name: feed_frontier_lsn
SELECT safe, next_candidate, next_holders, (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint FROM {s}.sk_feed_frontier(%s, %s::bigint, %s::text[])

-- name: in_recovery
SELECT pg_is_in_recovery()

-- name: renamed
-- one of statekeeper's functions (sk_...) of the schema whose body names statekeeper's
-- tables in no schema of this name: the schema was renamed (ALTER SCHEMA ... RENAME), and
-- the function still writes to the old name's tables. Its name, and the name it uses.
SELECT p.proname, (regexp_match(p.prosrc, '("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)[.]sk_'))[1] FROM pg_proc p WHERE p.pronamespace = to_regnamespace(%s) AND left(p.proname, 3) = 'sk_' AND strpos(p.prosrc, '.sk_') > 0 AND strpos(p.prosrc, %s) = 0 LIMIT 1

-- name: marker_read
SELECT 1 FROM {s}.sk_markers WHERE name = %s

-- name: marker_set
INSERT INTO {s}.sk_markers (name) VALUES (%s) ON CONFLICT (name) DO NOTHING

-- name: feed_id_lock
SELECT pg_advisory_xact_lock(hashtext(%s))

-- name: feed_id_read
SELECT name FROM {s}.sk_markers WHERE name LIKE %s ORDER BY name DESC LIMIT 1
