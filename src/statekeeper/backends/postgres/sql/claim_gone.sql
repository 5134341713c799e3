-- Migration 23: a creation that finds a head row at 0 and takes it over creates its
-- stream even when that row is deleted between the two.
--
-- sk_append creating a stream inserts its head row ON CONFLICT DO NOTHING, which
-- locks nothing it finds, then takes a row at 0 (a claim a failed write left: no
-- stream) over with an UPDATE. A delete of that row committing between the two (a
-- role removing a claim of what it may write, the audit log's and its namespace's
-- tombstone stream's too since migration 22) left the UPDATE nothing: the creation
-- answered a conflict at head 0, a stream never there
-- (tests/backends/test_postgres_claim_gone.py). Now it inserts the row again, a few
-- times at most, and answers a conflict only when a stream is there. The rest of
-- sk_append is as in migration 21.

-- sk_append of migration 21, the row at 0 gone meanwhile inserted again
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
