-- Migration 17: a batch not set-based (a fence, a snapshot, a new stream: sk_append
-- per request, in the batch's order) first locks, in agent order, the lease rows its
-- fences check (FOR SHARE, as sk_append does), then the heads it names (FOR NO KEY
-- UPDATE, as a set-based batch does since migration 16 and a page of rewrites does,
-- rw_many_lock: ORDER BY agent_id). Its requests took each lock as they came: a batch
-- [b, a] holding b and waiting for a, while a rewrite page [a, b] (or a set-based batch
-- over a and b) held a and waited for b, was a deadlock; so was a batch holding a head
-- and waiting for a fence's lease that a transaction granting it (append_together's
-- LeaseChange) held while it waited for that head. Leases still before heads: a
-- fenced sk_append's order, and a lease change's. The requests still run in the batch's
-- order (not sorted: their events take feed positions in that order, which the
-- conformance suite pins, testing/feed.py); a new stream has no head to lock first.
-- Otherwise as migration 16.
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
BEGIN
    -- the common batch (no fence or snapshot, every stream existing and named once):
    -- a few statements for all of it, not one function call per append
    IF m > 1 AND 0 < ALL (p_expected)
       AND array_remove(p_fence_holders, NULL) = '{{}}'
       AND array_remove(p_snap_seq, NULL) = '{{}}'
       AND (SELECT count(DISTINCT x) FROM unnest(p_agents) x) = m THEN
        -- every head named, locked in agent order before any is written (the order
        -- of rw_many_lock)
        PERFORM FROM {s}.sk_agents t WHERE t.agent_id = ANY (p_agents)
         ORDER BY t.agent_id FOR NO KEY UPDATE;
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
        PERFORM FROM {s}.sk_leases l
          WHERE l.agent_id = ANY (SELECT p_agents[f] FROM generate_subscripts(p_agents, 1) f
                                   WHERE p_fence_holders[f] IS NOT NULL)
          ORDER BY l.agent_id FOR SHARE;
        PERFORM FROM {s}.sk_agents t WHERE t.agent_id = ANY (p_agents)
          ORDER BY t.agent_id FOR NO KEY UPDATE;
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
