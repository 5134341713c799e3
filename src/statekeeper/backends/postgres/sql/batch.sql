-- Migration 10: sk_append_batch writes the common group-commit batch set-based. When
-- no request has a fence, an idempotency key or a snapshot, every stream already exists
-- (expected seq > 0) and no stream is named twice, the batch is one UPDATE of all its
-- heads (the same compare-and-set as sk_append: seq and, with p_check_tag, the tag)
-- and one INSERT of the events of the heads it moved, instead of one sk_append call per
-- request (each with its own UPDATE, INSERT and feed trigger). A request whose head did
-- not match gets status 2 and the stored head, as from sk_append. Any other batch goes
-- request by request through sk_append, as before.
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
    lasts int[];
    owners text[];
    ok int[];
BEGIN
    -- the common batch (no fence, key or snapshot, every stream existing and named
    -- once): a few statements for all of it, not one function call per append
    IF m > 1 AND 0 < ALL (p_expected)
       AND array_remove(p_fence_holders, NULL) = '{{}}'
       AND array_remove(p_keys, NULL) = '{{}}' AND array_remove(p_snap_seq, NULL) = '{{}}'
       AND (SELECT count(DISTINCT x) FROM unnest(p_agents) x) = m THEN
        FOR i IN 1 .. m LOOP
            off := off + p_counts[i];
            lasts[i] := off;
            FOR j IN 1 .. p_counts[i] LOOP
                owners[off - p_counts[i] + j] := p_agents[i];
            END LOOP;
        END LOOP;
        WITH u AS (
            SELECT i::int AS i, p_agents[i] AS agent, p_expected[i] AS expected,
                   p_seqs[lasts[i]] AS last_seq, p_ts[lasts[i]] AS last_ts,
                   p_head_tags[i] AS tag, p_check_tags[i] AS chk, p_expected_tags[i] AS etag
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
        RETURN QUERY
            SELECT i::int, CASE WHEN i = ANY (ok) THEN 0 ELSE 2 END,
                   CASE WHEN i = ANY (ok) THEN p_seqs[lasts[i] - p_counts[i] + 1]
                        ELSE coalesce((SELECT t.head_seq FROM {s}.sk_agents t
                                        WHERE t.agent_id = p_agents[i]), 0) END,
                   CASE WHEN i = ANY (ok) THEN p_seqs[lasts[i]] ELSE 0 END,
                   NULL::text
              FROM generate_subscripts(p_agents, 1) AS i;
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
