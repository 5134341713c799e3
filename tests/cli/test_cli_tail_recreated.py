"""``tail -f`` of an agent deleted and written again (an expired session started anew
under its id, say) prints the new stream from its first event. It used to remember
only the last seq printed: the new stream's events up to that seq were never shown
(all of them, when it was no longer than the old one). And ``tail -f AGENT`` goes on
past events retention trimmed (it ended with ``HistoryCompacted``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.cli.tail import _follow_agent, _follow_store, _heads, _mark
from statekeeper.records import Event


class Seen:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.changed = asyncio.Event()

    def __call__(self, ev: Event) -> None:
        self.events.append(ev)
        self.changed.set()

    async def until(self, done: Callable[[], bool], follow: asyncio.Task[None]) -> None:
        """Wait for ``done()``; the follow's own error if it ends first."""
        while not done():
            self.changed.clear()
            changed = asyncio.ensure_future(self.changed.wait())
            await asyncio.wait({changed, follow}, timeout=60, return_when="FIRST_COMPLETED")
            changed.cancel()
            if follow.done():
                follow.result()
                raise AssertionError("the follow ended")

    def of(self, agent_id: str) -> list[tuple[int, Any]]:
        return [(e.seq, e.type) for e in self.events if e.agent_id == agent_id]


async def _recreate(store: StateStore) -> None:
    await store.delete("a")
    for n in range(3):  # longer than the old stream: seqs 1..3
        await store.save("a", {"new": n})


@pytest.mark.parametrize("whole_store", [False, True])
async def test_follow_prints_a_recreated_stream_from_its_start(
    whole_store: bool, tmp_path: Any
) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 't.db'}") as store:
        await store.save("a", {"old": 1})
        await store.save("a", {"old": 2})
        # what the follow starts from: the stream as printed (two events)
        heads = await _heads(store)
        mark = await _mark(store, "a", 2)
        await _recreate(store)  # between two polls
        seen = Seen()
        if whole_store:
            follow = _follow_store(store, heads, seen, 0.01, set())  # type: ignore[arg-type]
        else:
            follow = _follow_agent(store, "a", (2, mark), seen, 0.01)  # type: ignore[arg-type]
        task = asyncio.create_task(follow)
        try:
            await seen.until(lambda: (3, "patch") in seen.of("a"), task)
            # every event of the new stream, in order, none twice
            assert seen.of("a") == [(1, "created"), (2, "patch"), (3, "patch")]
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_follow_of_one_agent_goes_on_past_events_trimmed_by_retention(
    tmp_path: Any,
) -> None:
    from statekeeper.governance.retention import RetentionPolicy, apply_retention

    async with StateStore(f"sqlite:///{tmp_path / 't.db'}") as store:
        for n in range(3):
            await store.save("a", {"n": n})
        mark = await _mark(store, "a", 3)
        for n in range(3, 6):
            await store.save("a", {"n": n})
        await apply_retention(store, RetentionPolicy.parse("*  keep_last=2"))
        assert await _mark(store, "a", 3) is None  # the last event printed is gone
        seen = Seen()
        task = asyncio.create_task(_follow_agent(store, "a", (3, mark), seen, 0.01))  # type: ignore[arg-type]
        try:
            await seen.until(lambda: (6, "patch") in seen.of("a"), task)
            # not the same stream started over: what is kept after seq 3, once
            assert seen.of("a") == [(5, "patch"), (6, "patch")]
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
