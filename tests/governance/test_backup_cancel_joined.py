"""A backup cancelled (asyncio cancel, a caller's timeout, Ctrl-C) while one of its
threads works: the cancellation goes on only once that thread has ended, so nothing
it uses is closed under it, and nothing is published.

``await asyncio.to_thread(fn)`` cancelled raised at once while the thread went on:
the backup's file was closed and removed under the thread sealing a row chunk
(``chunk_packed``), writing the manifest (the row path's ``finish``, a page backup's
``finish_manifest``: the snapshot closed under it too), or feeding a namespace's copy
(``write_copy``: its copy's folder removed under it as well); a PostgreSQL copy's
thread went on reading ``COPY`` on its connection and feeding a sealer already
stopped, after the backup had returned. The page path: ``test_backup_pages_cancel.py``."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.governance.backup import BackupKey, backup, filecopy, placedframe, restore
from statekeeper.governance.backup import writer as backup_writer
from statekeeper.governance.backup.fileformat import FrameWriter
from statekeeper.governance.backup.sealer import ChunkSealer

from ..backends._services import fresh_url
from ._point_in_time import keyring

_WAIT = 60  # (a bound on a hang if the code breaks, never a timing of the behaviour)


class _Hold:
    """The first call of ``held`` (inside a backup's thread) waits until the backup
    asks its thread to stop (or the test lets it go); ``ended`` is set once the
    thread's whole call (``whole``) has returned or raised, with what it raised."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()
        self.ended = threading.Event()
        self.outcome: list[BaseException | None] = []
        self._first = threading.Lock()

    def held(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def holding(*args: Any, **kwargs: Any) -> Any:
            if self._first.acquire(blocking=False):
                self.inside.set()
                assert self.release.wait(_WAIT)
            return real(*args, **kwargs)

        return holding

    def whole(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def watched(*args: Any, **kwargs: Any) -> Any:
            try:
                got = real(*args, **kwargs)
            except BaseException as exc:
                self.outcome.append(exc)
                raise
            else:
                self.outcome.append(None)
                return got
            finally:
                self.ended.set()

        return watched

    def released_by(self, real: Callable[..., None] | None) -> Callable[..., None]:
        """A stop signal that also lets the held call go (it then meets the stop)."""

        def stop(*args: Any) -> None:
            if real is not None:
                real(*args)
            self.release.set()

        return stop

    def on_writer_stop(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = getattr(FrameWriter, "stop", None)
        monkeypatch.setattr(FrameWriter, "stop", self.released_by(real), raising=False)


async def _cancelled(hold: _Hold, task: asyncio.Future[Any]) -> bool:
    """Cancel ``task`` once the held call is inside; whether the thread had ended when
    the cancellation came out (then the thread is let go and waited for)."""
    assert await asyncio.to_thread(hold.inside.wait, _WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    ended = hold.ended.is_set()
    hold.release.set()
    assert await asyncio.to_thread(hold.ended.wait, _WAIT)
    return ended


def _stopped_cleanly(hold: _Hold) -> None:
    """The thread ended by the backup's stop (or done), never by a write into a file
    closed under it (``ValueError: write to closed file``, a released buffer, an
    executor shut down: what it met before)."""
    assert len(hold.outcome) == 1
    got = hold.outcome[0]
    # (PostgreSQL's copy: the statement cancelled by the server, or none started after)
    stops = ("BackupStopped", "CopyStopped", "QueryCanceled")
    assert got is None or type(got).__name__ in stops, repr(got)


async def _fill(store: StateStore, agents: int = 40) -> None:
    for i in range(agents):
        await store.save(f"a{i:03d}", {"i": i, "pad": os.urandom(300).hex()})


@pytest.mark.parametrize("step", ["chunk", "manifest"])
async def test_a_cancelled_row_backup_waits_for_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    bkey = BackupKey(os.urandom(32))
    out = tmp_path / "out"
    out.mkdir()
    async with StateStore("memory://", keyring=keyring()) as src:
        await _fill(src)
        hold = _Hold()
        name = "chunk_packed" if step == "chunk" else "finish"
        real = getattr(FrameWriter, name)
        monkeypatch.setattr(FrameWriter, name, hold.whole(hold.held(real)))
        hold.on_writer_stop(monkeypatch)
        task = asyncio.ensure_future(backup(src, out / "b.skb", bkey, chunk_bytes=4096))
        ended = await _cancelled(hold, task)
        monkeypatch.undo()
        assert ended, "the backup's file was closed under its thread"
        _stopped_cleanly(hold)
        assert sorted(out.iterdir()) == []  # nothing published, no temporary left
        done = await backup(src, out / "again.skb", bkey, chunk_bytes=4096)
        assert done.agents == 40


async def test_a_cancelled_page_backup_waits_for_its_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bkey = BackupKey(os.urandom(32))
    out = tmp_path / "out"
    out.mkdir()
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await _fill(src)
        hold = _Hold()
        real = placedframe.finish_manifest
        monkeypatch.setattr(backup_writer, "finish_manifest", hold.whole(hold.held(real)))
        hold.on_writer_stop(monkeypatch)
        task = asyncio.ensure_future(backup(src, out / "b.skb", bkey, chunk_bytes=8192))
        ended = await _cancelled(hold, task)
        monkeypatch.undo()
        assert ended, "the snapshot and the backup's file were closed under its thread"
        _stopped_cleanly(hold)
        assert sorted(out.iterdir()) == []
        await src.save("after", {"ok": True})
        done = await backup(src, out / "again.skb", bkey, chunk_bytes=8192)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        assert (await restore(dst, [out / "again.skb"], bkey)).agents == done.agents == 41
        assert (await dst.verify()).ok


async def test_a_cancelled_namespace_copy_waits_for_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bkey = BackupKey(os.urandom(32))
    out = tmp_path / "out"
    out.mkdir()
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url, keyring=keyring(), namespace="acme") as src:
        await _fill(src)
        hold = _Hold()
        copies: list[str] = []  # the namespace's copy the thread reads
        there: list[bool] = []  # whether it was still there as the thread went on
        real_feed, real_copy = ChunkSealer.feed, filecopy.write_copy

        def feed(sealer: ChunkSealer, *args: Any, **kwargs: Any) -> None:
            there.append(os.path.exists(copies[0]))
            real_feed(sealer, *args, **kwargs)

        def write_copy(*args: Any) -> Any:
            copies.append(args[1])
            return real_copy(*args)

        monkeypatch.setattr(ChunkSealer, "feed", hold.held(feed))
        monkeypatch.setattr(backup_writer, "write_copy", hold.whole(write_copy))
        hold.on_writer_stop(monkeypatch)
        task = asyncio.ensure_future(backup(src, out / "b.skb", bkey, chunk_bytes=4096))
        ended = await _cancelled(hold, task)
        monkeypatch.undo()
        assert ended, "the backup's file and its copy were removed under its thread"
        assert there[:1] == [True]
        _stopped_cleanly(hold)
        assert sorted(out.iterdir()) == []
        done = await backup(src, out / "again.skb", bkey, chunk_bytes=4096)
        assert done.agents == 40


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    with fresh_url("postgresql", tmp_path) as url:
        yield url


@pytest.mark.parametrize("step", ["copy", "close"])
async def test_a_cancelled_postgres_copy_waits_for_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str, step: str
) -> None:
    """``copy``: held in the copy's thread (it reads ``COPY`` on its own connection);
    ``close``: in the sealer's last chunks, written by its threads."""
    from statekeeper.backends.postgres import PostgresBackend
    from statekeeper.backends.postgres import export as pg_export

    bkey = BackupKey(os.urandom(32))
    out = tmp_path / "out"
    out.mkdir()
    async with StateStore(pg_url, keyring=keyring()) as src:
        await _fill(src)
        hold = _Hold()
        if step == "copy":
            monkeypatch.setattr(ChunkSealer, "feed", hold.held(ChunkSealer.feed))
            monkeypatch.setattr(PostgresBackend, "_copy_out", hold.whole(PostgresBackend._copy_out))
        else:
            monkeypatch.setattr(ChunkSealer, "close", hold.whole(hold.held(ChunkSealer.close)))
        hold.on_writer_stop(monkeypatch)
        real_joined = getattr(pg_export, "run_joined", None)
        if real_joined is not None:  # (the copy's own stop lets the held feed go)

            async def joined(stop: Callable[[], None], *args: Any) -> Any:
                return await real_joined(hold.released_by(stop), *args)

            monkeypatch.setattr(pg_export, "run_joined", joined)
        task = asyncio.ensure_future(backup(src, out / "b.skb", bkey, chunk_bytes=4096))
        ended = await _cancelled(hold, task)
        monkeypatch.undo()
        assert ended, "the copy's thread (and its connection) went on after the backup"
        _stopped_cleanly(hold)
        assert sorted(out.iterdir()) == []
        done = await backup(src, out / "again.skb", bkey, chunk_bytes=4096)
        assert done.agents == 40
