"""A store a long-running worker keeps open and uses from one event loop after another
(``asyncio.run`` per job, or a loop made, run and closed per job) leaves no witness
guard behind per loop.

Was, with ``durability="async"`` and ``asyncio.run`` per job: the write-behind's flush
at each run's shutdown noted the marks that started the witness's guard on that loop,
after ``asyncio.run`` had cancelled the tasks it found — nothing ended it: each run
waited 10 s for it (the flush waits for the tasks its writes started), closed its loop
with it pending, and ``_GUARDS`` kept it (one more task and loop per job; "Task was
destroyed but it is pending! … statekeeper-witness" at the interpreter's exit). With a
loop per job closed without ``asyncio.run`` (``run_until_complete`` then ``close``),
any durability: one guard more per job, kept for ever.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from pathlib import Path

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.security import highwater


def _stranded() -> list[asyncio.Task[None]]:
    """The witness guards whose loop is closed: nothing will ever run them."""
    return [g for g in highwater._GUARDS if g.get_loop().is_closed()]


def _destroyed(caplog: pytest.LogCaptureFixture) -> list[str]:
    gc.collect()
    return [r.getMessage() for r in caplog.records if "destroyed" in r.getMessage()]


def test_asyncio_run_per_job_on_a_write_behind_store_leaves_no_guard(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="asyncio")
    url = f"sqlite:///{tmp_path / 'w.db'}"
    store = StateStore(url, durability="async")

    async def job(n: int) -> None:
        await store.save("a", {"n": n})  # buffered: stored by the run's shutdown

    try:
        for n in range(3):
            asyncio.run(job(n))
            assert _stranded() == []
            guard = store._witness._guard if store._witness is not None else None
            assert guard is None or guard.done()
    finally:
        asyncio.run(store.close())
    with SyncStateStore(url) as other:
        assert other.load("a").data == {"n": 2}  # every run's append stored
    filed = highwater.HighWater(f"{tmp_path / 'w.db'}{highwater.SUFFIX}", store.codec)
    filed.load()
    assert [m["seq"] for m in filed.marks(["a"])] == [3]  # and its mark written
    assert _destroyed(caplog) == []


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_loop_per_job_keeps_the_guards_bounded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, durability: str
) -> None:
    caplog.set_level(logging.ERROR, logger="asyncio")
    url = f"sqlite:///{tmp_path / 'w.db'}"
    store = StateStore(url, durability=durability)

    async def job(n: int) -> None:
        await store.save(f"a{n % 5}", {"n": n})
        await store.flush()

    def jobs(count: int) -> int:
        for n in range(count):
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(job(n))
            finally:
                loop.close()  # (no asyncio.run: its tasks are not cancelled)
        return len(highwater._GUARDS)

    try:
        after_n = jobs(20)
        after_2n = jobs(20)
        assert after_n <= 1 and after_2n <= 1, (after_n, after_2n)  # was 20, then 40
    finally:
        asyncio.run(store.close())
    assert _stranded() == []
    assert _destroyed(caplog) == []
