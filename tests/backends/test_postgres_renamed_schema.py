"""A schema renamed under statekeeper (``ALTER SCHEMA prod RENAME TO prod_old``, then a
new store created as ``prod``): the renamed store's functions still name the old
schema's tables in their bodies, so opening it is refused with a
``ConfigurationError`` naming both, and nothing is written anywhere.

Before, it opened: a save of a new agent in ``prod_old`` was acknowledged and written
into the new ``prod`` store (invisible in ``prod_old``), a save of an existing one
raised a ``ConflictError`` ("stored head is 0") on every retry, and the change feed's
frontier was read from the other store's events.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from statekeeper import StateStore
from statekeeper.backends import open_backend
from statekeeper.errors import AgentNotFound, ConfigurationError

from ._services import POSTGRES_DSN, drop_schema


@pytest.fixture
def renamed(schema: str) -> Iterator[str]:
    name = f"{schema}_r"
    drop_schema(name)
    yield name
    drop_schema(name)


async def test_a_renamed_schema_is_refused_and_writes_nowhere(schema: str, renamed: str) -> None:
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}") as store:
        await store.save("old", {"v": 1})
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f'ALTER SCHEMA "{schema}" RENAME TO "{renamed}"')
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}") as store:
        await store.save("new", {"v": 1})
    url = f"{POSTGRES_DSN}?schema={renamed}"
    async with StateStore(url) as store:
        with pytest.raises(ConfigurationError, match=f"{renamed}.*{schema}"):
            await store.save("third", {"v": 1})
    async with StateStore(open_backend(url, readonly=True)) as store:
        with pytest.raises(ConfigurationError, match=f"{renamed}.*{schema}"):
            await store.load("old")
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}") as store:
        with pytest.raises(AgentNotFound):
            await store.load("third")
        assert [a.agent_id async for a in store.iter_agents()] == ["new"]
