-- A pre-release statekeeper schema: migrations 1-5 as they were before the
-- squash (tests/backends/test_postgres.py upgrades it in place). {s}: the schema.
-- migration 1: streams, snapshots, idempotency keys and sk_append
CREATE TABLE {s}.sk_agents (
    agent_id   text COLLATE "C" PRIMARY KEY,
    head_seq   bigint NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL
);
CREATE TABLE {s}.sk_events (
    agent_id text COLLATE "C" NOT NULL,
    seq      bigint NOT NULL,
    kind     text NOT NULL,
    ts       double precision NOT NULL,
    payload  bytea NOT NULL,
    checksum bytea NOT NULL,
    PRIMARY KEY (agent_id, seq)
);
CREATE TABLE {s}.sk_snapshots (
    agent_id text COLLATE "C" NOT NULL,
    seq      bigint NOT NULL,
    ts       double precision NOT NULL,
    payload  bytea NOT NULL,
    checksum bytea NOT NULL,
    PRIMARY KEY (agent_id, seq)
);
CREATE TABLE {s}.sk_idempotency (
    agent_id  text COLLATE "C" NOT NULL,
    key       text NOT NULL,
    first_seq bigint NOT NULL,
    last_seq  bigint NOT NULL,
    PRIMARY KEY (agent_id, key)
);
CREATE FUNCTION {s}.sk_append(
    p_agent text, p_expected bigint, p_seqs bigint[], p_kinds text[], p_ts float8[],
    p_payloads bytea[], p_checksums bytea[], p_key text,
    p_snap_seq bigint, p_snap_ts float8, p_snap_payload bytea, p_snap_checksum bytea,
    OUT status int, OUT a bigint, OUT b bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
    n  int := cardinality(p_seqs);
    rc bigint;
BEGIN
    -- status 0: appended a..b; 1: duplicate key, first append was a..b; 2: conflict, head a
    IF p_key IS NOT NULL THEN
        SELECT k.first_seq, k.last_seq INTO a, b FROM {s}.sk_idempotency k
         WHERE k.agent_id = p_agent AND k.key = p_key;
        IF FOUND THEN status := 1; RETURN; END IF;
    END IF;
    IF p_expected = 0 THEN
        INSERT INTO {s}.sk_agents AS h (agent_id, head_seq, created_at, updated_at)
        VALUES (p_agent, p_seqs[n], p_ts[1], p_ts[n]) ON CONFLICT (agent_id) DO NOTHING;
    ELSE
        UPDATE {s}.sk_agents SET head_seq = p_seqs[n], updated_at = p_ts[n]
         WHERE agent_id = p_agent AND head_seq = p_expected;
    END IF;
    GET DIAGNOSTICS rc = ROW_COUNT;
    IF rc = 0 THEN
        -- lost the race: a concurrent append with the same key counts as a duplicate
        IF p_key IS NOT NULL THEN
            SELECT k.first_seq, k.last_seq INTO a, b FROM {s}.sk_idempotency k
             WHERE k.agent_id = p_agent AND k.key = p_key;
            IF FOUND THEN status := 1; RETURN; END IF;
        END IF;
        SELECT h.head_seq INTO a FROM {s}.sk_agents h WHERE h.agent_id = p_agent;
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
-- migration 2: sk_append1: one-event appends with scalar arguments
CREATE FUNCTION {s}.sk_append1(
    p_agent text, p_expected bigint, p_seq bigint, p_kind text, p_ts float8,
    p_payload bytea, p_checksum bytea, p_key text,
    p_snap_seq bigint, p_snap_ts float8, p_snap_payload bytea, p_snap_checksum bytea,
    OUT status int, OUT a bigint, OUT b bigint)
LANGUAGE sql AS $fn$
    SELECT * FROM {s}.sk_append(p_agent, p_expected, ARRAY[p_seq], ARRAY[p_kind],
        ARRAY[p_ts], ARRAY[p_payload], ARRAY[p_checksum], p_key,
        p_snap_seq, p_snap_ts, p_snap_payload, p_snap_checksum)
$fn$;
-- migration 3: sk_append_batch: many appends in one statement (group commit)
CREATE FUNCTION {s}.sk_append_batch(
    p_agents text[], p_expected bigint[], p_counts int[], p_keys text[],
    p_snap_seq bigint[], p_snap_ts float8[], p_snap_payload bytea[], p_snap_checksum bytea[],
    p_seqs bigint[], p_kinds text[], p_ts float8[], p_payloads bytea[], p_checksums bytea[])
RETURNS TABLE (idx int, status int, a bigint, b bigint)
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
            p_snap_seq[i], p_snap_ts[i], p_snap_payload[i], p_snap_checksum[i]);
        idx := i; status := r.status; a := r.a; b := r.b;
        RETURN NEXT;
        off := off + n;
    END LOOP;
