-- migration 8: the agents by last write (the inspector's "recently written" and
-- "idle" sorts read it as a keyset range; see Backend.list_agents_by_write)
CREATE INDEX IF NOT EXISTS sk_agents_written ON {s}.sk_agents (updated_at, agent_id);
