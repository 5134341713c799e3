"""A SQLite backup cancelled before its writing starts, while a thread still opens what
it reads: the page snapshot (``page_snapshot``: two read transactions of the store)
or a namespace's copy (``copy_to_file``: SQLite writing the copy in a temporary
folder).

``await asyncio.to_thread(...)`` cancelled raised at once while the thread went on: the
snapshot it then returned was never closed (its read transactions kept every
checkpoint of the live store from resetting the WAL, for the life of the process), and
the copy's folder was removed while SQLite still wrote the copy there."""

from __future__ import annotations

import asyncio
import gc
import importlib
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import export as sqlite_export
from statekeeper.backends.sqlite import pages as sqlite_pages
from statekeeper.governance.backup import BackupKey, backup, restore

from ._point_in_time import keyring

_WAIT = 60  # (a bound on a hang if the code breaks, never a timing of the behaviour)


async def _fill(store: StateStore, agents: int = 30) -> None:
    for i in range(agents):
        await store.save(f"a{i:03d}", {"i": i, "pad": os.urandom(300).hex()})


def _checkpoint_blocked(db: Path) -> bool:
    """Whether a reader keeps ``wal_checkpoint(TRUNCATE)`` from resetting the WAL."""
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        (busy, _, _) = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return bool(busy)
    finally:
        conn.close()


async def test_a_cancel_while_the_page_snapshot_opens_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bkey = BackupKey(os.urandom(32))
    out = tmp_path / "out"
    out.mkdir()
    db = tmp_path / "s.db"
    inside, release, ended = threading.Event(), threading.Event(), threading.Event()
    real_init = sqlite_pages.PageSnapshot.__init__

    def held_init(snapshot: Any, *args: Any, **kwargs: Any) -> None:
        try:
            real_init(snapshot, *args, **kwargs)
            inside.set()  # (opened, in the thread: held until the cancel is asked)
            assert release.wait(_WAIT)
        finally:
            ended.set()

    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        await _fill(src)
        monkeypatch.setattr(sqlite_pages.PageSnapshot, "__init__", held_init)
        task = asyncio.ensure_future(backup(src, out / "b.skb", bkey, chunk_bytes=8192))
        assert await asyncio.to_thread(inside.wait, _WAIT)
        task.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.to_thread(ended.wait, _WAIT)
        monkeypatch.undo()
        gc.collect()
        # the snapshot's read transactions ended: a checkpoint resets the WAL
        assert not _checkpoint_blocked(db), "the snapshot opened meanwhile was left open"
        assert sorted(out.iterdir()) == []
        await src.save("after", {"ok": True})
        done = await backup(src, out / "again.skb", bkey, chunk_bytes=8192)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        assert (await restore(dst, [out / "again.skb"], bkey)).agents == done.agents == 31


def _copy_users() -> list[Any]:
    """The modules that call :func:`copy_file` by its name (the test holds it there)."""
    names = ["statekeeper.backends.sqlite.admin", "statekeeper.backends.sqlite.copyjoin"]
    found = []
    for name in names:
        try:
            found.append(importlib.import_module(name))
        except ImportError:
            continue
    return [module for module in found if hasattr(module, "copy_file")]


async def test_a_cancel_while_sqlite_copies_a_namespace_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bkey = BackupKey(os.urandom(32))
    out = tmp_path / "out"
    out.mkdir()
    inside, release, ended = threading.Event(), threading.Event(), threading.Event()
    there: list[bool] = []  # whether the copy's folder was still there as SQLite went on
    outcome: list[BaseException | None] = []
    real_copy = sqlite_export.copy_file

    def held_copy(source: str, dest: str, *args: Any, **kwargs: Any) -> None:
        def copied(table: str) -> None:
            if not inside.is_set():  # (the first table copied, in the transaction)
                inside.set()
                assert release.wait(_WAIT)
                there.append(os.path.isdir(os.path.dirname(dest)))

        try:
            real_copy(source, dest, *args, **{**kwargs, "copied": copied})
        except BaseException as exc:
            outcome.append(exc)
            raise
        else:
            outcome.append(None)
        finally:
            ended.set()

    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url, keyring=keyring(), namespace="acme") as src:
        await _fill(src)
        for module in _copy_users():
            monkeypatch.setattr(module, "copy_file", held_copy)
        try:  # (the copy's own stop lets the held table go: it then meets the stop)
            copyjoin = importlib.import_module("statekeeper.backends.sqlite.copyjoin")
        except ImportError:
            pass
        else:
            real_stop = copyjoin.FileCopyStop.__call__

            def stop(self: Any) -> None:
                real_stop(self)
                release.set()

            monkeypatch.setattr(copyjoin.FileCopyStop, "__call__", stop)
        task = asyncio.ensure_future(backup(src, out / "b.skb", bkey, chunk_bytes=4096))
        assert await asyncio.to_thread(inside.wait, _WAIT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        was_ended = ended.is_set()
        release.set()
        assert await asyncio.to_thread(ended.wait, _WAIT)
        monkeypatch.undo()
        assert was_ended, "the copy's folder was removed while SQLite still wrote there"
        assert there == [True]
        assert len(outcome) == 1
        assert outcome[0] is None or type(outcome[0]).__name__ == "FileCopyStopped"
        assert sorted(out.iterdir()) == []
        await src.save("after", {"ok": True})
        done = await backup(src, out / "again.skb", bkey, chunk_bytes=4096)
        assert done.agents == 31
