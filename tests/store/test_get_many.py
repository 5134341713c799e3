"""``StateStore.get_many``: many agents' latest states read together (issue 14: what a
migration reads a page of agents with) say exactly what ``get`` says of each."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import IntegrityError, InvalidAgentId
from statekeeper.security import Keyring, generate_key

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres


async def _fill(store: StateStore) -> None:
    for i in range(12):
        await store.save(f"a{i:02d}", {"n": i, "items": list(range(i))})
        for j in range(i % 7):  # some streams cross the snapshot interval
            await store.save(f"a{i:02d}", {"n": i, "items": list(range(i)), "j": j})
    await store.save("gone", {"x": 1})
    await store.delete("gone")


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgres"])
async def test_get_many_equals_get_of_each_agent(tmp_path: Path, engine: str) -> None:
    url = "memory://" if engine == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    if engine == "postgres":
        require_postgres()
        url = f"{POSTGRES_DSN}?schema={namespace(tmp_path)}"
    try:
        await _equal(url, engine)
    finally:
        if engine == "postgres":
            drop_schema(namespace(tmp_path))


async def _equal(url: str, engine: str) -> None:
    key = Keyring({"k1": generate_key()}, active="k1")
    async with StateStore(url, keyring=key, snapshot_every=4) as store:
        await _fill(store)
        ids = ["a05", "nobody", "a00", "gone", "a11", "a05"]
        expected = [await store.get(a) for a in ids]
        if engine != "memory":  # a cold cache: every state is folded from storage
            await store.close()
            store = StateStore(url, keyring=key, snapshot_every=4)
        got = await store.get_many(ids)
        assert got == expected
        assert got[1] is None and got[3] is None
        assert got[0] is not None and got[0].data == {"n": 5, "items": [0, 1, 2, 3, 4], "j": 4}
        assert await store.get_many([]) == []
        with pytest.raises(InvalidAgentId):
            await store.get_many(["ok", ""])
        await store.close()


async def test_get_many_verifies_what_it_reads(tmp_path: Path) -> None:
    """A batched read checks records and head tags as a single read does: a head tag
    from another stream is refused, not served."""
    import sqlite3

    url = f"sqlite:///{tmp_path / 's.db'}"
    key = Keyring({"k1": generate_key()}, active="k1")
    async with StateStore(url, keyring=key) as store:
        await store.save("a", {"n": 1})
        await store.save("b", {"n": 2})
        await store.save("b", {"n": 3})
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute(
        "UPDATE sk_agents SET head_tag = (SELECT head_tag FROM sk_agents WHERE agent_id = 'b')"
        " WHERE agent_id = 'a'"
    )
    conn.commit()
    conn.close()
    async with StateStore(url, keyring=key) as store:
        with pytest.raises(IntegrityError):
            await store.get_many(["b", "a"])
