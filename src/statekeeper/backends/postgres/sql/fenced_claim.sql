-- Migration 21: a fenced append creating a stream claims its head row before it reads
-- its lease, the order of every write since migration 20 (claims, then leases, then
-- heads, each in agent order).
--
-- sk_append read the fence's lease FOR SHARE first and inserted the new head row
-- after; an append_together with a change (together_locks.py) creating the same agent
-- under the same lease claims the head row first and then locks the lease FOR NO KEY
-- UPDATE: the append held the lease and waited on the claim, the other transaction
-- held the claim and waited on the lease, a deadlock
-- (tests/backends/test_postgres_fenced_creation_order.py). Now a fenced creation
-- inserts its head row at 0 first (a claim: another creation of the agent waits on
-- this transaction until it ends), then checks its fence and its key - either refusing
-- removes the claim again - and takes the row over. An unfenced append reads no lease
-- and is as before, one statement for its head.

-- sk_append of migration 20, a fenced creation's claim first
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
            -- this transaction's release left (row security keeps a role that is not a
            -- log admin from deleting the audit log's row or a namespace's tombstones':
            -- policy sk_delete); the creation takes it over
            UPDATE {s}.sk_agents
               SET head_seq = p_seqs[n], created_at = p_ts[1], updated_at = p_ts[n],
                   head_tag = p_head_tag
             WHERE agent_id = p_agent AND head_seq = 0;
            GET DIAGNOSTICS rc = ROW_COUNT;
        END IF;
    ELSE
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
