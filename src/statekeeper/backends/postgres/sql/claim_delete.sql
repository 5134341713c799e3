-- Migration 22: under row-level security, a role deletes the head rows at 0 it may
-- write - claims (a write's first lock, migration 20), no stream - the audit log's and
-- a namespace's tombstones' too.
--
-- The table's policy sk_delete (sql/row_security.sql) keeps a role that is not a log
-- admin from deleting the audit log's head row or a namespace's tombstones' (a delete's
-- notice must stay). A claim of one of them was not deleted again, so a write that
-- claimed it and did not take it over committed it: a batch creating a tombstone
-- stream whose fence was refused, a fenced creation refused, an absence check of one
-- (tests/governance/test_postgres_row_security_claim_left.py). The row stayed, a stream
-- at head 0 with no event, in every listing of the backend. A head row at 0 holds
-- nothing to keep: its own policy lets the role that may write the agent delete it.
-- A schema without row security (no policy sk_delete on sk_agents) is left as it is;
-- row security installed later installs this policy (the block audit_head).
DO $do$
BEGIN
    IF to_regprocedure('{s}.sk_tombstones(text)') IS NOT NULL
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_policy p
                    WHERE p.polrelid = '{s}.sk_agents'::regclass
                      AND p.polname = 'sk_delete') THEN
        DROP POLICY sk_delete ON {s}.sk_agents;
        CREATE POLICY sk_delete ON {s}.sk_agents FOR DELETE
            USING ({s}.sk_allowed(agent_id, 2)
                   AND (head_seq = 0
                        OR (agent_id <> chr(1) || 'sk-audit/log'
                            AND (NOT {s}.sk_tombstones(agent_id) OR {s}.sk_log_admin()))));
    END IF;
END
$do$;
