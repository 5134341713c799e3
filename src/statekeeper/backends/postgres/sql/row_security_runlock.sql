-- Row-level security, the store's run locks (statekeeper.backends.postgres.row_security;
-- statekeeper.governance.retention_lock). A retention run leases a reserved id of the
-- store's own, chr(1) || 'sk-runlock/retention' for a run over the whole store and
-- ... || '/' || namespace for a run in a namespace. sk_allowed reaches no id of
-- statekeeper's own but the audit log, the holds and the feed's streams, so no role
-- could take one: every run under row security went unlocked. These policies (on
-- sk_leases, OR-ed with its sk_read / sk_insert / sk_update) let take the lock of
-- a namespace the roles whose grants give admin on it and on every namespace below it
-- (one pattern matching the namespace and ending in '**': its POSIX form ends in
-- '(/.*)?$', or is '^.*$', so whatever follows the namespace matches too. Was: the
-- pattern matched the namespace and a probe two one-character segments below it,
-- which a last segment '?' matches as well: the admin of 'acme/**/?' took the lock of
-- 'acme/b', blocking the runs of 'acme/b/cc's admins), and the lock of the whole store
-- the admins of every namespace (sk_log_admin); a lock is read by the roles admin of a
-- namespace above its own, at it or below it (a run checks that no run above or below
-- its namespace holds one), by a grant's literal prefix (sk_grants.prefix, migration
-- 18: sql/grant_prefix.sql): the lock of namespace N by a grant whose prefix P is ''
-- (a pattern starting with a wildcard), N, above N or below N; the lock of the whole
-- store (above every namespace) by every role with an admin grant. Was: every role
-- with an admin grant read every lock, another tenant's namespaces and holders too.
-- No role deletes one.

-- name: function
-- (operators and functions named in pg_catalog: see row_security.sql; migration 18,
-- sql/grant_prefix.sql, replaces it in a schema where it exists)
CREATE OR REPLACE FUNCTION {s}.sk_run_lock(p_agent text, p_need integer) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
    SELECT CASE
        WHEN p_agent OPERATOR(pg_catalog.=) (pg_catalog.chr(1) OPERATOR(pg_catalog.||) 'sk-runlock/retention')
        THEN (p_need OPERATOR(pg_catalog.<=) 1 AND EXISTS (
                  SELECT 1 FROM {s}.sk_grants g
                   WHERE (g.db_role OPERATOR(pg_catalog.=) current_user)
                     AND (g.perm OPERATOR(pg_catalog.=) 3)))
             OR {s}.sk_log_admin()
        WHEN pg_catalog."left"(p_agent, 22) OPERATOR(pg_catalog.=)
             (pg_catalog.chr(1) OPERATOR(pg_catalog.||) 'sk-runlock/retention/')
        THEN (p_need OPERATOR(pg_catalog.<=) 1 AND EXISTS (
                  SELECT 1 FROM {s}.sk_grants g
                   WHERE (g.db_role OPERATOR(pg_catalog.=) current_user)
                     AND (g.perm OPERATOR(pg_catalog.=) 3)
                     AND ((g.prefix OPERATOR(pg_catalog.=) '')
                          OR (g.prefix OPERATOR(pg_catalog.=) pg_catalog.substr(p_agent, 23))
                          OR pg_catalog.starts_with(pg_catalog.substr(p_agent, 23),
                                                    g.prefix OPERATOR(pg_catalog.||) '/')
                          OR pg_catalog.starts_with(g.prefix,
                                                    pg_catalog.substr(p_agent, 23)
                                                    OPERATOR(pg_catalog.||) '/'))))
             OR {s}.sk_log_admin()
             OR EXISTS (
                  SELECT 1 FROM {s}.sk_grants g
                   WHERE (g.db_role OPERATOR(pg_catalog.=) current_user)
                     AND (g.perm OPERATOR(pg_catalog.=) 3)
                     AND (pg_catalog.substr(p_agent, 23) OPERATOR(pg_catalog.~) g.pattern)
                     AND ((pg_catalog."right"(g.pattern, 7) OPERATOR(pg_catalog.=) '(/.*)?$')
                          OR (g.pattern OPERATOR(pg_catalog.=) '^.*$')))
        ELSE false END
$fn$;

-- name: setup
DROP POLICY IF EXISTS sk_run_lock_read ON {s}.sk_leases;
DROP POLICY IF EXISTS sk_run_lock_take ON {s}.sk_leases;
DROP POLICY IF EXISTS sk_run_lock_renew ON {s}.sk_leases;
CREATE POLICY sk_run_lock_read ON {s}.sk_leases FOR SELECT
    USING ({s}.sk_run_lock(agent_id, 1));
CREATE POLICY sk_run_lock_take ON {s}.sk_leases FOR INSERT
    WITH CHECK ({s}.sk_run_lock(agent_id, 2));
CREATE POLICY sk_run_lock_renew ON {s}.sk_leases FOR UPDATE
    USING ({s}.sk_run_lock(agent_id, 2)) WITH CHECK ({s}.sk_run_lock(agent_id, 2));
