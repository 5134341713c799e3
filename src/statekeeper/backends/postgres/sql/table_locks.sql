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
-- and every role row security was installed for (it gave each table-level UPDATE and
-- DELETE on sk_agents) its new privileges: of what it held, UPDATE of the columns
-- statekeeper's writes update on each table it could update, the delete functions if
-- it could delete. A role the database's administrator gave SELECT alone (a reader
-- following the feed, a backup) is left as it is (was: every role with SELECT on
-- sk_agents was given the columns' UPDATE and the delete functions, so a read-only
-- role could move or row-lock the audit log's head, and a BYPASSRLS one delete and
-- rewrite every tenant's rows). A store without row security is left as it is.
DO $do$
DECLARE
    r name;
    updated text[];
    deletes boolean;
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
         WHERE c.oid = '{s}.sk_agents'::regclass AND a.privilege_type IN ('UPDATE', 'DELETE')
           AND ro.oid = a.grantee AND a.grantee <> c.relowner
    LOOP
        updated := ARRAY(SELECT t FROM unnest(@sk_updated@::text[]) t
                          WHERE has_any_column_privilege(r, to_regclass('{s}.' || t), 'UPDATE'));
        deletes := has_table_privilege(r, '{s}.sk_agents'::regclass, 'DELETE');
@sk_grants@
    END LOOP;
END
$do$;
