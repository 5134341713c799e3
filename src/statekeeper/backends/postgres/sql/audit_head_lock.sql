-- Migration 24: a governed write waits for the audit log's head row a bounded time.
--
-- Under row-level security every role reads the log's head row (a writer chains on its
-- seq and tag) and may update it (each governed write moves it forward), so any role, a
-- tenant's included, could lock it: SELECT ... FOR UPDATE (FOR NO KEY UPDATE, FOR
-- SHARE) in a transaction kept open, or its own governed append left uncommitted. Row
-- security cannot forbid a lock on a row the role may read, and every governed write of
-- the store waited on that transaction for as long as it stayed open
-- (tests/governance/test_postgres_row_security_audit_head_lock.py). Now every lock of
-- that row a write takes (sk_append, sk_append_batch, sk_lock_heads: a governed
-- change's heads, queries.sql rw_many_lock) goes through sk_audit_head_lock, which
-- waits at most the session's statekeeper.audit_lock_timeout (milliseconds; the
-- backend's audit_lock_timeout sets it on each connection; 0: no bound; unset: 10 s)
-- and fails with lock_not_available (55P03): the write is rolled back, nothing of it
-- stored, and the backend raises AuditLogLocked naming the cause. The row is locked
-- FOR NO KEY UPDATE (what its UPDATE takes anyway), so a FOR KEY SHARE lock holds up
-- nothing. The lock order is as before (migration 20): the other heads in agent order,
-- then the log's.
--
-- And the head rows at 0 (claims: migration 20) that a write committed before
-- migration 22 (row security then refused a role deleting the audit log's claim, or a
-- namespace's tombstones') are removed: no event, no snapshot, no lease or idempotency
-- record names the agent. A claim a transaction holds now is not touched (SKIP LOCKED).

-- the log's head row locked for a write, a bounded wait (the SET clause keeps the
-- timeout to this call: the rest of the transaction waits as the session says)
CREATE OR REPLACE FUNCTION {s}.sk_audit_head_lock() RETURNS void
LANGUAGE plpgsql SET lock_timeout = '10s' AS $fn$
DECLARE
    wait text := pg_catalog.current_setting('statekeeper.audit_lock_timeout', true);
BEGIN
    IF wait IS NOT NULL AND wait <> '' THEN
        PERFORM pg_catalog.set_config('lock_timeout', wait, true);
    END IF;
    PERFORM FROM {s}.sk_agents t WHERE t.agent_id = chr(1) || 'sk-audit/log'
       FOR NO KEY UPDATE;
END
$fn$;

-- a governed change's heads (queries.sql rw_many_lock, a page of rewrites too): every
-- other head in agent order, then the log's, its wait bounded
CREATE OR REPLACE FUNCTION {s}.sk_lock_heads(p_agents text[]) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM FROM {s}.sk_agents t WHERE t.agent_id = ANY (p_agents)
       AND t.agent_id <> chr(1) || 'sk-audit/log'
     ORDER BY t.agent_id FOR UPDATE;
    IF chr(1) || 'sk-audit/log' = ANY (p_agents) THEN
        PERFORM {s}.sk_audit_head_lock();
    END IF;
END
$fn$;

-- sk_append of migration 23, the log's head locked by sk_audit_head_lock first
CREATE OR REPLACE FUNCTION {s}.sk_append(
    p_agent text, p_expected bigint, p_seqs bigint[], p_kinds text[], p_ts float8[],
    p_payloads bytea[], p_checksums bytea[], p_key text,
    p_snap_seq bigint, p_snap_ts float8, p_snap_payload bytea, p_snap_checksum bytea,
    p_head_tag bytea, p_check_tag boolean, p_expected_tag bytea,
    p_fence_holder text, p_fence_token bigint,
    OUT status int, OUT a bigint, OUT b bigint, OUT h text)
LANGUAGE plpgsql AS $fn$
DECLARE
    n  int := cardinality(p_seqs);
    rc bigint;
    cur_token bigint;
    claimed boolean := false;
    again int := 0;
