"""Fixtures for the store tests: a fake clock, backend URLs, store factories."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from statekeeper.backends.base import Backend, Health
from statekeeper.records import AgentInfo, AppendRequest, AppendResult, RawEvent, RawSnapshot


class CountingBackend(Backend):
    """Wraps a backend and counts calls and events read; optionally yields at every
    call (``yield_every_call``) the way a networked engine would between request and
    reply, so interleavings that a purely in-process engine never shows can happen."""

    def __init__(self, inner: Backend, *, yield_every_call: bool = False) -> None:
        self.inner = inner
        self.name = inner.name
        self.yield_every_call = yield_every_call
        self.calls: dict[str, int] = {}
        self.events_read = 0

    async def _enter(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.yield_every_call:
            await asyncio.sleep(0)  # a scheduling point, as a network round trip has

    async def append(self, request: AppendRequest) -> AppendResult:
        await self._enter("append")
        return await self.inner.append(request)

    async def append_batch(self, requests: Any) -> list[AppendResult | BaseException]:
        await self._enter("append_batch")
        return await self.inner.append_batch(requests)

    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        await self._enter("lookup_key")
        return await self.inner.lookup_key(agent_id, key)

    async def head(self, agent_id: str) -> int:
        await self._enter("head")
        return await self.inner.head(agent_id)

    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]:
        await self._enter("read")
        events = await self.inner.read(agent_id, after_seq, to_seq, limit)
        if self.yield_every_call:
            await asyncio.sleep(0)  # the reply arrives later than the request
        self.events_read += len(events)
        return events

    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        await self._enter("seq_at")
        return await self.inner.seq_at(agent_id, timestamp)

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        await self._enter("save_snapshot")
        await self.inner.save_snapshot(agent_id, snapshot)

    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None:
        await self._enter("latest_snapshot")
        return await self.inner.latest_snapshot(agent_id, at_or_below)

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        await self._enter("list_agents")
        return await self.inner.list_agents(after, limit)

    async def count_agents(self) -> int:
        await self._enter("count_agents")
        return await self.inner.count_agents()

    async def delete_agent(self, agent_id: str) -> bool:
        await self._enter("delete_agent")
        return await self.inner.delete_agent(agent_id)

    async def health(self) -> Health:
        return await self.inner.health()

    async def close(self) -> None:
        await self.inner.close()


async def wait_until(
    check: Callable[[], Awaitable[bool]], *, within: float = 10.0, what: str = "condition"
) -> None:
    """Poll ``check`` until it is true; fail after ``within`` seconds (a bound, not a delay)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await check():
        if loop.time() > deadline:
            pytest.fail(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.005)
