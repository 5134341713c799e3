"""Ctrl-C raised in a backup task's own code (not in the loop's wait: asyncio's SIGINT
handler raises ``KeyboardInterrupt`` where the main thread is, a task's step included)
while a backup thread still runs is a second cancel: nothing the thread uses is
closed under it (its temporary file, the page snapshot it reads, what it opened);
the thread is asked to stop and closes them when it ends, exactly once.

Before: the ``KeyboardInterrupt`` unwound the task's clean-up blocks at once, which
closed the snapshot and the file and removed the file under the running thread (the
bug class fixed for a second cancel), and what ``run_owned``'s thread opened was
never closed. The interrupt is raised from a hook at the exact point (no timing)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper._joined import released_after, run_joined, run_owned
from statekeeper.backends.sqlite import pages as sqlite_pages
from statekeeper.governance.backup import BackupKey, backup, filecopy
from statekeeper.governance.backup import writer as backup_writer

from ._point_in_time import keyring

_WAIT = 60  # (a bound on a hang if the code breaks, never a timing of the behaviour)


def _interrupted(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on a loop of its own: the ``KeyboardInterrupt`` a task raises leaves
    the loop (as under ``asyncio.run``); the loop is then run again to finish ``main``."""
    loop = asyncio.new_event_loop()
    try:
        running = loop.create_task(main)
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(running)
        loop.run_until_complete(running)
    finally:
        loop.close()


def _gone(check: Any) -> bool:
    pause = threading.Event()
    for _ in range(_WAIT * 100):
        if check():
            return True
        pause.wait(0.01)
    return False


def test_ctrl_c_in_the_stop_leaves_the_page_backup_thread_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bkey = BackupKey(os.urandom(32))
    out = tmp_path / "out"
    out.mkdir()
    inside, release, ended = threading.Event(), threading.Event(), threading.Event()
    closed: list[bool] = []  # whether the snapshot was closed, as the thread went on
    present: list[bool] = []  # whether its temporary file was still there
    real_pages, real_close = filecopy.write_pages, sqlite_pages.PageSnapshot.close
    real_cancel = sqlite_pages.PageSnapshot.cancel

    def stuck(writer: Any, snapshot: Any, *args: Any) -> Any:
        inside.set()
        try:
            assert release.wait(_WAIT)
            closed.append(getattr(snapshot, "_test_closed", False))
            present.append(any(out.iterdir()))
            return real_pages(writer, snapshot, *args)
        finally:
            ended.set()

    def close(snapshot: Any) -> None:
        snapshot._test_closed = True
        real_close(snapshot)

    def cancel(snapshot: Any) -> None:
        real_cancel(snapshot)
        raise KeyboardInterrupt  # (Ctrl-C lands as the task runs the stop)

    monkeypatch.setattr(backup_writer, "write_pages", stuck)
    monkeypatch.setattr(sqlite_pages.PageSnapshot, "close", close)
    monkeypatch.setattr(sqlite_pages.PageSnapshot, "cancel", cancel)

    async def main() -> None:
        async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
            for i in range(20):
                await src.save(f"a{i:02d}", {"i": i, "pad": "x" * 300})
            task = asyncio.ensure_future(backup(src, out / "b.skb", bkey))
            try:
                assert await asyncio.to_thread(inside.wait, _WAIT)
                task.cancel()
                await asyncio.wait({task}, timeout=_WAIT)  # (the interrupt leaves the loop)
                assert task.done()
                assert isinstance(task.exception(), KeyboardInterrupt)
                assert not ended.is_set()
                # nothing closed or removed under the running thread
                temporaries = sorted(out.iterdir())
                assert len(temporaries) == 1 and temporaries[0].name.startswith(".b.skb.")
            finally:
                release.set()
            assert await asyncio.to_thread(ended.wait, _WAIT)
            assert closed == [False] and present == [True]
            # ...closed and removed by the thread once it ended
            assert await asyncio.to_thread(_gone, lambda: not any(out.iterdir()))

    _interrupted(main())


def test_ctrl_c_in_run_owneds_stop_still_closes_what_the_thread_opens() -> None:
    inside, release = threading.Event(), threading.Event()
    released: list[str] = []

    def opening() -> str:
        inside.set()
        assert release.wait(_WAIT)
        return "opened"

    def stop() -> None:
        raise KeyboardInterrupt

    async def main() -> None:
        task = asyncio.ensure_future(run_owned(opening, released.append, stop=stop))
        try:
            assert await asyncio.to_thread(inside.wait, _WAIT)
            task.cancel()
            await asyncio.wait({task}, timeout=_WAIT)
            assert isinstance(task.exception(), KeyboardInterrupt)
            assert released == []  # (not yet: the thread has not returned it)
        finally:
            release.set()
        assert await asyncio.to_thread(_gone, lambda: released == ["opened"])

    _interrupted(main())