BEGIN
    -- status 0: appended a..b; 1: duplicate key, first append was a..b; 2: conflict,
    -- head a; 3: the fence is not the agent's current lease (a = its token, h = holder)
    IF p_fence_holder IS NOT NULL THEN
        IF p_expected = 0 THEN
            -- the claim of the new head row, before the lease (migration 21)
            INSERT INTO {s}.sk_agents (agent_id, head_seq, created_at, updated_at)
            VALUES (p_agent, 0, 0, 0)
            ON CONFLICT (agent_id) DO NOTHING;
            GET DIAGNOSTICS rc = ROW_COUNT;
            claimed := rc > 0;
        END IF;
        SELECT l.holder, l.token INTO h, cur_token FROM {s}.sk_leases l
         WHERE l.agent_id = p_agent FOR SHARE;
        IF h IS NULL OR h <> p_fence_holder OR cur_token <> p_fence_token THEN
            IF claimed THEN
                DELETE FROM {s}.sk_agents WHERE agent_id = p_agent AND head_seq = 0;
            END IF;
            status := 3; a := coalesce(cur_token, 0); b := 0;
            RETURN;
        END IF;
        h := NULL;
    END IF;
    IF p_key IS NOT NULL THEN
        SELECT k.first_seq, k.last_seq INTO a, b FROM {s}.sk_idempotency k
         WHERE k.agent_id = p_agent AND k.key = p_key;
        IF FOUND THEN
            IF claimed THEN
                DELETE FROM {s}.sk_agents WHERE agent_id = p_agent AND head_seq = 0;
            END IF;
            status := 1; RETURN;
        END IF;
    END IF;
    IF p_expected = 0 THEN
        rc := 0;
        IF NOT claimed THEN
            INSERT INTO {s}.sk_agents AS t (agent_id, head_seq, created_at, updated_at, head_tag)
            VALUES (p_agent, p_seqs[n], p_ts[1], p_ts[n], p_head_tag)
            ON CONFLICT (agent_id) DO NOTHING;
            GET DIAGNOSTICS rc = ROW_COUNT;
        END IF;
        IF rc = 0 THEN
            -- a claim's head row (at 0): this call's own (a fenced creation's), or one
            -- a failed write left; the creation takes it over
            UPDATE {s}.sk_agents
               SET head_seq = p_seqs[n], created_at = p_ts[1], updated_at = p_ts[n],
                   head_tag = p_head_tag
             WHERE agent_id = p_agent AND head_seq = 0;
            GET DIAGNOSTICS rc = ROW_COUNT;
        END IF;
        -- (migration 23) a row at 0 found by the insert and deleted before the UPDATE
        -- (the insert does not lock what it finds): no stream there, so the row is
        -- inserted again, a few times at most (was: a conflict at head 0); a stream
        -- there (its head past 0) is a conflict, as before
        IF rc = 0 AND NOT claimed THEN
            WHILE again < 3
                  AND NOT EXISTS (SELECT 1 FROM {s}.sk_agents t
                                   WHERE t.agent_id = p_agent AND t.head_seq <> 0) LOOP
                again := again + 1;
                INSERT INTO {s}.sk_agents AS t (agent_id, head_seq, created_at, updated_at,
                                                head_tag)
                VALUES (p_agent, p_seqs[n], p_ts[1], p_ts[n], p_head_tag)
                ON CONFLICT (agent_id) DO NOTHING;
                GET DIAGNOSTICS rc = ROW_COUNT;
                IF rc = 0 THEN
                    UPDATE {s}.sk_agents
                       SET head_seq = p_seqs[n], created_at = p_ts[1], updated_at = p_ts[n],
                           head_tag = p_head_tag
                     WHERE agent_id = p_agent AND head_seq = 0;
                    GET DIAGNOSTICS rc = ROW_COUNT;
                END IF;
                EXIT WHEN rc > 0;
            END LOOP;
        END IF;
    ELSE
        IF p_agent = chr(1) || 'sk-audit/log' THEN
            PERFORM {s}.sk_audit_head_lock();  -- (migration 24) its wait bounded
        END IF;
        UPDATE {s}.sk_agents SET head_seq = p_seqs[n], updated_at = p_ts[n], head_tag = p_head_tag
         WHERE agent_id = p_agent AND head_seq = p_expected
           AND (NOT p_check_tag OR head_tag IS NOT DISTINCT FROM p_expected_tag);
        GET DIAGNOSTICS rc = ROW_COUNT;
    END IF;
    IF rc = 0 THEN
        -- lost the race: a concurrent append with the same key counts as a duplicate
        IF p_key IS NOT NULL THEN
            SELECT k.first_seq, k.last_seq INTO a, b FROM {s}.sk_idempotency k
             WHERE k.agent_id = p_agent AND k.key = p_key;
            IF FOUND THEN status := 1; RETURN; END IF;
        END IF;
        SELECT t.head_seq INTO a FROM {s}.sk_agents t WHERE t.agent_id = p_agent;
        status := 2; a := coalesce(a, 0); b := 0;
        RETURN;
    END IF;
    INSERT INTO {s}.sk_events (agent_id, seq, kind, ts, payload, checksum)
    SELECT p_agent, u.seq, u.kind, u.ts, u.payload, u.checksum
      FROM unnest(p_seqs, p_kinds, p_ts, p_payloads, p_checksums)
        AS u(seq, kind, ts, payload, checksum);
    IF p_key IS NOT NULL THEN
        INSERT INTO {s}.sk_idempotency (agent_id, key, first_seq, last_seq, created_at)
        VALUES (p_agent, p_key, p_seqs[1], p_seqs[n], p_ts[1]);
    END IF;
    IF p_snap_seq IS NOT NULL THEN
        INSERT INTO {s}.sk_snapshots (agent_id, seq, ts, payload, checksum)
        VALUES (p_agent, p_snap_seq, p_snap_ts, p_snap_payload, p_snap_checksum)
        ON CONFLICT (agent_id, seq) DO UPDATE
           SET ts = EXCLUDED.ts, payload = EXCLUDED.payload, checksum = EXCLUDED.checksum;
    END IF;
    status := 0; a := p_seqs[1]; b := p_seqs[n];
END
$fn$;

-- sk_append_batch of migration 20, the log's head locked by sk_audit_head_lock
CREATE OR REPLACE FUNCTION {s}.sk_append_batch(
    p_agents text[], p_expected bigint[], p_counts int[], p_keys text[],
    p_snap_seq bigint[], p_snap_ts float8[], p_snap_payload bytea[], p_snap_checksum bytea[],
    p_seqs bigint[], p_kinds text[], p_ts float8[], p_payloads bytea[], p_checksums bytea[],
    p_head_tags bytea[], p_check_tags boolean[], p_expected_tags bytea[],
    p_fence_holders text[], p_fence_tokens bigint[])
RETURNS TABLE (idx int, status int, a bigint, b bigint, h text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $fn$
DECLARE
    off int := 0;
    n int;
    r record;
    m int := cardinality(p_agents);
    keyed boolean;
    lasts int[];
    owners text[];
    ok int[];
    claimed text[];
BEGIN
    -- the common batch (no fence or snapshot, every stream existing and named once):
    -- a few statements for all of it, not one function call per append
    IF m > 1 AND 0 < ALL (p_expected)
       AND array_remove(p_fence_holders, NULL) = '{{}}'
       AND array_remove(p_snap_seq, NULL) = '{{}}'
       AND (SELECT count(DISTINCT x) FROM unnest(p_agents) x) = m THEN
        -- every head named, locked in agent order (the audit log's last) before any
        -- is written (the order of rw_many_lock)
        PERFORM FROM {s}.sk_agents t WHERE t.agent_id = ANY (p_agents)
           AND t.agent_id <> chr(1) || 'sk-audit/log'
         ORDER BY t.agent_id FOR NO KEY UPDATE;
        IF chr(1) || 'sk-audit/log' = ANY (p_agents) THEN
            PERFORM {s}.sk_audit_head_lock();
        END IF;
        keyed := array_remove(p_keys, NULL) <> '{{}}';
        FOR i IN 1 .. m LOOP
            off := off + p_counts[i];
            lasts[i] := off;
            FOR j IN 1 .. p_counts[i] LOOP
                owners[off - p_counts[i] + j] := p_agents[i];
            END LOOP;
        END LOOP;
        -- the heads' compare-and-set; with keys, a request whose key is stored is a
        -- duplicate and its head is not touched. (Two statements, not one with a
        -- "keyed" flag in it: a flag folded away by a custom plan would keep the
        -- planner re-planning the statement on every call.)
        IF keyed THEN
            WITH u AS (
                SELECT x.i::int AS i, x.agent, p_expected[x.i] AS expected,
                       p_seqs[lasts[x.i]] AS last_seq, p_ts[lasts[x.i]] AS last_ts,
                       p_head_tags[x.i] AS tag, p_check_tags[x.i] AS chk,
                       p_expected_tags[x.i] AS etag
                  FROM unnest(p_agents) WITH ORDINALITY AS x(agent, i)
                 WHERE NOT EXISTS (SELECT 1 FROM {s}.sk_idempotency k
                                    WHERE k.agent_id = x.agent AND k.key = p_keys[x.i])
            ), upd AS (
                UPDATE {s}.sk_agents t
                   SET head_seq = u.last_seq, updated_at = u.last_ts, head_tag = u.tag
                  FROM u
                 WHERE t.agent_id = u.agent AND t.head_seq = u.expected
                   AND (NOT u.chk OR t.head_tag IS NOT DISTINCT FROM u.etag)
                RETURNING u.i
            )
            SELECT coalesce(array_agg(upd.i), '{{}}') INTO ok FROM upd;
        ELSE
            WITH u AS (
                SELECT x.i::int AS i, x.agent, p_expected[x.i] AS expected,
                       p_seqs[lasts[x.i]] AS last_seq, p_ts[lasts[x.i]] AS last_ts,
                       p_head_tags[x.i] AS tag, p_check_tags[x.i] AS chk,
                       p_expected_tags[x.i] AS etag
                  FROM unnest(p_agents) WITH ORDINALITY AS x(agent, i)
            ), upd AS (
                UPDATE {s}.sk_agents t
                   SET head_seq = u.last_seq, updated_at = u.last_ts, head_tag = u.tag
                  FROM u
                 WHERE t.agent_id = u.agent AND t.head_seq = u.expected
                   AND (NOT u.chk OR t.head_tag IS NOT DISTINCT FROM u.etag)
                RETURNING u.i
            )
            SELECT coalesce(array_agg(upd.i), '{{}}') INTO ok FROM upd;
        END IF;
        IF cardinality(ok) = m THEN
            INSERT INTO {s}.sk_events (agent_id, seq, kind, ts, payload, checksum)
            SELECT u.agent, u.seq, u.kind, u.ts, u.payload, u.checksum
              FROM unnest(owners, p_seqs, p_kinds, p_ts, p_payloads, p_checksums)
                AS u(agent, seq, kind, ts, payload, checksum);
        ELSIF cardinality(ok) > 0 THEN
            INSERT INTO {s}.sk_events (agent_id, seq, kind, ts, payload, checksum)
            SELECT u.agent, u.seq, u.kind, u.ts, u.payload, u.checksum
              FROM unnest(owners, p_seqs, p_kinds, p_ts, p_payloads, p_checksums)
                AS u(agent, seq, kind, ts, payload, checksum)
             WHERE u.agent = ANY (SELECT p_agents[k] FROM unnest(ok) k);
        END IF;
        IF keyed AND cardinality(ok) > 0 THEN
            INSERT INTO {s}.sk_idempotency (agent_id, key, first_seq, last_seq, created_at)
            SELECT p_agents[k], p_keys[k], p_seqs[lasts[k] - p_counts[k] + 1], p_seqs[lasts[k]],
                   p_ts[lasts[k] - p_counts[k] + 1]
              FROM unnest(ok) k
             WHERE p_keys[k] IS NOT NULL;
        END IF;
        IF cardinality(ok) = m THEN
            RETURN QUERY
                SELECT i::int, 0, p_seqs[lasts[i] - p_counts[i] + 1], p_seqs[lasts[i]], NULL::text
                  FROM generate_subscripts(p_agents, 1) AS i;
            RETURN;
        END IF;
        -- not written: a stored key (before the UPDATE, or committed by the append
        -- that moved the head first) is a duplicate, anything else a conflict
        RETURN QUERY
            SELECT i::int,
                   CASE WHEN i = ANY (ok) THEN 0 WHEN d.first_seq IS NOT NULL THEN 1 ELSE 2 END,
                   CASE WHEN i = ANY (ok) THEN p_seqs[lasts[i] - p_counts[i] + 1]
                        WHEN d.first_seq IS NOT NULL THEN d.first_seq
                        ELSE coalesce((SELECT t.head_seq FROM {s}.sk_agents t
                                        WHERE t.agent_id = p_agents[i]), 0) END,
                   CASE WHEN i = ANY (ok) THEN p_seqs[lasts[i]]
                        WHEN d.first_seq IS NOT NULL THEN d.last_seq ELSE 0 END,
                   NULL::text
              FROM unnest(p_agents) WITH ORDINALITY AS x(agent, i)
              LEFT JOIN LATERAL (
                  SELECT k.first_seq, k.last_seq FROM {s}.sk_idempotency k
                   WHERE p_keys[i] IS NOT NULL AND NOT (i = ANY (ok))
                     AND k.agent_id = p_agents[i] AND k.key = p_keys[i]) d ON true;
        RETURN;
    END IF;
    IF m > 1 THEN
        -- the new agents' head rows claimed first, in agent order: inserted at 0 and
        -- removed again, so another transaction's creation of one waits on this one
        -- until it ends (as an absence check's claim: queries.sql, absent_claim)
        WITH c AS (
            INSERT INTO {s}.sk_agents (agent_id, head_seq, created_at, updated_at)
            SELECT x.agent, 0, 0, 0
              FROM (SELECT DISTINCT p_agents[i] AS agent
                      FROM generate_subscripts(p_agents, 1) AS i
                     WHERE p_expected[i] = 0) AS x
             ORDER BY x.agent COLLATE "C"
            ON CONFLICT (agent_id) DO NOTHING RETURNING agent_id
        )
        SELECT array_agg(c.agent_id) INTO claimed FROM c;
        IF claimed IS NOT NULL THEN
            DELETE FROM {s}.sk_agents t WHERE t.agent_id = ANY (claimed) AND t.head_seq = 0;
        END IF;
        PERFORM FROM {s}.sk_leases l
          WHERE l.agent_id = ANY (SELECT p_agents[f] FROM generate_subscripts(p_agents, 1) f
                                   WHERE p_fence_holders[f] IS NOT NULL)
          ORDER BY l.agent_id FOR SHARE;
        PERFORM FROM {s}.sk_agents t WHERE t.agent_id = ANY (p_agents)
            AND t.agent_id <> chr(1) || 'sk-audit/log'
          ORDER BY t.agent_id FOR NO KEY UPDATE;
        IF chr(1) || 'sk-audit/log' = ANY (p_agents) THEN
            PERFORM {s}.sk_audit_head_lock();
        END IF;
    END IF;
    FOR i IN 1 .. m LOOP
        n := p_counts[i];
        SELECT * INTO r FROM {s}.sk_append(p_agents[i], p_expected[i],
            p_seqs[off + 1 : off + n], p_kinds[off + 1 : off + n], p_ts[off + 1 : off + n],
            p_payloads[off + 1 : off + n], p_checksums[off + 1 : off + n], p_keys[i],
            p_snap_seq[i], p_snap_ts[i], p_snap_payload[i], p_snap_checksum[i],
            p_head_tags[i], p_check_tags[i], p_expected_tags[i],
            p_fence_holders[i], p_fence_tokens[i]);
        idx := i; status := r.status; a := r.a; b := r.b; h := r.h;
        RETURN NEXT;
        off := off + n;
    END LOOP;
END
$fn$;

-- the claims left before migration 22: head rows at 0 of no stream, none held now
DELETE FROM {s}.sk_agents a
 WHERE a.head_seq = 0
   AND a.agent_id IN (SELECT c.agent_id FROM {s}.sk_agents c WHERE c.head_seq = 0
                       FOR UPDATE SKIP LOCKED)
   AND NOT EXISTS (SELECT 1 FROM {s}.sk_events e WHERE e.agent_id = a.agent_id)
   AND NOT EXISTS (SELECT 1 FROM {s}.sk_snapshots p WHERE p.agent_id = a.agent_id)
   AND NOT EXISTS (SELECT 1 FROM {s}.sk_leases l WHERE l.agent_id = a.agent_id)
   AND NOT EXISTS (SELECT 1 FROM {s}.sk_idempotency k WHERE k.agent_id = a.agent_id);
