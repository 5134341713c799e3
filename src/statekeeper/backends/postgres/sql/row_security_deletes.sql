-- Row-level security, the tenants' table privileges (statekeeper.backends.postgres.
-- row_security; migration 25, sql/table_locks.sql, for a store already under it).
--
-- PostgreSQL lets a role take LOCK TABLE in any mode but ACCESS SHARE and ROW EXCLUSIVE
-- only with TABLE-level UPDATE, DELETE or TRUNCATE on the table (column-level UPDATE is
-- not enough). A tenant role holding table-level UPDATE and DELETE (as every role was
-- given) locked sk_agents IN ACCESS EXCLUSIVE MODE in a transaction kept open: every
-- other tenant's reads and writes waited, which neither row security nor
-- audit_lock_timeout bounds. So a tenant role holds UPDATE on the columns its writes
-- update only (the block "role"), and no DELETE: it deletes through the functions
-- below, SECURITY DEFINER (the schema's owner's), each deleting only the rows the
-- table's delete policy (sql/row_security.sql, sk_delete) lets the CALLING role delete.
--
-- The calling role: current_user inside these functions is their owner, so the caller
-- names itself (p_role: statekeeper passes current_user), and the name is accepted only
-- when the session's login role may act as it (pg_has_role(session_user, p_role,
-- 'MEMBER'): a role it could SET ROLE to anyway); the grants are then read for p_role
-- (sk_allowed_by: sk_allowed's body with p_role for current_user, put here by
-- schema.py). A role that row security does not bind (the tables' owner or a member of
-- it, a superuser, BYPASSRLS) deletes as a plain DELETE would. search_path is pinned
-- (pg_catalog, pg_temp); every value is a parameter, never SQL text.

-- name: functions
CREATE OR REPLACE FUNCTION {s}.sk_log_admin_by(p_role name) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
    SELECT pg_catalog.has_table_privilege(p_role, '{s}.sk_feed_floor', 'UPDATE')
$fn$;

@sk_allowed_by@

-- may p_role act here (else insufficient_privilege), and is it free of row security?
CREATE OR REPLACE FUNCTION {s}.sk_deleter(p_role name) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF p_role IS NULL OR NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = p_role)
       OR NOT pg_has_role(session_user, p_role, 'MEMBER') THEN
        RAISE EXCEPTION 'role % may not delete as role %', session_user, p_role
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = p_role
                      AND (r.rolsuper OR r.rolbypassrls))
        OR pg_has_role(p_role, (SELECT c.relowner FROM pg_class c
                                 WHERE c.oid = '{s}.sk_agents'::regclass), 'USAGE');
END
$fn$;

-- the delete policy (sk_delete) of every table but sk_agents, for p_role
CREATE OR REPLACE FUNCTION {s}.sk_may_delete(p_role name, p_agent text) RETURNS boolean
LANGUAGE sql STABLE AS $fn$
    SELECT {s}.sk_allowed_by(p_role, p_agent, 2)
       AND p_agent OPERATOR(pg_catalog.<>) (pg_catalog.chr(1) OPERATOR(pg_catalog.||) 'sk-audit/log')
       AND (NOT {s}.sk_tombstones(p_agent) OR {s}.sk_log_admin_by(p_role))
$fn$;

-- head rows (queries.sql del_agent, del_agent_at, del_agent_at_sum, absent_release; the
-- claims the append functions release, table_locks.appends_sql): of p_agents, at p_head
-- (NULL: any), whose head event's checksum is p_checksum (NULL: any); sk_agents'
-- delete policy for p_role
CREATE OR REPLACE FUNCTION {s}.sk_del_agents(
    p_role name, p_agents text[], p_head bigint, p_checksum bytea)
RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    free boolean := {s}.sk_deleter(p_role);
BEGIN
    RETURN QUERY
    DELETE FROM {s}.sk_agents a
     WHERE a.agent_id = ANY (p_agents)
       AND (p_head IS NULL OR a.head_seq = p_head)
       AND (p_checksum IS NULL OR EXISTS (
               SELECT 1 FROM {s}.sk_events e
                WHERE e.agent_id = a.agent_id AND e.seq = a.head_seq
                  AND e.checksum = p_checksum))
       AND (free OR ({s}.sk_allowed_by(p_role, a.agent_id, 2)
                     AND (a.head_seq = 0
                          OR (a.agent_id <> chr(1) || 'sk-audit/log'
                              AND (NOT {s}.sk_tombstones(a.agent_id)
                                   OR {s}.sk_log_admin_by(p_role))))))
    RETURNING a.agent_id;