@pytest.mark.parametrize("outcome", ["returns", "raises"])
def test_ctrl_c_in_the_callers_code_hands_its_clean_up_to_the_thread(outcome: str) -> None:
    """A chunk sealed in a thread while the task packs the next (the row path): Ctrl-C
    in the task's code leaves the block; its clean-up runs once, after the thread."""
    inside, release, ended = threading.Event(), threading.Event(), threading.Event()
    stopped = threading.Event()
    cleaned: list[bool] = []  # (per clean-up: whether the thread had ended by then)

    def sealing() -> None:
        inside.set()
        try:
            assert release.wait(_WAIT)
            if outcome == "raises":
                raise OSError("the write failed")
        finally:
            ended.set()

    async def main() -> None:
        sealed: asyncio.Future[None] | None = None
        try:
            with released_after(lambda: cleaned.append(ended.is_set())):
                sealed = asyncio.ensure_future(run_joined(stopped.set, sealing))
                assert await asyncio.to_thread(inside.wait, _WAIT)
                raise KeyboardInterrupt  # (Ctrl-C lands in the task's own code)
        except KeyboardInterrupt:
            assert cleaned == [] and stopped.is_set()
            release.set()
            raise
        finally:
            release.set()
            if sealed is not None:
                assert await asyncio.to_thread(_gone, sealed.done)
                sealed.exception() if not sealed.cancelled() else None

    async def outer() -> None:
        with pytest.raises(KeyboardInterrupt):
            await main()
        assert await asyncio.to_thread(_gone, lambda: bool(cleaned))
        assert cleaned == [True]

    asyncio.run(outer())


async def test_a_file_a_thread_still_writes_is_never_placed(tmp_path: Path) -> None:
    """A second cancel's :class:`ThreadStillRunning` caught inside the block (a caller
    that swallows it) must not let the block end into placing the file: the thread
    still writes it. Before: the partial file was renamed into place as the backup."""
    from statekeeper import errors
    from statekeeper.governance.backup.location import Location

    inside, release, ended = threading.Event(), threading.Event(), threading.Event()

    def writing(out: Any) -> None:
        inside.set()
        try:
            assert release.wait(_WAIT)
            out.write(b"late")
        finally:
            ended.set()

    target = tmp_path / "b.skb"
    try:
        with (
            pytest.raises(errors.BackupError, match="still writes"),
            Location(target).writing() as out,
        ):
            out.write(b"partial")
            task = asyncio.ensure_future(run_joined(lambda: None, writing, out))
            assert await asyncio.to_thread(inside.wait, _WAIT)
            task.cancel()
            task.cancel()  # (walked away from)
            with pytest.raises(errors.ThreadStillRunning):
                await task
        assert not ended.is_set()
        left = await asyncio.to_thread(lambda: [p.name for p in tmp_path.iterdir()])
        assert len(left) == 1 and left[0] != "b.skb"  # (its temporary file, still written)
    finally:
        release.set()
    assert await asyncio.to_thread(_gone, lambda: not any(tmp_path.iterdir()))


async def test_a_thread_that_never_started_is_not_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Thread.start`` refused (no more threads): the block's clean-up runs at once
    (was, with the thread counted as running: handed to a thread that never ends)."""
    cleaned: list[bool] = []

    def refused(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with (
        pytest.raises(RuntimeError, match="start new thread"),
        released_after(lambda: cleaned.append(True)),
    ):
        monkeypatch.setattr(threading.Thread, "start", refused)
        try:
            await run_joined(lambda: None, lambda: None)
        finally:
            monkeypatch.undo()
    assert cleaned == [True]


@pytest.mark.slow
async def test_an_s3_spool_a_thread_still_writes_is_never_uploaded() -> None:
    """As for a local file: a ThreadStillRunning swallowed inside the block must not
    upload the spool the thread still writes (before: the partial object was put)."""
    import boto3  # type: ignore[import-untyped]

    from statekeeper import errors
    from statekeeper.governance.backup.location import Location

    from ..backends._services import moto_endpoint
    from .test_backup_no_overwrite import _s3

    inside, release = threading.Event(), threading.Event()

    def writing(out: Any) -> None:
        inside.set()
        assert release.wait(_WAIT)

    query = _s3("stillwritten")
    try:
        with (
            pytest.raises(errors.BackupError, match="still writes"),
            Location(f"s3://stillwritten/b.skb{query}").writing() as out,
        ):
            out.write(b"partial")
            task = asyncio.ensure_future(run_joined(lambda: None, writing, out))
            assert await asyncio.to_thread(inside.wait, _WAIT)
            task.cancel()
            task.cancel()
            with pytest.raises(errors.ThreadStillRunning):
                await task
    finally:
        release.set()
    client = boto3.client("s3", endpoint_url=moto_endpoint(), region_name="us-east-1")
    listed = await asyncio.to_thread(client.list_objects_v2, Bucket="stillwritten")
    assert not listed.get("Contents")
