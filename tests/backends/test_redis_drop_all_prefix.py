"""``drop_all`` deletes its own store's keys, not every key under its prefix: a store at
``app:`` used to delete the store at ``app:v2:`` with its own (one ``SCAN`` of
``app:*``), which then opened as a new, empty store — its agents gone without an error.
"""

from __future__ import annotations

import pytest

pytest.importorskip("redis")

from statekeeper.backends.redis import RedisBackend
from statekeeper.testing import request

from ._services import REDIS_URL


@pytest.mark.parametrize("shards", [None, 3], ids=["plain", "sharded"])
@pytest.mark.parametrize("inner", ["v2:", "v2", "tenant:a"])
async def test_drop_all_leaves_a_store_whose_prefix_starts_with_its_own(
    prefix: str, shards: int | None, inner: str
) -> None:
    outer = RedisBackend(REDIS_URL, prefix=prefix, shards=shards)
    other = RedisBackend(REDIS_URL, prefix=prefix + inner, shards=shards)
    try:
        await other.append(request("kept", 0, 3))
        lease = await other.acquire_lease("kept", "worker", 30)
        await outer.append(request("dropped", 0, 2))
        assert await outer.drop_all() == 1
        assert await outer.head("dropped") == 0
        assert await other.head("kept") == 3  # (before: StoreLost, its keys deleted)
        assert [a.agent_id for a in await other.list_agents()] == ["kept"]
        assert (await other.get_lease("kept")) == lease
    finally:
        await outer.close()
        await other.close()
