-- Row-level security for statekeeper's tables in the schema {s}: the access policy of
-- statekeeper.governance enforced by PostgreSQL itself, one database role per
-- principal (see statekeeper.backends.postgres.row_security). Run by the tables' owner;
-- the owner (and superusers) stay exempt, every other role sees and changes only the
-- rows of the namespaces {s}.sk_grants gives it.

-- name: grant_prefix
-- a grant's literal prefix (sql/grant_prefix.sql, migration 18, says what it is): created
-- here too, so that installing row security needs no object a migration made
CREATE OR REPLACE FUNCTION {s}.sk_grant_prefix(p_pattern text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT CASE
        WHEN p_pattern OPERATOR(pg_catalog.~) '(^|[^\\])(\\\\)*[|]' THEN ''
        ELSE COALESCE(pg_catalog.regexp_replace(
            pg_catalog."substring"(p_pattern,
                '^\^((?:[[:alnum:]]|\\[^[:alnum:]])+(?:/(?:[[:alnum:]]|\\[^[:alnum:]])+)*)(?:/(?:[^*?+{{]|$)|\$$|\(/\.\*\)\?\$$)'),
            '\\(.)', '\1', 'g'), '')
    END
$fn$;

-- name: setup
-- the grants: (role, POSIX regular expression over the namespace, 1 read 2 write 3 admin)
CREATE TABLE IF NOT EXISTS {s}.sk_grants (
    db_role name NOT NULL,
    pattern text NOT NULL,
    perm    integer NOT NULL CHECK (perm BETWEEN 1 AND 3),
    -- its literal prefix: the run locks its role reads (sql/grant_prefix.sql)
    prefix  text GENERATED ALWAYS AS ({s}.sk_grant_prefix(pattern)) STORED
);
ALTER TABLE {s}.sk_grants ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS sk_own_grants ON {s}.sk_grants;
CREATE POLICY sk_own_grants ON {s}.sk_grants FOR SELECT USING (db_role = current_user);

-- The bodies of the functions the policies call name every operator and function by
-- its schema (pg_catalog): a SQL function's body is parsed when it runs, with the
-- search_path of the session running it, so a role that may create objects in some
-- schema (PostgreSQL 14 and older let every role create in "public") and puts it first
-- (SET search_path = own, pg_catalog) would otherwise have its own "~" or "=" decide
-- what it may read. (Not "SET search_path" on the functions: that would stop the
-- planner from inlining them into every row's check.)

-- an agent id's namespace: the part before its last '/' ('' for none), as in Python
CREATE OR REPLACE FUNCTION {s}.sk_namespace(p_agent text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT CASE WHEN ((pg_catalog.length(p_agent)
                       OPERATOR(pg_catalog.-) pg_catalog.strpos(pg_catalog.reverse(p_agent), '/'))
                      OPERATOR(pg_catalog.>) 0)
                 AND (pg_catalog.strpos(pg_catalog.reverse(p_agent), '/') OPERATOR(pg_catalog.>) 0)
           THEN pg_catalog."left"(p_agent, pg_catalog.length(p_agent)
                       OPERATOR(pg_catalog.-) pg_catalog.strpos(pg_catalog.reverse(p_agent), '/'))
           ELSE '' END
$fn$;

-- may the current role change the audit log's rows (other than appending), or read its
-- entries? The schema's owner and the roles of principals admin of every namespace
-- (those allowed to trim the feed, sql/row_security_feed.sql: a rekey rewrites the
-- log), no other
CREATE OR REPLACE FUNCTION {s}.sk_log_admin() RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
    SELECT pg_catalog.has_table_privilege(current_user, '{s}.sk_feed_floor', 'UPDATE')
$fn$;

-- is p_agent a namespace's feed tombstone stream (statekeeper.store.feed_deletes:
-- chr(1) || 'sk-feed/deleted/in/' || namespace || '/-')? Its part after '/in/' has that
-- namespace, so the grants that reach the namespace's agents reach it (sk_allowed)
CREATE OR REPLACE FUNCTION {s}.sk_tombstones(p_agent text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT pg_catalog."left"(p_agent, 20)
           OPERATOR(pg_catalog.=) (pg_catalog.chr(1) OPERATOR(pg_catalog.||) 'sk-feed/deleted/in/')
$fn$;

-- is p_agent a namespace's feed intent stream (statekeeper.store.feed_intents: a forget's
-- intent, written before the agent's data key is destroyed, chr(1) ||
-- 'sk-feed/pending/in/' || namespace || '/' || token)? As a tombstone stream, its part
-- after '/in/' has the namespace: the roles that may write the namespace's agents write
-- (and delete) it, those that may read them read it
CREATE OR REPLACE FUNCTION {s}.sk_feed_intents(p_agent text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT pg_catalog."left"(p_agent, 20)
           OPERATOR(pg_catalog.=) (pg_catalog.chr(1) OPERATOR(pg_catalog.||) 'sk-feed/pending/in/')
$fn$;

-- may the current role do p_need (1 read, 2 write) on p_agent? The audit log (a stream
-- of statekeeper's own) is appendable by every role, never deletable, and read only by
-- a log admin (every tenant's entries are in it; a writer chains on the head's link
-- alone: the block audit_head); the legal holds (statekeeper.governance.holds) readable
-- by every role (each purge checks them), changed only by a log admin (admin on
-- everything); a namespace's tombstone stream as the namespace's agents (appended
-- by a role that may write them, never rewritten or deleted but by a log admin: the
-- policies sk_update, sk_delete; its head row only moves forward: the trigger
-- sk_tombstones_forward); a namespace's forget intents as its agents. The grants apply to agents only: statekeeper's own
-- streams (chr(1) || 'sk-...') are in namespaces such as chr(1) || 'sk-audit', which a
-- pattern of one segment ('*') matches as it matches 'acme'.
CREATE OR REPLACE FUNCTION {s}.sk_allowed(p_agent text, p_need integer) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
    SELECT ((p_agent OPERATOR(pg_catalog.=) (pg_catalog.chr(1) OPERATOR(pg_catalog.||) 'sk-audit/log'))
            AND ((p_need OPERATOR(pg_catalog.=) 2)
                 OR ((p_need OPERATOR(pg_catalog.=) 1) AND {s}.sk_log_admin())))
        OR ((p_agent OPERATOR(pg_catalog.=) (pg_catalog.chr(1) OPERATOR(pg_catalog.||) 'sk-holds/registry'))
            AND ((p_need OPERATOR(pg_catalog.<=) 1) OR {s}.sk_log_admin()))
        OR ((pg_catalog."left"(p_agent, 4)
             OPERATOR(pg_catalog.<>) (pg_catalog.chr(1) OPERATOR(pg_catalog.||) 'sk-'))
            AND EXISTS (SELECT 1 FROM {s}.sk_grants g
                    WHERE (g.db_role OPERATOR(pg_catalog.=) current_user)
                      AND (g.perm OPERATOR(pg_catalog.>=) p_need)
                      AND ({s}.sk_namespace(p_agent) OPERATOR(pg_catalog.~) g.pattern)))
        OR (({s}.sk_tombstones(p_agent) OR {s}.sk_feed_intents(p_agent))
            AND EXISTS (SELECT 1 FROM {s}.sk_grants g
                    WHERE (g.db_role OPERATOR(pg_catalog.=) current_user)
                      AND (g.perm OPERATOR(pg_catalog.>=) p_need)
                      AND ({s}.sk_namespace(pg_catalog.substr(p_agent, 21))
                           OPERATOR(pg_catalog.~) g.pattern)))
$fn$;

-- name: table
ALTER TABLE {s}.{t} ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS sk_read ON {s}.{t};
DROP POLICY IF EXISTS sk_insert ON {s}.{t};
DROP POLICY IF EXISTS sk_update ON {s}.{t};
DROP POLICY IF EXISTS sk_delete ON {s}.{t};
CREATE POLICY sk_read ON {s}.{t} FOR SELECT USING ({s}.sk_allowed(agent_id, 1));
CREATE POLICY sk_insert ON {s}.{t} FOR INSERT WITH CHECK ({s}.sk_allowed(agent_id, 2));
-- the audit log's rows: appended (INSERT), never updated but by a log admin (its
-- head row in sk_agents moves with each append: the block audit_head)
-- (a namespace's tombstones neither: a tenant must not take back a delete's notice)
CREATE POLICY sk_update ON {s}.{t} FOR UPDATE
    USING ({s}.sk_allowed(agent_id, 2)
           AND ((agent_id <> chr(1) || 'sk-audit/log' AND NOT {s}.sk_tombstones(agent_id))
                OR {s}.sk_log_admin()))
    WITH CHECK ({s}.sk_allowed(agent_id, 2)
                AND ((agent_id <> chr(1) || 'sk-audit/log' AND NOT {s}.sk_tombstones(agent_id))
                     OR {s}.sk_log_admin()));
CREATE POLICY sk_delete ON {s}.{t} FOR DELETE
    USING ({s}.sk_allowed(agent_id, 2) AND agent_id <> chr(1) || 'sk-audit/log'
           AND (NOT {s}.sk_tombstones(agent_id) OR {s}.sk_log_admin()));

-- name: role
-- the store's own tables, sequence and functions ({tables}, {sequences}, {functions}:
-- row_security.py reads them from the catalog by the names the scripts create), not ALL
-- ... IN SCHEMA: another application's tables in the schema (a store in public) are not
-- the role's to write, nor to lose its privileges on when they are revoked
GRANT USAGE ON SCHEMA {s} TO {r};
-- (UPDATE of some columns only, DELETE through functions: sql/row_security_deletes.sql,
-- whose block "role" follows this one; a table-level UPDATE or DELETE lets a role LOCK
-- the table in any mode)
GRANT SELECT, INSERT ON TABLE {tables} TO {r};
REVOKE INSERT, UPDATE, DELETE ON {s}.sk_grants, {s}.sk_migrations FROM {r};
-- an event's feed position is the sequence's (the column's default), never a role's:
-- one event of its own moved far ahead would carry every subscriber past the events
-- of every other namespace written after it (skipped, silently), one moved back would
-- be delivered again or never. statekeeper writes every other column, never this one.
REVOKE INSERT, UPDATE ON {s}.sk_events FROM {r};
GRANT INSERT (agent_id, seq, kind, ts, payload, checksum),
      UPDATE (agent_id, seq, kind, ts, payload, checksum) ON {s}.sk_events TO {r};
GRANT USAGE ON SEQUENCE {sequences} TO {r};
GRANT EXECUTE ON FUNCTION {functions} TO {r};

-- name: audit_head
-- the audit log's head row: every role's append moves it forward (sk_append), so it is
-- readable (its seq and tag) and updatable; a trigger refuses any other change of it
-- (renaming it away, moving it back) by a role that is not a log admin (the trigger
-- binds the owner too: it is one)
DROP POLICY IF EXISTS sk_read ON {s}.sk_agents;
CREATE POLICY sk_read ON {s}.sk_agents FOR SELECT
    USING ({s}.sk_allowed(agent_id, 1) OR agent_id = chr(1) || 'sk-audit/log');
DROP POLICY IF EXISTS sk_update ON {s}.sk_agents;
CREATE POLICY sk_update ON {s}.sk_agents FOR UPDATE
    USING ({s}.sk_allowed(agent_id, 2)) WITH CHECK ({s}.sk_allowed(agent_id, 2));
-- a head row at 0 is a claim, no stream (a write's first lock: sql/batch_claims.sql,
-- queries.sql absent_claim), deleted again by the role that inserted it, the audit
-- log's and a namespace's tombstones' too: was refused (the table's sk_delete), so a
-- claim a write made and did not take over (its fence or key refused, a batch's other
-- request failed) stayed committed, listed as a stream at head 0 (migration 22)
DROP POLICY IF EXISTS sk_delete ON {s}.sk_agents;
CREATE POLICY sk_delete ON {s}.sk_agents FOR DELETE
    USING ({s}.sk_allowed(agent_id, 2)
           AND (head_seq = 0
                OR (agent_id <> chr(1) || 'sk-audit/log'
                    AND (NOT {s}.sk_tombstones(agent_id) OR {s}.sk_log_admin()))));
-- (its search_path is set: a role's own "<" or "=" must not decide it)
CREATE OR REPLACE FUNCTION {s}.sk_audit_head_forward() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF (NEW.agent_id IS DISTINCT FROM OLD.agent_id OR NEW.head_seq < OLD.head_seq)
       AND NOT {s}.sk_log_admin() THEN
        RAISE EXCEPTION 'the audit log''s head only moves forward (role %)', current_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$fn$;
DROP TRIGGER IF EXISTS sk_audit_head_forward ON {s}.sk_agents;
CREATE TRIGGER sk_audit_head_forward BEFORE UPDATE ON {s}.sk_agents
    FOR EACH ROW WHEN (OLD.agent_id = chr(1) || 'sk-audit/log')
    EXECUTE FUNCTION {s}.sk_audit_head_forward();
-- (fires in a session with session_replication_role = replica too, set on a role)
ALTER TABLE {s}.sk_agents ENABLE ALWAYS TRIGGER sk_audit_head_forward;
-- a namespace's feed tombstone stream's head row: the roles that may write the
-- namespace move it with each append (sk_append), so they may update it; a trigger
-- refuses any other change of it by a role that is not a log admin: moving it back
-- (the next tombstone then conflicts with a stored one: every delete of the namespace,
-- the store admin's too, failed), a new tag at the same head, renaming it away (the
-- row then listed as an agent of the tenant's, the stream's head 0) or another row onto
-- its name (the sk_update policy lets a tenant rename within what it may write)
CREATE OR REPLACE FUNCTION {s}.sk_tombstones_forward() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF (NEW.agent_id IS DISTINCT FROM OLD.agent_id OR NEW.head_seq < OLD.head_seq
        OR (NEW.head_seq = OLD.head_seq AND NEW.head_tag IS DISTINCT FROM OLD.head_tag))
       AND NOT {s}.sk_log_admin() THEN
        RAISE EXCEPTION 'a namespace''s feed tombstones are append-only (role %)', current_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$fn$;
DROP TRIGGER IF EXISTS sk_tombstones_forward ON {s}.sk_agents;
CREATE TRIGGER sk_tombstones_forward BEFORE UPDATE ON {s}.sk_agents
    FOR EACH ROW WHEN ({s}.sk_tombstones(OLD.agent_id) OR {s}.sk_tombstones(NEW.agent_id))
    EXECUTE FUNCTION {s}.sk_tombstones_forward();
ALTER TABLE {s}.sk_agents ENABLE ALWAYS TRIGGER sk_tombstones_forward;
-- the head's link: under row-level security each audit append carries a snapshot of
-- the log at its new head whose only content is the head entry's chain link, sealed
-- under the audit key (statekeeper.governance.audit), which the next writer chains on
-- without reading any entry. Every role reads it, inserts one only at the log's head,
-- and never changes or deletes one; the trigger below (the owner's, SECURITY DEFINER)
-- keeps only the newest. The entries themselves (sk_events) are a log admin's alone
-- (sk_allowed), but for a head written without its link (by a process opened before
-- row-level security was installed): that one entry is readable, as the next writer
-- must chain on it.
DROP POLICY IF EXISTS sk_read ON {s}.sk_snapshots;
CREATE POLICY sk_read ON {s}.sk_snapshots FOR SELECT
    USING ({s}.sk_allowed(agent_id, 1) OR agent_id = chr(1) || 'sk-audit/log');
DROP POLICY IF EXISTS sk_insert ON {s}.sk_snapshots;
CREATE POLICY sk_insert ON {s}.sk_snapshots FOR INSERT WITH CHECK (
    {s}.sk_allowed(agent_id, 2)
    AND (agent_id <> chr(1) || 'sk-audit/log' OR {s}.sk_log_admin()
         OR sk_snapshots.seq = (SELECT a.head_seq FROM {s}.sk_agents a
                                 WHERE a.agent_id = chr(1) || 'sk-audit/log')));
DROP POLICY IF EXISTS sk_read ON {s}.sk_events;
CREATE POLICY sk_read ON {s}.sk_events FOR SELECT USING (
    {s}.sk_allowed(agent_id, 1)
    OR (agent_id = chr(1) || 'sk-audit/log'
        AND sk_events.seq = (SELECT a.head_seq FROM {s}.sk_agents a
                              WHERE a.agent_id = chr(1) || 'sk-audit/log')
        AND NOT EXISTS (SELECT 1 FROM {s}.sk_snapshots l
                         WHERE l.agent_id = chr(1) || 'sk-audit/log'
                           AND l.seq = sk_events.seq)));
CREATE OR REPLACE FUNCTION {s}.sk_audit_link_kept() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    DELETE FROM {s}.sk_snapshots WHERE agent_id = NEW.agent_id AND seq < NEW.seq;
    RETURN NULL;
END
$fn$;
REVOKE ALL ON FUNCTION {s}.sk_audit_link_kept() FROM PUBLIC;
DROP TRIGGER IF EXISTS sk_audit_link_kept ON {s}.sk_snapshots;
CREATE TRIGGER sk_audit_link_kept AFTER INSERT ON {s}.sk_snapshots
    FOR EACH ROW WHEN (NEW.agent_id = chr(1) || 'sk-audit/log')
    EXECUTE FUNCTION {s}.sk_audit_link_kept();
ALTER TABLE {s}.sk_snapshots ENABLE ALWAYS TRIGGER sk_audit_link_kept;

-- name: audit_entries
-- the log's entries: a role that is not a log admin inserts one only at or below the
-- log's head as its own transaction sees it (the append functions move the head
-- first, under the head row's bounded lock: sql/audit_head_lock.sql). Was: any role
-- inserted the log's next entry (head + 1) without moving the head, in a transaction
-- it kept open, and every governed write of every tenant, inserting the same entry,
-- waited on the unique index for it, unbounded (migration 26;
-- tests/governance/test_postgres_row_security_audit_next_entry.py). Moving the head
-- first locks its row: the others' wait is bounded (AuditLogLocked).
DROP POLICY IF EXISTS sk_insert ON {s}.sk_events;
CREATE POLICY sk_insert ON {s}.sk_events FOR INSERT WITH CHECK (
    {s}.sk_allowed(agent_id, 2)
    AND (agent_id <> chr(1) || 'sk-audit/log' OR {s}.sk_log_admin()
         OR sk_events.seq <= (SELECT a.head_seq FROM {s}.sk_agents a
                               WHERE a.agent_id = chr(1) || 'sk-audit/log')));

-- name: markers
-- the store-level markers (sk_markers: "encrypted", statekeeper.store.keyguard): every
-- role reads them (a store without a key must see that the store is encrypted, whatever
-- namespaces it may read); none clears one (only the owner's drop_all). Each is set
-- by the roles whose work sets it, as the store's other rows are, and every other name
-- only by the roles of admins of every namespace: a marker is the whole store's, and
-- one set by a tenant changes every tenant's store:
--   "audit-log": every role (set with the log's first entry, which every role may
--     append: statekeeper.governance.audit);
--   "encrypted": a role that may write some namespace (its first write with a key);
--   "feed-id:<generation>:<id>", the store's id (its change feed's, its key family:
--     postgres/feed_id.py): the first by a role that may write some namespace (the
--     store's first use), a new generation (a restore's renewal: every subscriber's
--     cursor is refused from then on, every tenant's) only by the admins of every
--     namespace (sk_log_admin), as only a store administrator's restore renews it
--     (governance/backup/restoretarget.py; was: any namespace's admin role, so one
--     tenant's admin refused every other tenant's cursors with one INSERT);
--   "legal-holds" (statekeeper.store.holds: set with the holds' first record, which
--     only the admins of every namespace write; set without them, every purge of
--     every tenant is refused as "the legal holds are missing") and any other name:
--     the admins of every namespace only (sk_log_admin)
ALTER TABLE {s}.sk_markers ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS sk_read ON {s}.sk_markers;
CREATE POLICY sk_read ON {s}.sk_markers FOR SELECT USING (true);
DROP POLICY IF EXISTS sk_set ON {s}.sk_markers;
CREATE POLICY sk_set ON {s}.sk_markers FOR INSERT WITH CHECK (
    name = 'audit-log'
    OR {s}.sk_log_admin()
    OR (name = 'encrypted'
        AND EXISTS (SELECT 1 FROM {s}.sk_grants g WHERE g.db_role = current_user AND g.perm >= 2))
    OR (pg_catalog."left"(name, 8) = 'feed-id:'
        AND NOT EXISTS (SELECT 1 FROM {s}.sk_markers m
                         WHERE pg_catalog."left"(m.name, 8) = 'feed-id:')
        AND EXISTS (SELECT 1 FROM {s}.sk_grants g WHERE g.db_role = current_user
                     AND g.perm >= 2)));

-- name: marker_role
GRANT SELECT, INSERT ON {s}.sk_markers TO {r};
REVOKE UPDATE, DELETE, TRUNCATE ON {s}.sk_markers FROM {r};

-- name: revoke
-- (the schema's USAGE only when nothing but the store is in it: row_security.py)
REVOKE ALL ON TABLE {tables} FROM {r};
REVOKE ALL ON SEQUENCE {sequences} FROM {r};
REVOKE EXECUTE ON FUNCTION {functions} FROM {r};
