"""Redis answers a cold load's read (head, head tag, newest snapshot, the events after
it) in one round trip: one script, one consistent read (issue 11)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("redis")

from statekeeper.backends.base import Backend
from statekeeper.backends.redis import RedisBackend
from statekeeper.store import StateStore

from ._services import REDIS_URL


class Counted:
    """Counts the commands a backend's client sends to the (real) server."""

    def __init__(self, backend: RedisBackend, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[str] = []
        client = backend._client
        real: Callable[..., Awaitable[Any]] = client.execute_command

        async def counting(*args: Any, **kwargs: Any) -> Any:
            self.sent.append(str(args[0]))
            return await real(*args, **kwargs)

        monkeypatch.setattr(client, "execute_command", counting)


@pytest.mark.parametrize("events", [1, 5, 7, 12])
async def test_read_state_is_one_round_trip_and_matches_the_two_reads(
    prefix: str, monkeypatch: pytest.MonkeyPatch, events: int
) -> None:
    async with StateStore(
        RedisBackend(REDIS_URL, prefix=prefix), snapshot_every=5
    ) as writer:  # real records: chained events, snapshots, head tags
        for n in range(events):
            await writer.save("a1", {"n": n, "log": list(range(n))})
    backend = RedisBackend(REDIS_URL, prefix=prefix)
    try:
        two_reads = await Backend.read_state(backend, "a1")  # head_tag + read_latest
        counted = Counted(backend, monkeypatch)
        state = await backend.read_state("a1")
        assert len(counted.sent) == 1, counted.sent
        assert state == two_reads
        head, tag, snapshot, tail = state
        assert head == events and tag is not None
        assert (snapshot.seq if snapshot else 0) == events - events % 5
        assert [e.seq for e in tail] == list(range(events - events % 5 + 1, events + 1))
        assert await backend.read_state("nobody") == (0, None, None, [])
        assert len(counted.sent) == 2
    finally:
        await backend.close()


async def test_a_cold_load_on_redis_is_one_round_trip(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = RedisBackend(REDIS_URL, prefix=prefix)
    async with StateStore(RedisBackend(REDIS_URL, prefix=prefix)) as writer:
        await writer.save("a2", {"step": 1})
        await writer.save("a2", {"step": 2})
    async with StateStore(backend, cache_size=0) as reader:
        await reader.load("a2")  # scripts loaded, connection made
        counted = Counted(backend, monkeypatch)
        assert (await reader.load("a2")).data == {"step": 2}
        assert len(counted.sent) == 1, counted.sent
