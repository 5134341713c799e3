"""A closed store leaves no witness flush behind on its event loop.

The witness writes its marks a second after an append, on a timer of the loop the
store writes from; ``close`` writes them itself. The timer used to stay: on a loop that
runs on after the close (a LangGraph saver's loop, the application's), it fired and
started a flush task that nothing ran any more, reported at the interpreter's exit as
"Task was destroyed but it is pending! … HighWater._background()" (1 process in 16 of
a 4-worker LangGraph run at load 15). The loop's scheduled timers are inspected
instead of waiting out the second.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from statekeeper import StateStore


def _witness_timers(loop: asyncio.AbstractEventLoop, witness: object) -> list[object]:
    scheduled = getattr(loop, "_scheduled", [])  # (CPython's heap of TimerHandles)
    return [
        h
        for h in scheduled
        if not h.cancelled() and getattr(h._callback, "__self__", None) is witness
    ]


async def test_close_cancels_the_witness_flush_timer(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    store = StateStore(f"sqlite:///{tmp_path / 'w.db'}")
    await store.save("a", {"n": 1})
    witness = store._witness
    assert witness is not None
    assert _witness_timers(loop, witness)  # the next flush, due in a second
    await store.close()
    assert _witness_timers(loop, witness) == []
    assert witness._dirty == {}  # the close wrote the marks itself
