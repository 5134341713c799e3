"""Redis restarted from a persistence file that misses the last writes (an RDB taken a
moment before, as ``appendfsync everysec`` or ``save 60 1`` lose up to that much): the
store object that saw the lost writes acknowledged says so with
:class:`RollbackDetected` instead of serving the older state and writing over the
acknowledged seqs (tests/store/test_rollback_seen.py has the engine-free cases).
"""

from __future__ import annotations

import pytest

from statekeeper import StateStore
from statekeeper.errors import RollbackDetected

from ._services import private_redis

pytestmark = pytest.mark.slow  # (a private server, killed and started again)


@pytest.mark.parametrize("first", ["load", "save"])
async def test_a_restart_from_an_older_rdb_is_detected_by_the_store_that_saw_more(
    first: str,
) -> None:
    import redis.asyncio as aioredis

    with private_redis() as server:
        async with StateStore(f"{server.url}?prefix=t:&retry_timeout=30") as store:
            for n in range(1, 6):
                await store.save("a", {"n": n})
            client = aioredis.Redis.from_url(server.url)
            try:
                await client.save()  # dump.rdb in the server's directory: seq 1..5
            finally:
                await client.aclose()
            for n in range(6, 9):
                await store.save("a", {"n": n})  # acknowledged, then lost
            server.kill()
            server.start()  # loads the older dump.rdb
            with pytest.raises(RollbackDetected, match="saw seq 8 stored"):
                if first == "load":
                    await store.load("a")
                else:
                    await store.save("a", {"n": 9})
            state = await store.load("a")
            assert (state.seq, state.data) == (5, {"n": 5})
