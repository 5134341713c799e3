"""A SQLite backup's opening threads, never left running by a cancellation
(:mod:`statekeeper._joined`).

``await asyncio.to_thread(...)`` cancelled raised at once while the thread went on:
the page snapshot it then opened (two read transactions of the store: no checkpoint
could reset the WAL behind them) was never closed (and its opening waited for the
store's write lock up to the busy timeout: now stopped at once), and a namespace's copy went on
being written by SQLite in the folder the backup removed on its way out. Now the
snapshot opened meanwhile is closed, and the copy is stopped (:class:`.FileCopyStop`)
and waited for, before the cancellation goes on.
"""

from __future__ import annotations

from ..._joined import run_joined, run_owned
from .base import translated
from .export import FileCopyStop, FileCopyStopped, copy_file
from .pages import PageSnapshot
from .snapopen import OpeningStop, open_snapshot

__all__ = ["FileCopyStop", "FileCopyStopped", "copied", "open_snapshot", "snapshot_opened"]


async def copied(path: str, dest: str, prefix: str, busy_timeout: float) -> None:
    """:func:`~.export.copy_file` of the store at ``path`` into ``dest``, in a thread;
    cancelled, the copy stopped and its thread ended before the cancellation goes on."""
    stop = FileCopyStop(dest)

    def copy() -> None:
        with translated(path):
            copy_file(path, dest, prefix, busy_timeout, stop=stop)

    await run_joined(stop, copy)


async def snapshot_opened(path: str, busy_timeout: float) -> PageSnapshot | None:
    """:func:`~.snapopen.open_snapshot`, in a thread; cancelled, its opening stopped
    (a wait for the store's write lock too: :class:`.OpeningStop`, was up to the busy
    timeout) and the snapshot it opened meanwhile closed before the cancellation
    goes on."""
    stop = OpeningStop()

    def take() -> PageSnapshot | None:
        with translated(path):
            return open_snapshot(path, busy_timeout, stop)

    return await run_owned(take, _close, stop=stop, holds=f"a page snapshot of {path}")


def _close(snapshot: PageSnapshot | None) -> None:
    if snapshot is not None:
        snapshot.close()
