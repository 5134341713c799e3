"""The in-memory backend's change feed: functions bound on
:class:`~statekeeper.backends.memory.MemoryBackend`."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import secrets
from typing import TYPE_CHECKING

from ..records import (
    FeedRecord,
)
from .memory_stream import _PRUNED

if TYPE_CHECKING:
    from .memory import MemoryBackend


async def feed_id(self: MemoryBackend) -> str | None:
    self._check()
    if self._feed_id is None:
        self._feed_id = secrets.token_hex(8)
    return self._feed_id


async def renew_feed_id(self: MemoryBackend) -> str | None:
    self._check()
    self._feed_id = secrets.token_hex(8)
    return self._feed_id


async def read_feed(self: MemoryBackend, after: int = 0, limit: int = 500) -> list[FeedRecord]:
    self._check()
    out: list[FeedRecord] = []
    i = bisect.bisect_right(self._feed_positions, after)
    while i < len(self._feed_positions) and len(out) < limit:
        agent_id, seq, stream = self._feed_refs[i]
        event = stream.events[seq - 1]
        if self._streams.get(agent_id) is stream and event is not _PRUNED:
            out.append(FeedRecord(self._feed_positions[i], agent_id, event))
        i += 1
    return out


async def read_feed_page(
    self: MemoryBackend, after: int = 0, limit: int = 500
) -> tuple[list[FeedRecord], str | None]:
    page = await self.read_feed(after, limit)  # (no await inside: one moment)
    return page, (self._feed_id if page else None)


async def feed_bounds(self: MemoryBackend) -> tuple[int, int]:
    self._check()
    return self._feed_floor, max(self._feed_last, self._feed_floor)


async def trim_feed(self: MemoryBackend, through: int) -> int:
    self._check()
    return self._trim_feed(through)


def _trim_feed(self: MemoryBackend, through: int) -> int:
    i = bisect.bisect_right(self._feed_positions, through)
    for position, (agent_id, seq, _) in zip(
        self._feed_positions[:i], self._feed_refs[:i], strict=True
    ):
        if self._feed_index.get((agent_id, seq), (0,))[0] == position:
            del self._feed_index[(agent_id, seq)]  # (not a later entry's)
    del self._feed_positions[:i]
    del self._feed_refs[:i]
    self._feed_floor = max(self._feed_floor, through)
    return i


async def feed_position(self: MemoryBackend, agent_id: str, seq: int) -> int | None:
    self._check()
    found = self._feed_index.get((agent_id, seq))
    if found is None or found[1] is not self._streams.get(agent_id):
        return None  # (the agent as it is, not a deleted one)
    return found[0]


async def wait_feed(self: MemoryBackend, after: int, max_wait: float) -> None:
    self._check()
    if self._feed_last > after:
        return
    if self._feed_wakeup is None:
        self._feed_wakeup = asyncio.Event()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(self._feed_wakeup.wait(), max_wait)
