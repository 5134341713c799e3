"""A backup whose thread its stop cannot reach (a write the kernel does not give back:
a stalled network file system, a device) can still be walked away from: the first
cancel asks the thread to stop and waits; a second cancel raises
:class:`~statekeeper.errors.ThreadStillRunning`, naming what the thread holds, while
the thread still runs. Nothing it holds is closed under it (its temporary backup
file, the page snapshot it reads): the thread closes and removes them when it ends.

Before: ``run_joined`` waited for the thread whatever came, so Ctrl-C twice hung
(``asyncio.run``'s clean-up cancelled the task again, and waited again); the thread
was also in asyncio's default executor, which ``asyncio.run`` waits for at its end."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore, errors
from statekeeper.backends.sqlite import pages as sqlite_pages
from statekeeper.governance.backup import BackupKey, backup, filecopy
from statekeeper.governance.backup import writer as backup_writer

from ._point_in_time import keyring

_WAIT = 60  # (a bound on a hang if the code breaks, never a timing of the behaviour)
_ESCAPE = 20  # (the same: a second cancel ends the wait on the next turn of the loop)


def _gone(check: Any) -> bool:
    """Poll ``check()`` (a thread's clean-up, run by it after its call) to a deadline."""
    pause = threading.Event()
    for _ in range(_WAIT * 100):
        if check():
            return True
        pause.wait(0.01)
    return False


async def test_a_second_cancel_walks_away_from_a_stuck_page_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bkey = BackupKey(os.urandom(32))
    out = tmp_path / "out"
    out.mkdir()
    inside, release, ended = threading.Event(), threading.Event(), threading.Event()
    closed: list[bool] = []  # whether the snapshot was closed, as the thread went on
    real_pages, real_close = filecopy.write_pages, sqlite_pages.PageSnapshot.close

    def stuck(writer: Any, snapshot: Any, *args: Any) -> Any:
        """A write its stop does not reach: held until the test lets it go."""
        inside.set()
        try:
            assert release.wait(_WAIT)
            closed.append(getattr(snapshot, "_test_closed", False))
            return real_pages(writer, snapshot, *args)
        finally:
            ended.set()

    def close(snapshot: Any) -> None:
        snapshot._test_closed = True
        real_close(snapshot)

    monkeypatch.setattr(backup_writer, "write_pages", stuck)
    monkeypatch.setattr(sqlite_pages.PageSnapshot, "close", close)
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        for i in range(20):
            await src.save(f"a{i:02d}", {"i": i, "pad": "x" * 300})
        task = asyncio.ensure_future(backup(src, out / "b.skb", bkey))
        assert await asyncio.to_thread(inside.wait, _WAIT)
        task.cancel()  # the first: the thread asked to stop, waited for
        await asyncio.wait({task}, timeout=0)  # (the loop turns: the stop asked)
        assert not task.done()
        temporaries = sorted(out.iterdir())
        assert len(temporaries) == 1 and temporaries[0].name.startswith(".b.skb.")
        task.cancel()  # the second: not waited for any more
        done, _ = await asyncio.wait({task}, timeout=_ESCAPE)
        if not done:  # (the old code: let the thread go, so the test ends)
            release.set()
        assert done, "a second cancel still waited for the stuck thread"
        assert not ended.is_set()
        raised = task.exception()
        assert isinstance(raised, getattr(errors, "ThreadStillRunning", ())), repr(raised)
        assert "b.skb" in str(raised) and "page snapshot" in str(raised)
        # nothing closed under the running thread: its file is there, its snapshot open
        assert sorted(out.iterdir()) == temporaries
        release.set()
        assert await asyncio.to_thread(ended.wait, _WAIT)
        assert closed == [False]
        # ...and closed and removed by the thread once it ended
        assert await asyncio.to_thread(_gone, lambda: not any(out.iterdir()))
        monkeypatch.undo()
        done_again = await backup(src, out / "again.skb", bkey)
        assert done_again.agents == 20


async def test_a_first_cancel_still_waits_for_a_thread_that_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The common case is as before: one cancel, the thread stops (the snapshot's
    stop), the cancellation comes out once it has ended, nothing left behind."""
    bkey = BackupKey(os.urandom(32))
    out = tmp_path / "out"
    out.mkdir()
    inside, ended = threading.Event(), threading.Event()
    real_pages = filecopy.write_pages

    def held(writer: Any, snapshot: Any, *args: Any) -> Any:
        inside.set()
        try:
            assert snapshot._cancelled.wait(_WAIT)  # (its stop: the cancel's)
            return real_pages(writer, snapshot, *args)
        finally:
            ended.set()

    monkeypatch.setattr(backup_writer, "write_pages", held)
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await src.save("a", {"i": 1})
        task = asyncio.ensure_future(backup(src, out / "b.skb", bkey))
        assert await asyncio.to_thread(inside.wait, _WAIT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ended.is_set()
        assert sorted(out.iterdir()) == []


async def test_two_cancels_before_the_task_runs_walk_away_too() -> None:
    """Two quick Ctrl-C: the second ends ``asyncio.run``, whose clean-up cancels the
    task again before the first cancellation reached it; the task meets ONE
    ``CancelledError`` for both (``Task.cancelling()`` counts 2): it is the second
    cancel, not a first one to wait on."""
    from statekeeper._joined import run_joined

    inside, release = threading.Event(), threading.Event()

    def stuck() -> None:
        inside.set()
        assert release.wait(_WAIT)

    task = asyncio.ensure_future(run_joined(lambda: None, stuck, holds="a stuck write"))
    try:
        assert await asyncio.to_thread(inside.wait, _WAIT)
        task.cancel()
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=_ESCAPE)
        assert done, "two cancels before the task ran were waited on as one"
        raised = task.exception()
        assert isinstance(raised, errors.ThreadStillRunning) and raised.holds == "a stuck write"
    finally:
        release.set()
