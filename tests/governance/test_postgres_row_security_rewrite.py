"""Row-level security holds for a page of rewrites (``rewrite_many``, one statement on
PostgreSQL): a role rewrites the agents it may write; a page with an agent of a
namespace it may not write is AccessDenied, none of the page written (one commit)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import AccessDenied
from statekeeper.governance import parse_policy
from statekeeper.governance.policy_postgres import (
    enforce_in_postgres,
    stop_enforcing_in_postgres,
)
from statekeeper.records import RawEvent, RewriteRequest

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING, POLICY_TEXT
from .test_postgres_row_security import _as, _pg


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[tuple[str, str]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rlsw_")
    alice = f"sk_rlsw_alice_{uuid.uuid4().hex[:8]}"
    _pg(f'CREATE ROLE "{alice}" LOGIN')
    try:
        yield schema, alice
    finally:
        drop_schema(schema)
        _pg(f'DROP OWNED BY "{alice}"', f'DROP ROLE "{alice}"')


async def test_a_page_of_rewrites_is_row_secured(roles: tuple[str, str]) -> None:
    schema, alice_role = roles
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    mine, theirs = "acme/support/t1", "globex/eu/g1"
    async with StateStore(owner_url, keyring=KEYRING) as owner:
        for i in range(2):
            await owner.save(mine, {"n": i})
            await owner.save(theirs, {"n": i})
        heads = {a: await owner.backend.head_tag(a) for a in (mine, theirs)}
        stored = {a: await owner.backend.read(a) for a in (mine, theirs)}
    await enforce_in_postgres(
        POSTGRES_DSN, schema, parse_policy(POLICY_TEXT), roles={"alice": alice_role}
    )
    try:
        # a compromised process as alice: the raw backend, no policy in Python
        alice = PostgresBackend(_as(alice_role), schema=schema, max_size=2)
        try:
            page = [
                RewriteRequest(
                    a,
                    heads[a][0],
                    heads[a][1],
                    (RawEvent(1, "patch", 1.0, b"rewritten", b"sum"),),
                    head_tag=b"new-tag",
                )
                for a in (mine, theirs)
            ]
            # theirs filtered away by row-level security: refused, the page one commit
            with pytest.raises(AccessDenied) as refused:
                await alice.rewrite_many(page)
            assert refused.value.agent_id == theirs
            assert await alice.rewrite_many(page[:1]) == [True]
        finally:
            await alice.close()
        owner_backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
        try:
            assert (await owner_backend.read(mine))[0].payload == b"rewritten"
            assert await owner_backend.head_tag(mine) == (heads[mine][0], b"new-tag")
            assert await owner_backend.read(theirs) == stored[theirs]
            assert await owner_backend.head_tag(theirs) == heads[theirs]
        finally:
            await owner_backend.close()
    finally:
        await stop_enforcing_in_postgres(POSTGRES_DSN, schema, [alice_role])
