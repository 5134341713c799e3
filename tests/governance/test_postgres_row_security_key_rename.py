"""Under PostgreSQL row-level security, ``rename_keys`` (``rekey``'s re-recording of
idempotency records) by a role that reads an agent but may not write it: both of its
statements (``key_rename``, ``key_drop``) were filtered to nothing and the call answered
0, a success — the record stayed under its old form, and once that key is retired a
retried write is stored a second time. It is AccessDenied naming the agent and the role,
nothing changed; the role's own namespace is renamed, and a rerun there is 0."""

from __future__ import annotations

import pytest

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import AccessDenied
from statekeeper.governance import parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres

from ..backends._services import POSTGRES_DSN
from .conftest import KEYRING, POLICY_TEXT
from .test_postgres_row_security import _as, setup

__all__ = ["setup"]  # the fixture: two real roles, a unique schema

READ_ONLY, MINE = "acme/billing/b1", "acme/support/t1"  # alice: read / write


async def _records(schema: str) -> dict[str, list[tuple[str, int, int]]]:
    owner = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=1)
    try:
        return {agent: await owner.idempotency_keys(agent) for agent in (READ_ONLY, MINE)}
    finally:
        await owner.close()


async def test_a_rename_the_role_may_not_make_is_access_denied(
    setup: tuple[str, str, str],
) -> None:
    schema, alice_role, _ = setup
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        for agent in (READ_ONLY, MINE):
            await owner.save(agent, {"n": 1}, idempotency_key="k0")
    await enforce_in_postgres(
        POSTGRES_DSN, schema, parse_policy(POLICY_TEXT), roles={"alice": alice_role}
    )
    before = await _records(schema)
    alice = PostgresBackend(_as(alice_role), schema=schema, max_size=1)
    try:
        assert await alice.idempotency_keys(READ_ONLY) == before[READ_ONLY]  # she reads it
        old = before[READ_ONLY][0][0]
        with pytest.raises(AccessDenied) as caught:
            await alice.rename_keys(READ_ONLY, [(old, "hmac:k2:new")])
        error = caught.value
        assert error.agent_id == READ_ONLY and error.operation == "rekey", str(error)
        assert alice_role in str(error) and "row-level security" in str(error)
        for leak in ("SQL statement", "UPDATE", "DELETE", "sk_idempotency"):
            assert leak not in str(error), str(error)
        assert await _records(schema) == before  # nothing changed
        mine = before[MINE][0][0]
        assert await alice.rename_keys(MINE, [(mine, "hmac:k2:mine")]) == 1
        assert await alice.rename_keys(MINE, [(mine, "hmac:k2:mine")]) == 0  # a rerun
    finally:
        await alice.close()
    after = await _records(schema)
    assert after[READ_ONLY] == before[READ_ONLY]
    assert [r[0] for r in after[MINE]] == ["hmac:k2:mine"]
