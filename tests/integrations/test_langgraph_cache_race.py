"""A read keeps working when the saver's cached document changes during it.

A ``get_tuple`` of a cached thread reads the stored head to check the cached document
(``_SaverStreams._open``). While that read is in flight, other tasks of the same saver
run: a LangGraph graph's parallel subgraph runs (one per ``Send``) read and write the
same thread at once, and any read of another thread may evict the entry from the
cache. Before, the read then moved the missing entry to the cache's end: a
``KeyError`` raised into the graph run (seen on the PostgreSQL map-reduce migration
test in CI). The hook holds the head read until the other task has run, so the order
is the failing one every time, with no timing.
"""

from __future__ import annotations

import asyncio
from typing import Any

from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import bare_checkpoint, config, new_thread


async def _put(saver: StatekeeperSaver, thread: str) -> str:
    done = await saver.aput(config(thread), bare_checkpoint(), {"source": "loop", "step": 0}, {})
    return str(done["configurable"]["checkpoint_id"])


def _hold_head_read(saver: StatekeeperSaver, thread: str) -> tuple[asyncio.Event, asyncio.Event]:
    """Make the next head check of ``thread``'s cached document wait for ``release``
    once it has begun (``entered``)."""
    entered, release = asyncio.Event(), asyncio.Event()
    original = saver._checked_head

    async def held(st: Any) -> int:
        if st.thread_id == thread and not entered.is_set():
            entered.set()
            await release.wait()
        return await original(st)

    saver._checked_head = held  # type: ignore[method-assign]
    return entered, release


async def test_a_read_whose_entry_is_evicted_meanwhile_returns_the_thread(url: str) -> None:
    saver = await StatekeeperSaver.afrom_url(url, cache_size=1)
    try:
        a, b = new_thread(), new_thread()
        id_a = await _put(saver, a)
        id_b = await _put(saver, b)
        assert (await saver.aget_tuple(config(a))) is not None  # a cached (b evicted)
        entered, release = _hold_head_read(saver, a)
        read_a = asyncio.create_task(saver.aget_tuple(config(a)))
        await entered.wait()
        got_b = await saver.aget_tuple(config(b))  # caches b: a evicted (cache_size=1)
        release.set()
        got_a = await read_a
        assert got_a is not None and got_a.checkpoint["id"] == id_a
        assert got_b is not None and got_b.checkpoint["id"] == id_b
        # the saver goes on serving both threads
        assert (await saver.aget_tuple(config(a))).checkpoint["id"] == id_a  # type: ignore[union-attr]
        assert (await saver.aget_tuple(config(b))).checkpoint["id"] == id_b  # type: ignore[union-attr]
    finally:
        await saver.aclose()
