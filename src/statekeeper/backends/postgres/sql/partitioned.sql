-- statekeeper's tables hash-partitioned by agent id (a backend opened with
-- partitions=N on a schema that does not exist yet). Run before migration 6, in the
-- same transaction: that migration's CREATE TABLE IF NOT EXISTS then finds these, and
-- migrations 7-8 work on both layouts. Columns are those of migrations 6-8; the
-- primary key of every table starts with agent_id (a partitioned table's unique
-- constraints must include its partition key; on Citus, its distribution column).

-- name: tables
CREATE SEQUENCE IF NOT EXISTS {s}.sk_feed_seq;
CREATE TABLE {s}.sk_agents (
    agent_id   text COLLATE "C" NOT NULL,
    head_seq   bigint NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    head_tag   bytea,
    PRIMARY KEY (agent_id)
) PARTITION BY HASH (agent_id);
CREATE TABLE {s}.sk_events (
    agent_id text COLLATE "C" NOT NULL,
    seq      bigint NOT NULL,
    kind     text NOT NULL,
    ts       double precision NOT NULL,
    payload  bytea NOT NULL,
    checksum bytea NOT NULL,
    position bigint DEFAULT nextval('{s}.sk_feed_seq'),
    PRIMARY KEY (agent_id, seq)
) PARTITION BY HASH (agent_id);
-- the feed's order (migration 7 names the same index, on (position) alone, for a
-- plain table; here the partition key must be in it)
CREATE UNIQUE INDEX sk_events_position ON {s}.sk_events (position, agent_id);
CREATE TABLE {s}.sk_snapshots (
    agent_id text COLLATE "C" NOT NULL,
    seq      bigint NOT NULL,
    ts       double precision NOT NULL,
    payload  bytea NOT NULL,
    checksum bytea NOT NULL,
    PRIMARY KEY (agent_id, seq)
) PARTITION BY HASH (agent_id);
CREATE TABLE {s}.sk_idempotency (
    agent_id  text COLLATE "C" NOT NULL,
    key       text NOT NULL,
    first_seq bigint NOT NULL,
    last_seq  bigint NOT NULL,
    PRIMARY KEY (agent_id, key)
) PARTITION BY HASH (agent_id);
CREATE TABLE {s}.sk_leases (
    agent_id   text COLLATE "C" NOT NULL,
    holder     text,
    token      bigint NOT NULL,
    expires_at double precision NOT NULL,
    PRIMARY KEY (agent_id)
) PARTITION BY HASH (agent_id);

-- name: partition
-- Row-level security is on for every partition, with no policy: a role that is not the
-- owner reads and writes the rows only through the parent table, whose policies
-- (row_security.py) apply; read directly, a partition shows such a role nothing (a
-- grant ON ALL TABLES IN SCHEMA would otherwise let it bypass the parent's policies).
CREATE TABLE {s}.{p} PARTITION OF {s}.{t} FOR VALUES WITH (MODULUS {n}, REMAINDER {i});
ALTER TABLE {s}.{p} ENABLE ROW LEVEL SECURITY;
