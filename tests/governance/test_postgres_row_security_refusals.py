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
from statekeeper.records import AppendRequest, StreamChange

from ..backends._services import POSTGRES_DSN
from .conftest import KEYRING, POLICY_TEXT
from .test_postgres_row_security import _as, _pg, setup

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


async def test_a_delete_refused_by_row_security_is_access_denied_naming_the_agent(
    setup: tuple[str, str, str],
) -> None:
    """Row-level security does not fail a DELETE the role may not make: it filters the
    rows away. A stream alice may read but not write was reported deleted-as-absent
    (``delete_agent`` False, ``StateStore.delete`` False) or as a conflict
    (``delete_agent_at``: "expected head seq 1, stored head is 1"), and stayed. Each
    is AccessDenied naming the agent and the role, as a refused write is."""
    schema, alice_role, _ = setup
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    async with StateStore(owner_url, keyring=KEYRING) as owner:
        await owner.save("acme/billing/b1", {"n": 1})  # alice: read only
        await owner.save("globex/eu/g1", {"n": 1})  # alice: nothing
        await owner.save("acme/support/t1", {"n": 1})  # alice: write
    await enforce_in_postgres(
        POSTGRES_DSN, schema, parse_policy(POLICY_TEXT), roles={"alice": alice_role}
    )
    raw = PostgresBackend(_as(alice_role), schema=schema, max_size=2)
    refused: list[AccessDenied] = []
    try:
        for agent in ("acme/billing/b1", "globex/eu/g1"):
            with pytest.raises(AccessDenied) as plain:
                await raw.delete_agent(agent)
            with pytest.raises(AccessDenied) as at_head:
                await raw.delete_agent_at(agent, 1)
            refused += [plain.value, at_head.value]
        assert await raw.delete_agent("acme/support/none") is False  # hers, not there
    finally:
        await raw.close()
    async with StateStore(f"{_as(alice_role)}?schema={schema}", keyring=KEYRING) as alice:
        with pytest.raises(AccessDenied) as through_store:
            await alice.delete("acme/billing/b1")
        refused.append(through_store.value)
        assert await alice.delete("acme/support/t1") is True  # her own namespace
    for error in refused:
        message = str(error)
        assert error.agent_id in ("acme/billing/b1", "globex/eu/g1"), message
        assert f"on agent {error.agent_id!r}" in message and alice_role in message
        assert error.permission == "write" and error.operation == "delete"
        assert "may not write that namespace" in message and "row-level security" in message
        _no_sql(message)
    async with StateStore(owner_url, keyring=KEYRING) as owner:  # both still there
        assert (await owner.load("acme/billing/b1")).data == {"n": 1}
        assert (await owner.load("globex/eu/g1")).data == {"n": 1}


async def test_a_delete_without_the_privilege_names_the_agent(
    setup: tuple[str, str, str],
) -> None:
    """A role granted SELECT only (no row-level security): the refused delete's
    AccessDenied named no agent ("may not delete_agent (...)")."""
    schema, _, reader = setup
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("acme/x", {"n": 1})
    _pg(
        f'GRANT USAGE ON SCHEMA "{schema}" TO "{reader}"',
        f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{reader}"',
    )
    raw = PostgresBackend(_as(reader), schema=schema, max_size=2)
    try:
        for delete in (raw.delete_agent("acme/x"), raw.delete_agent_at("acme/x", 1)):
            with pytest.raises(AccessDenied) as caught:
                await delete
            message = str(caught.value)
            assert caught.value.agent_id == "acme/x", message
            assert "may not delete on agent 'acme/x'" in message, message
            assert "lacks the privilege" in message and reader in message
            assert "DELETE" not in message and "CONTEXT" not in message  # (the table: named)
    finally:
        await raw.close()


@pytest.mark.parametrize("checked", [["globex/eu/g1"], ["acme/support/free", "globex/eu/g1"]])
async def test_an_absence_check_refused_by_row_security_names_the_refused_agent(
    setup: tuple[str, str, str], checked: list[str]
) -> None:
    """An ``append_together`` whose absence check (``StreamChange(absent=True)``, an
    import's or a restore's) names an agent the role may not write: the AccessDenied
    named the request's agent — one the role may write — not the refused one."""
    schema, alice_role, _ = setup
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("acme/support/t1", {"n": 1})
    await enforce_in_postgres(
        POSTGRES_DSN, schema, parse_policy(POLICY_TEXT), roles={"alice": alice_role}
    )
    raw = PostgresBackend(_as(alice_role), schema=schema, max_size=2)
    try:
        event = (await raw.read("acme/support/t1"))[0]
        mine = AppendRequest("acme/support/mine", 0, [event])
        absent = [StreamChange(agent, absent=True) for agent in checked]
        with pytest.raises(AccessDenied) as caught:
            await raw.append_together([mine], absent)
        assert await raw.head("acme/support/mine") == 0  # nothing written
    finally:
        await raw.close()
    message = str(caught.value)
    assert caught.value.agent_id == "globex/eu/g1", message
    assert "'globex/eu/g1'" in message and "acme/support/mine" not in message
    assert alice_role in message and "row-level security" in message
    _no_sql(message)
