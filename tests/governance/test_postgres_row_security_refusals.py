"""Under PostgreSQL row-level security, a write or lease the database role may not make
raised BackendRejected carrying the server's text: ``new row violates row-level
security policy for table "sk_agents" CONTEXT: SQL statement "INSERT INTO ...`` with
the store's function signatures. It is AccessDenied naming the role and the agent and
saying the role may not write that namespace, with no SQL in it."""

from __future__ import annotations

import pytest

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import AccessDenied
from statekeeper.governance import parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres
from statekeeper.records import AppendRequest

from ..backends._services import POSTGRES_DSN
from .conftest import KEYRING, POLICY_TEXT
from .test_postgres_row_security import _as, setup

__all__ = ["setup"]  # the fixture: two real roles, a unique schema


def _no_sql(message: str) -> None:
    for leak in ("CONTEXT", "INSERT", "SQL statement", "PL/pgSQL", "sk_append", "sk_agents"):
        assert leak not in message, message


async def test_a_write_refused_by_row_security_is_access_denied(
    setup: tuple[str, str, str],
) -> None:
    schema, alice_role, _ = setup
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("acme/support/t1", {"n": 1})
    await enforce_in_postgres(
        POSTGRES_DSN, schema, parse_policy(POLICY_TEXT), roles={"alice": alice_role}
    )
    raw = PostgresBackend(_as(alice_role), schema=schema, max_size=2)
    try:
        stolen = (await raw.read("acme/support/t1"))[0]
        with pytest.raises(AccessDenied) as append:
            await raw.append(AppendRequest("globex/eu/new", 0, [stolen]))
        with pytest.raises(AccessDenied) as lease:
            await raw.acquire_lease("globex/eu/new", "worker-1", 10)
    finally:
        await raw.close()
    for caught in (append, lease):
        message = str(caught.value)
        assert caught.value.agent_id == "globex/eu/new"
        assert caught.value.permission == "write"
        assert alice_role in message and "'globex/eu/new'" in message
        assert "may not write that namespace" in message and "row-level security" in message
        _no_sql(message)
    # through the store too
    async with StateStore(f"{_as(alice_role)}?schema={schema}", keyring=KEYRING) as alice:
        with pytest.raises(AccessDenied, match="may not write that namespace") as saved:
            await alice.save("globex/eu/x", {"n": 1})
        _no_sql(str(saved.value))
        await alice.save("acme/support/t2", {"n": 1})  # her own namespace: fine
