"""A backend opened with ``feed=0`` writes no feed entries; on a store that keeps a
change feed its writes were missing from it — a follower read the positions of the
other writers' events and never the ``feed=0`` writer's, with no gap to see. It is
refused when it opens such a store (``ConfigurationError``), with nothing written; on a
store without a feed (positions never handed out: a look by a backend with the feed
does not make one) it writes as before, and a hot tier (``evictable``, a copy) is not
checked."""

from __future__ import annotations

import pytest

pytest.importorskip("redis")

from statekeeper import StateStore
from statekeeper.backends import open_backend
from statekeeper.errors import ConfigurationError

from ._services import REDIS_URL


@pytest.mark.parametrize("shards", ["", "&shards=2"], ids=["plain", "sharded"])
async def test_a_writer_without_the_feed_is_refused_on_a_store_that_keeps_one(
    prefix: str, shards: str
) -> None:
    url = f"{REDIS_URL}?prefix={prefix}{shards}"
    async with StateStore(url, witness=False) as kept:
        await kept.save("x", {"n": 1})
        async with StateStore(url + "&feed=0", witness=False) as off:
            with pytest.raises(ConfigurationError, match="keeps a change feed"):
                await off.save("y", {"n": 1})
            with pytest.raises(ConfigurationError, match="keeps a change feed"):
                await off.save("x", {"n": 2})
        assert [a.agent_id for a in await kept.backend.list_agents()] == ["x"]
        assert (await kept.load("x")).data == {"n": 1}
        reader = open_backend(url + "&feed=0", readonly=True)  # (reads write nothing)
        async with StateStore(reader, witness=False) as ro:
            assert (await ro.load("x")).data == {"n": 1}


async def test_a_look_by_a_backend_with_the_feed_does_not_refuse_a_store_without_one(
    prefix: str,
) -> None:
    url = f"{REDIS_URL}?prefix={prefix}"
    async with StateStore(url + "&feed=0", witness=False) as off:
        await off.save("y", {"n": 1})
    async with StateStore(url, witness=False) as look:  # (a head read: no position taken)
        assert await look.backend.head("y") == 1
    async with StateStore(url + "&feed=0", witness=False) as off:
        await off.save("y", {"n": 2})
        assert (await off.load("y")).data == {"n": 2}


async def test_a_store_without_a_feed_is_written_without_one(prefix: str) -> None:
    url = f"{REDIS_URL}?prefix={prefix}&feed=0"
    async with StateStore(url, witness=False) as off:
        await off.save("y", {"n": 1})
    async with StateStore(url, witness=False) as off:
        await off.save("y", {"n": 2})
        assert (await off.load("y")).data == {"n": 2}
