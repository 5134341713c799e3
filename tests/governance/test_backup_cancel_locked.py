"""A page backup cancelled while its snapshot waits for the store's write lock (held
by another writer: a long transaction, another process's bulk import): the
cancellation comes out at once, the lock never taken, nothing left open.

The snapshot is taken under the write lock for a moment (``BEGIN IMMEDIATE``), asked
for through SQLite's busy handler, whose wait ``sqlite3_interrupt`` does not cut short:
cancelled, the backup waited for the other writer, up to the busy timeout (30 s by
default). Now the lock is asked for between pauses the stop ends
(:class:`~statekeeper.backends.sqlite.snapopen.OpeningStop`)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import copyjoin
from statekeeper.governance.backup import BackupKey, backup

from ._point_in_time import keyring

_WAIT = 60  # (a bound on a hang if the code breaks, never a timing of the behaviour)
_OUT = 20  # (the same: the cancellation comes out on the next pause, <= 50 ms)


async def test_a_cancel_while_the_snapshot_waits_for_the_write_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    inside = threading.Event()
    real_open = copyjoin.open_snapshot

    def opening(*args: Any) -> Any:
        inside.set()
        return real_open(*args)

    monkeypatch.setattr(copyjoin, "open_snapshot", opening)
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        for i in range(10):
            await src.save(f"a{i}", {"i": i})
        locker = sqlite3.connect(db, isolation_level=None)
        try:
            locker.execute("BEGIN IMMEDIATE")  # another writer, in the middle of its work
            task = asyncio.ensure_future(copyjoin.snapshot_opened(str(db), 2 * _WAIT))
            assert await asyncio.to_thread(inside.wait, _WAIT)
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=_OUT)
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        assert done, "the cancelled snapshot still waited for the write lock"
        with pytest.raises(asyncio.CancelledError):
            await task
        # nothing left open: a checkpoint resets the WAL (no read transaction kept)
        check = sqlite3.connect(db, timeout=0, isolation_level=None)
        try:
            assert check.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        finally:
            check.close()
        monkeypatch.undo()
        out = tmp_path / "b.skb"
        assert (await backup(src, out, BackupKey(os.urandom(32)))).agents == 10


async def test_the_snapshot_waits_for_a_write_lock_given_back_within_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked for between pauses, the lock is still waited for up to the timeout: the
    snapshot opens once the other writer commits (as through the busy handler)."""
    from statekeeper.backends.sqlite import snapopen

    db = tmp_path / "s.db"
    waiting = threading.Event()
    real_pause = snapopen.OpeningStop.pause

    def pause(stop: Any, seconds: float) -> None:
        waiting.set()  # (refused the lock once: waiting for it)
        real_pause(stop, seconds)

    monkeypatch.setattr(snapopen.OpeningStop, "pause", pause)
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        await src.save("a", {"i": 1})
        locker = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        locker.execute("BEGIN IMMEDIATE")

        def commit_once_waited() -> None:
            assert waiting.wait(_WAIT)
            locker.execute("COMMIT")

        committer = threading.Thread(target=commit_once_waited)
        committer.start()
        try:
            snapshot = await copyjoin.snapshot_opened(str(db), _WAIT)
        finally:
            committer.join(_WAIT)
            locker.close()
        assert snapshot is not None and waiting.is_set()
        snapshot.close()