END
$fn$;
-- migration 4: head tags: the authenticated stream head stored with the head, atomically
ALTER TABLE {s}.sk_agents ADD COLUMN head_tag bytea;
DROP FUNCTION {s}.sk_append_batch;
DROP FUNCTION {s}.sk_append1;
DROP FUNCTION {s}.sk_append;
CREATE FUNCTION {s}.sk_append(
    p_agent text, p_expected bigint, p_seqs bigint[], p_kinds text[], p_ts float8[],
    p_payloads bytea[], p_checksums bytea[], p_key text,
    p_snap_seq bigint, p_snap_ts float8, p_snap_payload bytea, p_snap_checksum bytea,
    p_head_tag bytea,
    OUT status int, OUT a bigint, OUT b bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
    n  int := cardinality(p_seqs);
    rc bigint;
BEGIN
    -- status 0: appended a..b; 1: duplicate key, first append was a..b; 2: conflict, head a
    IF p_key IS NOT NULL THEN
        SELECT k.first_seq, k.last_seq INTO a, b FROM {s}.sk_idempotency k
         WHERE k.agent_id = p_agent AND k.key = p_key;
        IF FOUND THEN status := 1; RETURN; END IF;
    END IF;
    IF p_expected = 0 THEN
        INSERT INTO {s}.sk_agents AS h (agent_id, head_seq, created_at, updated_at, head_tag)
        VALUES (p_agent, p_seqs[n], p_ts[1], p_ts[n], p_head_tag)
        ON CONFLICT (agent_id) DO NOTHING;
    ELSE
        UPDATE {s}.sk_agents SET head_seq = p_seqs[n], updated_at = p_ts[n], head_tag = p_head_tag
         WHERE agent_id = p_agent AND head_seq = p_expected;
    END IF;
    GET DIAGNOSTICS rc = ROW_COUNT;
    IF rc = 0 THEN
        -- lost the race: a concurrent append with the same key counts as a duplicate
        IF p_key IS NOT NULL THEN
            SELECT k.first_seq, k.last_seq INTO a, b FROM {s}.sk_idempotency k
             WHERE k.agent_id = p_agent AND k.key = p_key;
            IF FOUND THEN status := 1; RETURN; END IF;
        END IF;
        SELECT h.head_seq INTO a FROM {s}.sk_agents h WHERE h.agent_id = p_agent;
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
    p_head_tag bytea,
    OUT status int, OUT a bigint, OUT b bigint)
LANGUAGE sql AS $fn$
    SELECT * FROM {s}.sk_append(p_agent, p_expected, ARRAY[p_seq], ARRAY[p_kind],
        ARRAY[p_ts], ARRAY[p_payload], ARRAY[p_checksum], p_key,
        p_snap_seq, p_snap_ts, p_snap_payload, p_snap_checksum, p_head_tag)
$fn$;
CREATE FUNCTION {s}.sk_append_batch(
    p_agents text[], p_expected bigint[], p_counts int[], p_keys text[],
    p_snap_seq bigint[], p_snap_ts float8[], p_snap_payload bytea[], p_snap_checksum bytea[],
    p_seqs bigint[], p_kinds text[], p_ts float8[], p_payloads bytea[], p_checksums bytea[],
    p_head_tags bytea[])
