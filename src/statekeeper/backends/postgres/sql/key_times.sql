-- Migration 12: when each idempotency record was made (epoch seconds), what retention's
-- keys_ttl expires (Backend.expire_keys): the timestamp of the first event of the append
-- that made it (the store's clock at the save), as on every engine, so that a record
-- copied with its events (a restore, a tier move) keeps its time. The append functions
-- are those of migrations 6 (sk_append) and 11 (sk_append_batch) with the time written;
-- every other insert of a record (a compacted stream's kept records, whose appends are
-- gone) takes the column's default, the server's clock at its transaction. Records made
-- before this migration get their append's first event's timestamp, or (that event
-- compacted away) the time of the migration.
ALTER TABLE {s}.sk_idempotency
    ADD COLUMN IF NOT EXISTS created_at double precision NOT NULL
    DEFAULT extract(epoch FROM transaction_timestamp())::double precision;
UPDATE {s}.sk_idempotency k SET created_at = e.ts
  FROM {s}.sk_events e
 WHERE e.agent_id = k.agent_id AND e.seq = k.first_seq;

-- sk_append of migration 6, the record's time written
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
BEGIN
    -- status 0: appended a..b; 1: duplicate key, first append was a..b; 2: conflict,
    -- head a; 3: the fence is not the agent's current lease (a = its token, h = holder)
    IF p_fence_holder IS NOT NULL THEN
        SELECT l.holder, l.token INTO h, cur_token FROM {s}.sk_leases l
         WHERE l.agent_id = p_agent FOR SHARE;
        IF h IS NULL OR h <> p_fence_holder OR cur_token <> p_fence_token THEN
            status := 3; a := coalesce(cur_token, 0); b := 0;
            RETURN;
        END IF;
        h := NULL;
    END IF;
    IF p_key IS NOT NULL THEN
        SELECT k.first_seq, k.last_seq INTO a, b FROM {s}.sk_idempotency k
         WHERE k.agent_id = p_agent AND k.key = p_key;
        IF FOUND THEN status := 1; RETURN; END IF;
    END IF;
    IF p_expected = 0 THEN
        INSERT INTO {s}.sk_agents AS t (agent_id, head_seq, created_at, updated_at, head_tag)
        VALUES (p_agent, p_seqs[n], p_ts[1], p_ts[n], p_head_tag)
        ON CONFLICT (agent_id) DO NOTHING;
    ELSE
        UPDATE {s}.sk_agents SET head_seq = p_seqs[n], updated_at = p_ts[n], head_tag = p_head_tag
         WHERE agent_id = p_agent AND head_seq = p_expected
           AND (NOT p_check_tag OR head_tag IS NOT DISTINCT FROM p_expected_tag);
    END IF;
    GET DIAGNOSTICS rc = ROW_COUNT;
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

-- sk_append_batch of migration 11, the records' times written
CREATE OR REPLACE FUNCTION {s}.sk_append_batch(
    p_agents text[], p_expected bigint[], p_counts int[], p_keys text[],
    p_snap_seq bigint[], p_snap_ts float8[], p_snap_payload bytea[], p_snap_checksum bytea[],
    p_seqs bigint[], p_kinds text[], p_ts float8[], p_payloads bytea[], p_checksums bytea[],
    p_head_tags bytea[], p_check_tags boolean[], p_expected_tags bytea[],
    p_fence_holders text[], p_fence_tokens bigint[])
RETURNS TABLE (idx int, status int, a bigint, b bigint, h text)
LANGUAGE plpgsql AS $fn$
DECLARE
    off int := 0;
    n int;
    r record;
    m int := cardinality(p_agents);
    keyed boolean;
    lasts int[];
    owners text[];
    ok int[];
BEGIN
    -- the common batch (no fence or snapshot, every stream existing and named once):
    -- a few statements for all of it, not one function call per append
    IF m > 1 AND 0 < ALL (p_expected)
       AND array_remove(p_fence_holders, NULL) = '{{}}'
       AND array_remove(p_snap_seq, NULL) = '{{}}'
       AND (SELECT count(DISTINCT x) FROM unnest(p_agents) x) = m THEN
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
                SELECT i::int AS i, p_agents[i] AS agent, p_expected[i] AS expected,
                       p_seqs[lasts[i]] AS last_seq, p_ts[lasts[i]] AS last_ts,
                       p_head_tags[i] AS tag, p_check_tags[i] AS chk,
                       p_expected_tags[i] AS etag
                  FROM generate_subscripts(p_agents, 1) AS i
                 WHERE p_keys[i] IS NULL
                    OR NOT EXISTS (SELECT 1 FROM {s}.sk_idempotency k
                                    WHERE k.agent_id = p_agents[i] AND k.key = p_keys[i])
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
                SELECT i::int AS i, p_agents[i] AS agent, p_expected[i] AS expected,
                       p_seqs[lasts[i]] AS last_seq, p_ts[lasts[i]] AS last_ts,
                       p_head_tags[i] AS tag, p_check_tags[i] AS chk,
                       p_expected_tags[i] AS etag
                  FROM generate_subscripts(p_agents, 1) AS i
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
              FROM generate_subscripts(p_agents, 1) AS i
              LEFT JOIN LATERAL (
                  SELECT k.first_seq, k.last_seq FROM {s}.sk_idempotency k
                   WHERE p_keys[i] IS NOT NULL AND NOT (i = ANY (ok))
                     AND k.agent_id = p_agents[i] AND k.key = p_keys[i]) d ON true;
        RETURN;
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
