-- Migration 12: when each idempotency record was made (epoch seconds), what retention's
-- keys_ttl expires (Backend.expire_keys). A record is given the server's clock at the
-- transaction that writes it (the column's default: every insert of a record, in the
-- append functions and the kept records of a compacted stream's import, leaves it to
-- the default). Records made before this migration get their append's first event's
-- timestamp, or (that event compacted away) the time of the migration.
ALTER TABLE {s}.sk_idempotency
    ADD COLUMN IF NOT EXISTS created_at double precision NOT NULL
    DEFAULT extract(epoch FROM transaction_timestamp())::double precision;
UPDATE {s}.sk_idempotency k SET created_at = e.ts
  FROM {s}.sk_events e
 WHERE e.agent_id = k.agent_id AND e.seq = k.first_seq;
