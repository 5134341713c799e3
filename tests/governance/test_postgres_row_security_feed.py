"""PostgreSQL enforces the policy on the change feed too: two real database roles
against the shared server (unique roles and schema, dropped afterwards). A role reads
the feed events of its namespaces only, and only a store admin's role trims the feed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import StatekeeperError
from statekeeper.governance import parse_policy
from statekeeper.governance.policy_postgres import (
    enforce_in_postgres,
    stop_enforcing_in_postgres,
)

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING, POLICY_TEXT
from .test_postgres_row_security import _as, _pg


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rlsf_")
    suffix = uuid.uuid4().hex[:8]
    alice, ops = f"sk_rlsf_alice_{suffix}", f"sk_rlsf_ops_{suffix}"
    _pg(f'CREATE ROLE "{alice}" LOGIN', f'CREATE ROLE "{ops}" LOGIN')
    try:
        yield schema, alice, ops
    finally:
        drop_schema(schema)
        _pg(f'DROP OWNED BY "{alice}", "{ops}"', f'DROP ROLE "{alice}"', f'DROP ROLE "{ops}"')


async def test_the_feed_is_row_secured(roles: tuple[str, str, str]) -> None:
    schema, alice_role, ops_role = roles
    policy = parse_policy(POLICY_TEXT)  # alice reads acme/**, ops is admin of '**'
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    async with StateStore(owner_url, keyring=KEYRING) as owner:
        for i in range(3):
            await owner.save("acme/support/t1", {"n": i})
            await owner.save("globex/eu/g1", {"n": i})
    await enforce_in_postgres(
        POSTGRES_DSN, schema, policy, roles={"alice": alice_role, "ops": ops_role}
    )
    try:
        # a compromised process as alice: the raw backend, no policy in Python
        alice = PostgresBackend(_as(alice_role), schema=schema, max_size=2)
        try:
            seen = await alice.read_feed(0, 100)
            assert {r.agent_id for r in seen} == {"acme/support/t1"}
            assert len(seen) == 3
            floor, _ = await alice.feed_bounds()
            with pytest.raises(StatekeeperError, match="permission denied"):
                await alice.trim_feed(10**6)  # would compact the feed of every subscriber
            assert (await alice.feed_bounds())[0] == floor
        finally:
            await alice.close()
        async with StateStore(owner_url, keyring=KEYRING) as owner:
            assert (await owner.backend.feed_bounds())[0] == floor
            assert len(await owner.backend.read_feed(0, 100)) == 6  # nothing lost
        ops = PostgresBackend(_as(ops_role), schema=schema, max_size=2)
        try:
            assert len(await ops.read_feed(0, 100)) == 6
            _, last = await ops.feed_bounds()
            await ops.trim_feed(last)  # the store admin may
            assert (await ops.feed_bounds())[0] == last
        finally:
            await ops.close()
    finally:
        await stop_enforcing_in_postgres(POSTGRES_DSN, schema, [alice_role, ops_role])