RETURNS TABLE (idx int, status int, a bigint, b bigint)
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
            p_head_tags[i]);
        idx := i; status := r.status; a := r.a; b := r.b;
        RETURN NEXT;
        off := off + n;
    END LOOP;
END
$fn$;
-- migration 5: leases with fencing tokens; fenced appends
CREATE TABLE {s}.sk_leases (
    agent_id   text COLLATE "C" PRIMARY KEY,
    holder     text,
    token      bigint NOT NULL,
    expires_at double precision NOT NULL
);
CREATE FUNCTION {s}.sk_append_fenced(
    p_fence_holder text, p_fence_token bigint,
    p_agent text, p_expected bigint, p_seqs bigint[], p_kinds text[], p_ts float8[],
    p_payloads bytea[], p_checksums bytea[], p_key text,
    p_snap_seq bigint, p_snap_ts float8, p_snap_payload bytea, p_snap_checksum bytea,
    p_head_tag bytea,
    OUT status int, OUT a bigint, OUT b bigint, OUT h text)
LANGUAGE plpgsql AS $fn$
DECLARE
    cur_holder text;
    cur_token  bigint;
BEGIN
    -- status 3: the fence is not the agent's current lease (a = its token, h = holder).
    -- FOR SHARE keeps a concurrent grant from slipping in before this append commits.
    SELECT l.holder, l.token INTO cur_holder, cur_token FROM {s}.sk_leases l
     WHERE l.agent_id = p_agent FOR SHARE;
    IF cur_holder IS NULL OR cur_holder <> p_fence_holder OR cur_token <> p_fence_token THEN
        status := 3; a := coalesce(cur_token, 0); b := 0; h := cur_holder;
        RETURN;
    END IF;
    SELECT r.status, r.a, r.b INTO status, a, b FROM {s}.sk_append(p_agent, p_expected,
        p_seqs, p_kinds, p_ts, p_payloads, p_checksums, p_key,
        p_snap_seq, p_snap_ts, p_snap_payload, p_snap_checksum, p_head_tag) r;
END
$fn$;
CREATE FUNCTION {s}.sk_append_batch_fenced(
    p_agents text[], p_expected bigint[], p_counts int[], p_keys text[],
    p_snap_seq bigint[], p_snap_ts float8[], p_snap_payload bytea[], p_snap_checksum bytea[],
    p_seqs bigint[], p_kinds text[], p_ts float8[], p_payloads bytea[], p_checksums bytea[],
    p_head_tags bytea[], p_fence_holders text[], p_fence_tokens bigint[])
RETURNS TABLE (idx int, status int, a bigint, b bigint, h text)
LANGUAGE plpgsql AS $fn$
DECLARE
    off int := 0;
    n int;
    r record;
BEGIN
    FOR i IN 1 .. cardinality(p_agents) LOOP
        n := p_counts[i];
        IF p_fence_holders[i] IS NULL THEN
            SELECT x.status, x.a, x.b, NULL::text AS h INTO r FROM {s}.sk_append(
                p_agents[i], p_expected[i],
                p_seqs[off + 1 : off + n], p_kinds[off + 1 : off + n], p_ts[off + 1 : off + n],
                p_payloads[off + 1 : off + n], p_checksums[off + 1 : off + n], p_keys[i],
                p_snap_seq[i], p_snap_ts[i], p_snap_payload[i], p_snap_checksum[i],
                p_head_tags[i]) x;
        ELSE
            SELECT * INTO r FROM {s}.sk_append_fenced(p_fence_holders[i], p_fence_tokens[i],
                p_agents[i], p_expected[i],
                p_seqs[off + 1 : off + n], p_kinds[off + 1 : off + n], p_ts[off + 1 : off + n],
                p_payloads[off + 1 : off + n], p_checksums[off + 1 : off + n], p_keys[i],
                p_snap_seq[i], p_snap_ts[i], p_snap_payload[i], p_snap_checksum[i],
                p_head_tags[i]);
        END IF;
        idx := i; status := r.status; a := r.a; b := r.b; h := r.h;
        RETURN NEXT;
        off := off + n;
    END LOOP;
END
$fn$;
