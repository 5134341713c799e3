-- Migration 25: a tenant's database role cannot lock the store's tables.
--
-- Under row-level security each tenant role held table-level UPDATE and DELETE on the
-- store's tables, and PostgreSQL lets such a role take LOCK TABLE in any mode: LOCK
-- TABLE sk_agents IN ACCESS EXCLUSIVE MODE in a transaction kept open held every other
-- tenant's reads and writes (tests/governance/test_postgres_row_security_table_locks.py).
-- Now a tenant role holds UPDATE on the columns statekeeper's writes update, no DELETE,
-- and deletes through SECURITY DEFINER functions that apply the delete policies for
-- the calling role (sql/row_security_deletes.sql); every insert of events waits for
-- the feed's advisory lock (which every role may take: only a superuser could revoke
-- it) at most the session's statekeeper.audit_lock_timeout (sql/row_security_feed.sql,
-- "mark"). A store without row security is left as it is.

-- a store under row security: the delete functions, the append functions releasing
-- their claims (head rows at 0 an append made and did not take over) through them
-- (sql/audit_head_lock.sql's, put here by table_locks.py), the feed's bounded trigger,
-- and every role that was given the store's tables (SELECT on sk_agents) its new
-- privileges. A store without row security is left as it is.
DO $do$
DECLARE
    r name;
BEGIN
    IF to_regclass('{s}.sk_grants') IS NULL THEN
        RETURN;
    END IF;
    @sk_deletes@
@sk_appends@
    @sk_feed_mark@
    FOR r IN
        SELECT DISTINCT ro.rolname
          FROM pg_class c, aclexplode(c.relacl) a, pg_roles ro
         WHERE c.oid = '{s}.sk_agents'::regclass AND a.privilege_type = 'SELECT'
           AND ro.oid = a.grantee AND a.grantee <> c.relowner
    LOOP
@sk_grants@
    END LOOP;
END
$do$;
