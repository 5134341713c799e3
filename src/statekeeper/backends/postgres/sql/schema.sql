-- statekeeper's PostgreSQL schema: tables and the append functions, in the schema
-- named by {s}. One migration (version 6, the squash of the pre-release migrations 1-6):
-- idempotent, so that it creates a new schema and also brings any pre-release one
-- (migrations 1-5 applied) to the same state without losing data.

CREATE TABLE IF NOT EXISTS {s}.sk_agents (
    agent_id   text COLLATE "C" PRIMARY KEY,
    head_seq   bigint NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    head_tag   bytea
);
-- pre-release schemas (before migration 4) lack the head tag
ALTER TABLE {s}.sk_agents ADD COLUMN IF NOT EXISTS head_tag bytea;
CREATE TABLE IF NOT EXISTS {s}.sk_events (
    agent_id text COLLATE "C" NOT NULL,
    seq      bigint NOT NULL,
    kind     text NOT NULL,
    ts       double precision NOT NULL,
    payload  bytea NOT NULL,
    checksum bytea NOT NULL,
    PRIMARY KEY (agent_id, seq)
);
CREATE TABLE IF NOT EXISTS {s}.sk_snapshots (
    agent_id text COLLATE "C" NOT NULL,
    seq      bigint NOT NULL,
    ts       double precision NOT NULL,
    payload  bytea NOT NULL,
    checksum bytea NOT NULL,
    PRIMARY KEY (agent_id, seq)
);
CREATE TABLE IF NOT EXISTS {s}.sk_idempotency (
    agent_id  text COLLATE "C" NOT NULL,
    key       text NOT NULL,
    first_seq bigint NOT NULL,
    last_seq  bigint NOT NULL,
    PRIMARY KEY (agent_id, key)
);
-- leases: one row per agent, never deleted, so a fencing token never goes back
CREATE TABLE IF NOT EXISTS {s}.sk_leases (
    agent_id   text COLLATE "C" PRIMARY KEY,
    holder     text,
    token      bigint NOT NULL,
    expires_at double precision NOT NULL
);

-- the append functions of pre-release schemas (other signatures)
DROP FUNCTION IF EXISTS {s}.sk_append_batch_fenced;
DROP FUNCTION IF EXISTS {s}.sk_append_fenced;
DROP FUNCTION IF EXISTS {s}.sk_append_batch;
DROP FUNCTION IF EXISTS {s}.sk_append1;
DROP FUNCTION IF EXISTS {s}.sk_append;

-- sk_append is the whole compare-and-append in one statement: the fence (its lease row
-- locked FOR SHARE, so no grant slips in before the commit), the idempotency key, the
-- head compare-and-set (seq and, with p_check_tag, the head tag) and the rows.
-- sk_append1 takes one event as scalars (no array encoding); sk_append_batch runs many
-- appends in one statement (group commit).
CREATE FUNCTION {s}.sk_append(
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
        INSERT INTO {s}.sk_idempotency (agent_id, key, first_seq, last_seq)
        VALUES (p_agent, p_key, p_seqs[1], p_seqs[n]);
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
CREATE FUNCTION {s}.sk_append1(
    p_agent text, p_expected bigint, p_seq bigint, p_kind text, p_ts float8,
    p_payload bytea, p_checksum bytea, p_key text,
    p_snap_seq bigint, p_snap_ts float8, p_snap_payload bytea, p_snap_checksum bytea,
    p_head_tag bytea, p_check_tag boolean, p_expected_tag bytea,
    p_fence_holder text, p_fence_token bigint,
    OUT status int, OUT a bigint, OUT b bigint, OUT h text)
LANGUAGE sql AS $fn$
    SELECT * FROM {s}.sk_append(p_agent, p_expected, ARRAY[p_seq], ARRAY[p_kind],
        ARRAY[p_ts], ARRAY[p_payload], ARRAY[p_checksum], p_key,
        p_snap_seq, p_snap_ts, p_snap_payload, p_snap_checksum, p_head_tag,
        p_check_tag, p_expected_tag, p_fence_holder, p_fence_token)
$fn$;
CREATE FUNCTION {s}.sk_append_batch(
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
BEGIN
    FOR i IN 1 .. cardinality(p_agents) LOOP
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
