"""A store whose server went back in time under a running process (Redis restarted from
an AOF/RDB missing the last second, a backup restored under a live service) is
:class:`RollbackDetected` on the next read or write of an agent this process saw
further along — not an older state served as current, and not new events written over
the seqs of acknowledged ones.

Before, the cached state's seq was missing, the store took it for a stream deleted by
someone else, served the older state and the next save wrote seq 6 over the
acknowledged seq 6, without a word (/tmp/trialfaults/redisrollback.py on a private
Redis: ``load 5 {'n': 5}``, then ``save ... first_seq=6``).

The memory engine stands in for a server restarted from an older copy: its streams are
copied at one moment and put back later (tests/backends/test_redis_rollback.py does it
with a real Redis).
"""

from __future__ import annotations

import copy
from itertools import count

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.errors import RollbackDetected


def _older_copy(backend: MemoryBackend) -> dict[str, object]:
    return copy.deepcopy(backend._streams)


def _restart_from(backend: MemoryBackend, streams: dict[str, object]) -> None:
    backend._streams = copy.deepcopy(streams)  # type: ignore[arg-type]


async def _rolled_back(store: StateStore, backend: MemoryBackend) -> None:
    """Agent ``a`` saved at seq 1..5, the server copied, seq 6..8 acknowledged, then
    the server restarted from the copy."""
    for n in range(1, 6):
        await store.save("a", {"n": n})
    older = _older_copy(backend)
    for n in range(6, 9):
        await store.save("a", {"n": n})
    assert (await store.load("a")).seq == 8
    _restart_from(backend, older)


async def test_a_load_after_the_server_lost_acknowledged_writes_raises() -> None:
    backend = MemoryBackend()
    async with StateStore(backend) as store:
        await _rolled_back(store, backend)
        with pytest.raises(RollbackDetected, match="saw seq 8 stored") as raised:
            await store.load("a")
        assert (raised.value.agent_id, raised.value.seq, raised.value.found) == ("a", 8, 5)
        # said once: later reads serve what is stored
        assert (await store.load("a")).data == {"n": 5}


async def test_a_save_after_the_server_lost_acknowledged_writes_raises_and_writes_nothing() -> None:
    backend = MemoryBackend()
    async with StateStore(backend) as store:
        await _rolled_back(store, backend)
        with pytest.raises(RollbackDetected):
            await store.save("a", {"n": 9})
        assert await backend.head("a") == 5


async def test_an_agent_deleted_and_created_again_elsewhere_is_not_a_rollback() -> None:
    backend = MemoryBackend()
    async with StateStore(backend) as store, StateStore(backend) as other:
        for n in range(1, 6):
            await store.save("a", {"n": n})
        await other.delete("a")
        await other.save("a", {"n": "new"})
        state = await store.load("a")
        assert (state.seq, state.data) == (1, {"n": "new"})


async def test_an_agent_this_store_deleted_and_created_again_is_not_a_rollback() -> None:
    stamps = count(1000)  # (an injected clock: the new stream may start at any time)
    async with StateStore("memory://", clock=lambda: 1000.0) as store:
        for n in range(1, 6):
            await store.save("a", {"n": n})
        await store.delete("a")
        await store.save("a", {"n": next(stamps)})
        assert (await store.load("a")).seq == 1
