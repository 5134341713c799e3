"""Under row-level security a tenant's role cannot choose or move an event's feed
position.

The change feed orders every namespace's events by ``sk_events.position`` (the
sequence's value, the column's default). A role that may write ``acme`` could UPDATE
the position of an event of its own (or INSERT one with a position of its choosing):
one moved far ahead carried every subscriber past it, and the events of every other
namespace written afterwards, at positions below it, were never delivered — to any
tenant, an administrator's projections included — with no error. Two real roles on the
shared server (unique, dropped afterwards)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING
from .test_postgres_row_security import _as, _pg

POLICY = parse_policy('[principals.bot]\nwrite = ["acme/**"]\n')


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[str, str]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rlsf_")
    role = f"sk_rlsf_bot_{uuid.uuid4().hex[:8]}"
    _pg(f'CREATE ROLE "{role}" LOGIN')
    try:
        yield schema, role
    finally:
        drop_schema(schema)
        _pg(f'DROP OWNED BY "{role}"', f'DROP ROLE "{role}"')


async def test_a_tenant_role_cannot_move_the_feed_past_other_tenants_events(
    setup: tuple[str, str],
) -> None:
    import psycopg

    schema, role = setup
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    async with StateStore(owner_url, keyring=KEYRING) as owner:
        await owner.save("globex/g", {"n": 1})
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles={"bot": role})
    url = f"{_as(role)}?schema={schema}"
    async with StateStore(url, keyring=KEYRING, principal="bot", policy=POLICY,
                          audit=Audit()) as bot:  # fmt: skip
        await bot.save("acme/a", {"n": 1})  # its own namespace: written as usual
        await bot.save("acme/a", {"n": 2})
        assert (await bot.load("acme/a")).data == {"n": 2}
    s = f'"{schema}"'
    with psycopg.connect(_as(role), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                f"UPDATE {s}.sk_events SET position = 1000000000"
                " WHERE agent_id = 'acme/a' AND seq = 2"
            )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                f"INSERT INTO {s}.sk_events (agent_id, seq, kind, ts, payload, checksum, position)"
                " VALUES ('acme/b', 1, 'x', 0, '\\x00', '\\x00', 1000000000)"
            )
    async with StateStore(owner_url, keyring=KEYRING) as owner:
        seen = [(c.agent_id, c.seq) async for c in owner.subscribe(0, stop_at_head=True)]
        assert seen == [("globex/g", 1), ("acme/a", 1), ("acme/a", 2)]
        resume = (await owner.feed_bounds())[1]
        await owner.save("globex/g", {"n": 2})  # another tenant's, after the bot's
        later = [(c.agent_id, c.seq) async for c in owner.subscribe(resume, stop_at_head=True)]
        assert later == [("globex/g", 2)]
