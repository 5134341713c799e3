"""A restore cancelled (asyncio cancel, a caller's timeout, Ctrl-C) while one of its
threads reads the backup: the cancellation goes on only once that thread has ended,
so the files it reads (the backup, the store image decrypted into a private folder)
are never closed or removed under it.

Before, the threads ran through ``asyncio.to_thread``: cancelled, the restore returned
at once while the thread opening the parts (``_parts``: decrypting the image into a
folder the restore's stack then removed, and entering new contexts on that stack
after it had closed), the checking pass (``_check``: reading the image and the
backup) or the writing pass's reader (``writepass``) went on. Now each is asked to
stop (at its next frame read) and waited for."""

from __future__ import annotations

import asyncio
import importlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.governance.backup import BackupKey, backup, joined, restore, writepass
from statekeeper.governance.backup.fileformat import FrameReader

from ._point_in_time import keyring

restoring = importlib.import_module("statekeeper.governance.backup.restore")
_WAIT = 60  # (a bound on a hang if the code breaks, never a timing of the behaviour)


class _Hold:
    """The first call held in the restore's thread until that thread is asked to stop
    (its stop: ``joined._STOPPING``; without one, until the test lets it go)."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()
        self.ended = threading.Event()
        self.seen: list[bool] = []  # what the thread's files were, once it went on
        self._first = threading.Lock()

    def wait(self) -> bool:
        if not self._first.acquire(blocking=False):
            return False
        stopping = getattr(joined, "_STOPPING", None)
        event = stopping.get() if stopping is not None else None
        self.inside.set()
        if event is None:
            assert self.release.wait(_WAIT)
        else:
            assert event.wait(_WAIT)  # (asked to stop: goes on, to meet the stop)
        return True

    def around(self, real: Callable[..., Any], files: Callable[..., list[str]]) -> Any:
        def held(*args: Any) -> Any:
            try:
                if self.wait():
                    self.seen.extend(os.path.exists(f) for f in files(*args))
                return real(*args)
            finally:
                self.ended.set()

        return held


async def _backed_up(tmp_path: Path, bkey: BackupKey, url: str) -> Path:
    """A page backup of a SQLite store, or (``memory://``) a row backup: the one the
    writing pass reads chunk by chunk (an image is copied whole: ``imagewrite``)."""
    file = tmp_path / "b.skb"
    async with StateStore(url, keyring=keyring()) as src:
        for i in range(30):
            await src.save(f"a{i:02d}", {"i": i, "pad": "x" * 300})
        await backup(src, file, bkey)
    return file


@pytest.mark.parametrize("step", ["parts", "check", "write"])
async def test_a_cancelled_restore_waits_for_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    bkey = BackupKey(os.urandom(32))
    url = "memory://" if step == "write" else f"sqlite:///{tmp_path / 's.db'}"
    file = await _backed_up(tmp_path, bkey, url)
    hold = _Hold()
    if step == "parts":  # (the backup file it decrypts)
        real_parts = restoring._parts
        held = hold.around(real_parts, lambda stack, paths, *rest: list(paths))
        monkeypatch.setattr(restoring, "_parts", held)
    elif step == "check":  # (the backup, and the image decrypted into the folder)
        real_check = restoring._check
        files = lambda store, parts, *rest: [p for part in parts for p in part[:2] if p]  # noqa: E731
        monkeypatch.setattr(restoring, "_check", hold.around(real_check, files))
    else:

        class Held(FrameReader):
            def __init__(self, path: Any, key: BackupKey) -> None:
                hold.around(lambda *a: None, lambda *a: [str(path)])()
                super().__init__(path, key)

        monkeypatch.setattr(writepass, "FrameReader", Held)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        task = asyncio.ensure_future(restore(dst, [file], bkey))
        assert await asyncio.to_thread(hold.inside.wait, _WAIT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        ended = hold.ended.is_set()
        hold.release.set()
        assert await asyncio.to_thread(hold.ended.wait, _WAIT)
        assert ended, f"the restore returned while its thread ({step}) still ran"
        assert hold.seen and all(hold.seen), hold.seen  # its files there as it went on
        monkeypatch.undo()
        again = await restore(dst, [file], bkey, skip_existing=True)
        assert again.agents + again.skipped == 30
        assert (await dst.verify()).ok