END
$fn$;

-- an agent's events (del_events; prune_events: up to p_upto)
CREATE OR REPLACE FUNCTION {s}.sk_del_events(p_role name, p_agent text, p_upto bigint)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF NOT {s}.sk_deleter(p_role) AND NOT {s}.sk_may_delete(p_role, p_agent) THEN
        RETURN;
    END IF;
    RETURN QUERY
    DELETE FROM {s}.sk_events e
     WHERE e.agent_id = p_agent AND (p_upto IS NULL OR e.seq <= p_upto)
    RETURNING e.seq;
END
$fn$;

-- an agent's snapshots (del_snaps; prune_snaps_below: below p_below; prune_snaps: at
-- p_seqs)
CREATE OR REPLACE FUNCTION {s}.sk_del_snaps(
    p_role name, p_agent text, p_below bigint, p_seqs bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF NOT {s}.sk_deleter(p_role) AND NOT {s}.sk_may_delete(p_role, p_agent) THEN
        RETURN;
    END IF;
    RETURN QUERY
    DELETE FROM {s}.sk_snapshots p
     WHERE p.agent_id = p_agent AND (p_below IS NULL OR p.seq < p_below)
       AND (p_seqs IS NULL OR p.seq = ANY (p_seqs))
    RETURNING p.seq;
END
$fn$;

-- idempotency records (del_keys; expire_keys, expire_agent_keys: made before p_before,
-- never a durable step's; key_drop: p_key): of p_agent (NULL: of every agent the role
-- may delete in)
CREATE OR REPLACE FUNCTION {s}.sk_del_keys(
    p_role name, p_agent text, p_before float8, p_key text)
RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    free boolean := {s}.sk_deleter(p_role);
BEGIN
    RETURN QUERY
    DELETE FROM {s}.sk_idempotency k
     WHERE (p_agent IS NULL OR k.agent_id = p_agent)
       AND (p_before IS NULL OR (k.created_at < p_before AND "left"(k.key, 5) <> 'step:'))
       AND (p_key IS NULL OR k.key = p_key)
       AND (free OR {s}.sk_may_delete(p_role, k.agent_id))
    RETURNING k.agent_id;
END
$fn$;
REVOKE ALL ON FUNCTION {s}.sk_del_agents(name, text[], bigint, bytea),
    {s}.sk_del_events(name, text, bigint), {s}.sk_del_snaps(name, text, bigint, bigint[]),
    {s}.sk_del_keys(name, text, float8, text) FROM PUBLIC;

-- name: role
-- a tenant role's privileges on the store's tables ({r}; {tables} as in
-- row_security.sql's block "role", which granted SELECT and INSERT): UPDATE of the
-- columns statekeeper's writes update, no DELETE, TRUNCATE, or table-level UPDATE
-- (revoking those revokes the columns' too: the column grants come after)
REVOKE UPDATE, DELETE, TRUNCATE ON TABLE {tables} FROM {r};
GRANT UPDATE (head_seq, created_at, updated_at, head_tag) ON {s}.sk_agents TO {r};
GRANT UPDATE (agent_id, seq, kind, ts, payload, checksum) ON {s}.sk_events TO {r};
GRANT UPDATE (ts, payload, checksum) ON {s}.sk_snapshots TO {r};
GRANT UPDATE (key) ON {s}.sk_idempotency TO {r};
GRANT UPDATE (holder, token, expires_at) ON {s}.sk_leases TO {r};
GRANT EXECUTE ON FUNCTION {s}.sk_del_agents(name, text[], bigint, bytea),
    {s}.sk_del_events(name, text, bigint), {s}.sk_del_snaps(name, text, bigint, bigint[]),
    {s}.sk_del_keys(name, text, float8, text) TO {r};
