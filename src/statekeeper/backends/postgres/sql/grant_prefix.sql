-- Migration 18: a row-security grant's literal prefix (sk_grants.prefix), which says
-- which retention run locks its role reads (sql/row_security_runlock.sql: the lock of
-- a namespace above the grant's prefix, at it or below it). Was: every role with an
-- admin grant read every run lock, so the admin of 'acme' listed the runs of 'globex'
-- (their namespaces and holders). The prefix is computed by the server from the
-- grant's pattern (a generated column: the grants a policy installed before keep
-- working, given theirs as this migration adds the column, and every grant installed
-- after gets its own); a schema without row security gets the function alone (its
-- sk_grants is created with the column when row security is installed,
-- sql/row_security.sql).
--
-- sk_grant_prefix(pattern): the longest run of whole literal segments the anchored
-- POSIX pattern starts with, each namespace it matches being that run or below it
-- ('acme/eu' of '^acme/eu(/.*)?$', of 'acme/eu/**'; 'acme' of '^acme/[^/]*$'); ''
-- when there is none ('^.*$', '^(.*/)?eu$') or the pattern is not one it can read (an
-- alternation '|' anywhere, a quantifier after a separator, an escape that is a class
-- such as '\d'): such a grant reads every lock, as before. The patterns
-- statekeeper.governance.policy.posix_pattern writes escape every character but
-- letters and digits with a backslash, and separate segments with a bare '/'.
-- (the text of sql/row_security.sql's block "grant_prefix", put here by schema.py)
@sk_grant_prefix@
ALTER TABLE IF EXISTS {s}.sk_grants ADD COLUMN IF NOT EXISTS
    prefix text GENERATED ALWAYS AS ({s}.sk_grant_prefix(pattern)) STORED;
-- the run locks' policy function, where row security installed it: read by prefix
-- (the text of sql/row_security_runlock.sql's block "function", put here by schema.py)
DO $do$
BEGIN
    IF to_regprocedure('{s}.sk_run_lock(text,integer)') IS NOT NULL THEN
        @sk_run_lock@
    END IF;
END
$do$;
