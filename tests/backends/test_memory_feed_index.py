"""The memory engine's ``feed_position`` reads an index (agent, seq) -> position kept in
step with the feed, not the feed.

Before, each call scanned the whole feed: a replay of a feed with many re-created
agents (``store/feed_late.py`` asks ``feed_positions`` once a page, whose default asks
``feed_position`` per agent) grew with their number squared on ``memory://``
(``benchmarks/bench_feed_late_tombstones.py``). Work is counted here (feed entries
looked at), not timed; and the index is checked against the feed itself after every
kind of change."""

from __future__ import annotations

from typing import Any

from statekeeper.backends.memory import MemoryBackend
from statekeeper.testing import request, snapshot


class _Counted(list[Any]):
    """A list that counts the entries read from it."""

    reads = 0

    def __iter__(self) -> Any:
        for item in super().__iter__():
            _Counted.reads += 1
            yield item

    def __getitem__(self, i: Any) -> Any:
        found = super().__getitem__(i)
        _Counted.reads += len(found) if isinstance(i, slice) else 1
        return found


async def _recreated_feed(backend: MemoryBackend, agents: int, again: int) -> list[str]:
    ids = [f"a{n}" for n in range(agents)]
    for agent_id in ids:
        await backend.append(request(agent_id, 0, 2))
    for agent_id in ids:
        assert await backend.delete_agent(agent_id)
    for agent_id in ids[:again]:
        await backend.append(request(agent_id, 0))
    return ids[:again]


async def test_feed_positions_of_many_agents_do_not_scan_the_feed_per_agent() -> None:
    backend = MemoryBackend()
    again = await _recreated_feed(backend, 300, 200)
    feed_length = len(backend._feed_refs)
    backend._feed_refs = _Counted(backend._feed_refs)
    backend._feed_positions = _Counted(backend._feed_positions)
    _Counted.reads = 0
    found = await backend.feed_positions([(a, 1) for a in again])
    assert [found[(a, 1)] for a in again] == list(range(601, 801))
    # at most one pass over the feed (was: one pass per agent asked, 200 x 800 entries)
    assert _Counted.reads <= feed_length


def _scanned(backend: MemoryBackend, agent_id: str, seq: int) -> int | None:
    """feed_position as the feed itself says it (the scan it replaced)."""
    stream = backend._streams.get(agent_id)
    refs = zip(backend._feed_positions, backend._feed_refs, strict=True)
    found = [p for p, (a, s, at) in refs if a == agent_id and s == seq and at is stream]
    return found[-1] if found else None


async def _agrees(backend: MemoryBackend) -> None:
    for agent_id in ("a", "b", "c"):
        for seq in range(1, 8):
            assert await backend.feed_position(agent_id, seq) == _scanned(backend, agent_id, seq)


async def test_the_index_stays_in_step_with_every_change_of_the_feed() -> None:
    backend = MemoryBackend()
    await backend.append(request("a", 0, 3))
    await backend.append(request("b", 0, 2))
    await _agrees(backend)
    await backend.delete_agent("a")  # its entries no longer the agent's
    await _agrees(backend)
    await backend.append(request("a", 0, 2))  # created again: new positions
    await _agrees(backend)
    assert await backend.feed_position("a", 1) == 6
    await backend.trim_feed(6)  # b's and a's first gone from the feed
    await _agrees(backend)
    assert await backend.feed_position("a", 1) is None
    await backend.save_snapshot("b", snapshot(2))
    await backend.append(request("b", 2, 2, snap_at=4))
    await backend.prune("b", 2)  # (its first events pruned: positions kept, as before)
    await _agrees(backend)
    await backend.append_from_base(request("c", 3, 2), snapshot(3), raise_floor=True)
    await _agrees(backend)
    assert await backend.feed_position("c", 5) == 11
    await backend.delete_agent("c")
    await backend.append_from_base(request("c", 3, 1), snapshot(3))
    await _agrees(backend)
    await backend.drop_all()
    await _agrees(backend)
    await backend.append(request("b", 0))
    await _agrees(backend)
    assert await backend.feed_position("b", 1) == 13
    assert len(backend._feed_index) == 1  # (dropped and trimmed entries do not stay)
