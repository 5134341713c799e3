-- migration 9: store-level markers (Backend.read_marker / set_marker): named flags of
-- the whole store, set once, never cleared but by drop_all; "encrypted": the store
-- holds records encrypted with a key (statekeeper.store.keyguard)
CREATE TABLE IF NOT EXISTS {s}.sk_markers (
    name   text PRIMARY KEY,
    set_at timestamptz NOT NULL DEFAULT now()
);

-- a store already under row-level security (sql/row_security.sql installed before this
-- migration): the same policies and privileges install_row_security gives the table,
-- to every role that was given the store's tables, so their stores go on writing
DO $do$
DECLARE
    r name;
BEGIN
    IF to_regclass('{s}.sk_grants') IS NULL THEN
        RETURN;
    END IF;
    ALTER TABLE {s}.sk_markers ENABLE ROW LEVEL SECURITY;
    DROP POLICY IF EXISTS sk_read ON {s}.sk_markers;
    CREATE POLICY sk_read ON {s}.sk_markers FOR SELECT USING (true);
    DROP POLICY IF EXISTS sk_set ON {s}.sk_markers;
    CREATE POLICY sk_set ON {s}.sk_markers FOR INSERT WITH CHECK (
        EXISTS (SELECT 1 FROM {s}.sk_grants g WHERE g.db_role = current_user AND g.perm >= 2));
    FOR r IN
        SELECT DISTINCT ro.rolname
          FROM pg_class c, aclexplode(c.relacl) a, pg_roles ro
         WHERE c.oid = '{s}.sk_agents'::regclass AND a.privilege_type = 'SELECT'
           AND ro.oid = a.grantee AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT SELECT, INSERT ON {s}.sk_markers TO %I', r);
    END LOOP;
END
$do$;
