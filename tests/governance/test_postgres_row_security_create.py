"""Creating an agent as a principal that was given ``write`` (no ``read`` key) on a
PostgreSQL store under row-level security works as it does on SQLite: permissions are
ordered (``write`` includes ``read``), in the policy and in the database's grants
alike, so there is no write-only principal for a create's reads to trip on. A create
the role may not make is refused naming the missing permission, in the same words
whether or not another tenant's agent of that id exists (nothing tells the role its
ids)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import AccessDenied
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.policy_postgres import (
    enforce_in_postgres,
    stop_enforcing_in_postgres,
)

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING
from .test_postgres_row_security import _as, _pg

POLICY = parse_policy('[principals.writer]\nwrite = ["tb/**"]\n')


@pytest.fixture
def schema_and_role(tmp_path: Path) -> Iterator[tuple[str, str]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rlc_")
    role = f"sk_rlc_{uuid.uuid4().hex[:8]}"
    _pg(f'CREATE ROLE "{role}" LOGIN')
    try:
        yield schema, role
    finally:
        drop_schema(schema)
        _pg(f'DROP OWNED BY "{role}"', f'DROP ROLE "{role}"')


async def _creates(store: StateStore) -> list[object]:
    return [
        (await store.create("tb/new", {"n": 1})).last_seq,
        (await store.save("tb/saved", {"n": 1})).last_seq,
        (await store.save("tb/new", {"n": 2})).last_seq,
        (await store.load("tb/new")).data,
    ]


async def test_a_writer_creates_under_row_security_as_on_sqlite(
    schema_and_role: tuple[str, str], tmp_path: Path
) -> None:
    schema, role = schema_and_role
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("ta/x", {"owner": "ta"})
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles={"writer": role})
    try:
        options = {"keyring": KEYRING, "principal": "writer", "policy": POLICY}
        async with StateStore(f"{_as(role)}?schema={schema}", audit=Audit(), **options) as pg:
            on_pg = await _creates(pg)
        async with StateStore(f"sqlite:///{tmp_path / 's.db'}", audit=Audit(), **options) as lite:
            on_sqlite = await _creates(lite)
        assert on_pg == on_sqlite == [1, 1, 2, {"n": 2}]

        # the role alone (no policy in the process): refused by the database, naming
        # the permission, the same for an id another tenant holds and one nobody does
        async with StateStore(f"{_as(role)}?schema={schema}", keyring=KEYRING) as bare:
            said = []
            for agent_id in ("ta/x", "ta/nobody"):
                with pytest.raises(AccessDenied) as caught:
                    await bare.create(agent_id, {"planted": True})
                assert caught.value.permission == "write"
                said.append(str(caught.value).replace(agent_id, "ID"))
            assert said[0] == said[1] and "may not write that namespace" in said[0]
    finally:
        await stop_enforcing_in_postgres(POSTGRES_DSN, schema, [role])
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        assert (await owner.load("ta/x")).data == {"owner": "ta"}
        assert await owner.head("ta/nobody") == 0
