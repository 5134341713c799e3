"""A page backup of a SQLite store cancelled while its worker thread reads the pages
(asyncio cancel, a caller's timeout, Ctrl-C): the snapshot is closed only once that
thread has ended. Closed under it, its descriptors were given back while it read
(closing a descriptor of a SQLite file drops the POSIX locks of every connection of the
process on it: ``backends/sqlite/fds.py``), its WAL descriptor closed (a reused number:
another file's bytes in a chunk) and its SQLite connections closed. The cancellation
still ends the backup after the chunk in hand, and nothing is published."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import pages as sqlite_pages
from statekeeper.governance.backup import BackupKey, backup, filecopy, restore
from statekeeper.governance.backup import writer as backup_writer
from statekeeper.governance.backup.pagedelta import write_page_delta

from ._point_in_time import keyring

_WAIT = 60  # (a bound on a hang if the code breaks, never a timing of the behaviour)


class _Held:
    """The first chunk's read held inside the worker thread until the snapshot is
    closed or asked to stop; what happened around it, recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reading = threading.Event()
        self.release = threading.Event()
        self.ended = threading.Event()
        self.inside = 0
        self.lock = threading.Lock()
        self.closed: set[int] = set()
        self.closed_while_reading = False
        self.closed_before_the_thread_ended = False
        self.read_after_close = False
        self.read_errors: list[BaseException] = []
        self.applied = 0  # chunks read (the held one first)
        self.outcome: list[BaseException | None] = []  # what the worker thread ended with
        real_apply = sqlite_pages.PageSnapshot._apply
        real_close = sqlite_pages.PageSnapshot.close
        real_cancel = getattr(sqlite_pages.PageSnapshot, "cancel", None)
        # (the two workers, as the backup's writer calls them)
        workers: dict[str, Callable[..., Any]] = {
            "write_pages": filecopy.write_pages,
            "write_page_delta": write_page_delta,
        }

        def held_apply(snapshot: Any, chunk: bytearray, first: int, count: int) -> None:
            with self.lock:
                self.inside += 1
                self.applied += 1
            try:
                if not self.reading.is_set():
                    self.reading.set()
                    assert self.release.wait(_WAIT)
                if id(snapshot) in self.closed:
                    self.read_after_close = True
                real_apply(snapshot, chunk, first, count)
            except BaseException as exc:
                self.read_errors.append(exc)
                raise
            finally:
                with self.lock:
                    self.inside -= 1

        def watched_close(snapshot: Any) -> None:
            with self.lock:
                self.closed_while_reading |= self.inside > 0
            self.closed_before_the_thread_ended |= not self.ended.is_set()
            self.closed.add(id(snapshot))
            self.release.set()
            real_close(snapshot)

        def watched_cancel(snapshot: Any) -> None:
            if real_cancel is not None:
                real_cancel(snapshot)
            self.release.set()  # (the worker goes on: it meets the stop)

        def watched(name: str) -> Any:
            real = workers[name]

            def worker(*args: Any) -> Any:
                try:
                    got = real(*args)
                except BaseException as exc:
                    self.outcome.append(exc)
                    raise
                else:
                    self.outcome.append(None)
                    return got
                finally:
                    self.ended.set()

            return worker

        monkeypatch.setattr(sqlite_pages.PageSnapshot, "_apply", held_apply)
        monkeypatch.setattr(sqlite_pages.PageSnapshot, "close", watched_close)
        monkeypatch.setattr(sqlite_pages.PageSnapshot, "cancel", watched_cancel, raising=False)
        for name in workers:
            monkeypatch.setattr(backup_writer, name, watched(name))


@pytest.mark.parametrize("kind", ["full", "incremental"])
async def test_a_cancelled_page_backup_closes_its_snapshot_after_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    bkey = BackupKey(os.urandom(32))
    db = tmp_path / "s.db"
    out = tmp_path / "out"
    out.mkdir()
    file = out / "b.skb"
    async with StateStore(f"sqlite:///{db}", keyring=keyring(), snapshot_every=2) as src:
        for i in range(40):
            await src.save(f"a{i:03d}", {"i": i, "pad": "x" * 300})
        since = None
        if kind == "incremental":
            since = tmp_path / "full.skb"
            await backup(src, since, bkey, chunk_bytes=8192)
            for i in range(40):
                await src.save(f"a{i:03d}", {"i": i, "again": True})
        held = _Held(monkeypatch)
        task = asyncio.ensure_future(backup(src, file, bkey, since=since, chunk_bytes=8192))
        assert await asyncio.to_thread(held.reading.wait, _WAIT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the worker has ended once the task has (else the close ran under it)
        ended = held.ended.is_set()
        assert await asyncio.to_thread(held.ended.wait, _WAIT)
        monkeypatch.undo()
        assert not held.closed_while_reading
        assert not held.closed_before_the_thread_ended
        assert ended
        assert not held.read_after_close
        assert held.read_errors == []
        assert held.closed  # (closed, once)
        # stopped after the chunk in hand (the image has more), not read to its end
        assert held.applied == 1
        assert len(held.outcome) == 1
        assert isinstance(held.outcome[0], sqlite_pages.SnapshotStopped)
        assert sorted(out.iterdir()) == []  # nothing published, no temporary left

        # the store goes on: written, backed up and restored whole
        await src.save("after", {"ok": True})
        done = await backup(src, out / "again.skb", bkey, since=since, chunk_bytes=8192)
        assert done.agents == 41
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        chain = [since, out / "again.skb"] if since is not None else [out / "again.skb"]
        restored = await restore(dst, chain, bkey)
        assert restored.agents == 41
        assert (await dst.verify()).ok
