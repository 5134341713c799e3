"""The messages built for reads stay bounded when a read used another object.

The saver keeps the messages built for the latest checkpoint of the threads read last
(``_SaverReads._built_for``: ``_BUILT_THREADS`` threads, ``_BUILT_BYTES``). It tracked
one view per thread: a read that used another view of a cached thread (its head check
held while another task replaced the entry, see ``_SaverStreams._open``) took the
tracking from the cached view, whose built messages then were never dropped — for as
long as the thread stayed cached (up to ``cache_size`` threads, not 8 / 4 MB). The
hook holds the head check until the entry is replaced: the order is the same every run.
"""

from __future__ import annotations

import asyncio
from typing import Any

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import reads as saver_reads

from .conftest import bare_checkpoint, config, new_thread


async def test_a_cached_view_whose_tracking_another_read_took_is_still_trimmed(
    url: str,
) -> None:
    saver = await StatekeeperSaver.afrom_url(url)
    try:
        a = new_thread()
        await saver.aput(config(a), bare_checkpoint(), {"source": "loop", "step": 0}, {})
        assert await saver.aget_tuple(config(a)) is not None  # (a's view builds)
        held = saver._streams[a]
        entered, release = asyncio.Event(), asyncio.Event()
        original = saver._checked_head

        async def hold(st: Any) -> int:
            head = await original(st)
            if st is held and not entered.is_set():
                entered.set()
                await release.wait()
            return head

        saver._checked_head = hold  # type: ignore[method-assign]
        read = asyncio.create_task(saver.aget_tuple(config(a)))
        await entered.wait()  # the read holds the cached view ...
        saver._forget(a)  # ... and another task reads a into a view of its own
        assert await saver.aget_tuple(config(a)) is not None
        replaced = saver._streams[a]
        assert replaced is not held and replaced.built is not None
        release.set()
        assert await read is not None  # (served from the view it checked)
        for _ in range(saver_reads._BUILT_THREADS + 1):  # other threads read since
            t = new_thread()
            await saver.aput(config(t), bare_checkpoint(), {"source": "loop", "step": 0}, {})
            assert await saver.aget_tuple(config(t)) is not None
        assert saver._streams[a] is replaced  # (still cached)
        kept = [st for st in saver._streams.values() if st.built is not None]
        assert len(kept) <= saver_reads._BUILT_THREADS
        assert replaced.built is None
    finally:
        await saver.aclose()
