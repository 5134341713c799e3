"""PostgreSQL migration 24 removes the head rows at 0 (claims: no stream) that writes
committed before migration 22, when row security refused a role deleting the audit log's
claim or a namespace's tombstones' (a claim a write made and did not take over stayed,
listed as a stream at head 0 until the next creation took it over). A row at 0 that
something names (an event, a snapshot, a lease, an idempotency record) stays, and so
does one a transaction holds now (SKIP LOCKED): the migration neither waits on it nor
removes a claim in use."""

from __future__ import annotations

import psycopg
import pytest

from statekeeper.backends.postgres import SCHEMA_VERSION, PostgresBackend

from ._services import POSTGRES_DSN

LOG = "\x01sk-audit/log"
TOMB = "\x01sk-feed/deleted/in/acme/-"


def _heads(conn: psycopg.Connection, s: str) -> dict[str, int]:
    rows = conn.execute(f"SELECT agent_id, head_seq FROM {s}.sk_agents").fetchall()
    return {str(a): int(h) for a, h in rows}


@pytest.mark.parametrize("partitions", [None, 4])
async def test_the_claims_left_before_migration_22_are_removed(
    schema: str, partitions: int | None
) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, partitions=partitions)
    await backend.open()
    await backend.close()
    s = f'"{schema}"'
    with (
        psycopg.connect(POSTGRES_DSN, autocommit=True) as conn,
        psycopg.connect(POSTGRES_DSN) as holder,
    ):
        rows = [LOG, TOMB, "acme/left", "acme/leased", "acme/keyed", "acme/held", "acme/real"]
        for agent in rows:
            conn.execute(
                f"INSERT INTO {s}.sk_agents (agent_id, head_seq, created_at, updated_at)"
                " VALUES (%s, 0, 0, 0)",
                (agent,),
            )
        conn.execute(f"UPDATE {s}.sk_agents SET head_seq = 1 WHERE agent_id = 'acme/real'")
        conn.execute(
            f"INSERT INTO {s}.sk_events (agent_id, seq, kind, ts, payload, checksum)"
            " VALUES ('acme/real', 1, 'k', 0, '', '')"
        )
        conn.execute(
            f"INSERT INTO {s}.sk_leases (agent_id, holder, token, expires_at)"
            " VALUES ('acme/leased', NULL, 3, 0)"
        )
        conn.execute(
            f"INSERT INTO {s}.sk_idempotency (agent_id, key, first_seq, last_seq)"
            " VALUES ('acme/keyed', 'k1', 1, 1)"
        )
        conn.execute(f"DELETE FROM {s}.sk_migrations WHERE version >= 24")  # (a store at 23)
        # a claim some transaction holds as the store upgrades
        holder.execute(f"SELECT 1 FROM {s}.sk_agents WHERE agent_id = 'acme/held' FOR UPDATE")
        upgraded = PostgresBackend(POSTGRES_DSN, schema=schema, partitions=partitions)
        await upgraded.open()  # (migrates: does not wait on the held claim)
        try:
            assert await upgraded.schema_version() == SCHEMA_VERSION  # (24 and after)
        finally:
            await upgraded.close()
        holder.rollback()
        assert _heads(conn, s) == {
            "acme/leased": 0,
            "acme/keyed": 0,
            "acme/held": 0,
            "acme/real": 1,
        }
