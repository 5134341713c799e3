"""Redis restarted from a persistence file that misses the last writes, on a private
server: the store that saw the lost writes says so with :class:`RollbackDetected` also

* when another process wrote past the old head before it looked again (the seq is no
  longer lower, the history under it is another), and
* when the server lost the whole agent (its RDB was taken before the agent existed),
  with the store's witness file to tell that from a delete elsewhere

— instead of serving the other history, or "no such agent", and writing over the
acknowledged seqs (tests/store/test_rollback_seen_past.py has the engine-free cases).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import RollbackDetected

from ._services import private_redis

pytestmark = pytest.mark.slow  # (a private server, killed and started again)


async def _dump(url: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    try:
        await client.save()  # dump.rdb in the server's directory
    finally:
        await client.aclose()


@pytest.mark.parametrize("first", ["load", "save"])
async def test_a_stream_written_past_what_the_restart_lost_is_detected(first: str) -> None:
    with private_redis() as server:
        url = f"{server.url}?prefix=t:&retry_timeout=30"
        async with StateStore(url) as store, StateStore(url) as other:
            for n in range(1, 6):
                await store.save("a", {"n": n})
            await _dump(server.url)  # seq 1..5
            for n in range(6, 9):
                await store.save("a", {"n": n})  # acknowledged, then lost
            server.kill()
            server.start()  # loads the older dump.rdb
            for n in range(6, 11):
                await other.save("a", {"other": n})  # past seq 8, another history
            with pytest.raises(RollbackDetected, match="another event at seq 8") as raised:
                if first == "load":
                    await store.load("a")
                else:
                    await store.save("a", {"n": 9})
            assert (raised.value.seq, raised.value.found) == (8, 10)
            state = await store.load("a")
            assert (state.seq, state.data) == (10, {"other": 10})


@pytest.mark.parametrize("first", ["load", "save"])
async def test_an_agent_the_restart_lost_whole_is_detected_with_a_witness(
    first: str, tmp_path: Path
) -> None:
    with private_redis() as server:
        url = f"{server.url}?prefix=t:&retry_timeout=30"
        async with StateStore(url, witness=tmp_path / "witness") as store:
            await store.save("b", {"n": 1})
            await _dump(server.url)  # before agent a existed
            for n in range(1, 4):
                await store.save("a", {"n": n})
            assert store.witness is not None
            await store.witness.flush()  # a's marks written (at most 1 s later anyway)
            server.kill()
            server.start()
            with pytest.raises(RollbackDetected, match="the agent is gone") as raised:
                if first == "load":
                    await store.load("a")
                else:
                    await store.save("a", {"n": 4})
            assert (raised.value.seq, raised.value.found) == (3, 0)
            assert await store.get("a") is None  # said once; nothing was written
