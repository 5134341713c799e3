"""A backup's work in a thread that a cancellation does not leave running.

``await asyncio.to_thread(fn)`` cancelled (an asyncio cancel, a caller's timeout,
Ctrl-C under ``asyncio.run``) raises at once while the thread goes on: the caller's
``finally`` then closed what the thread was still using. A page backup's snapshot gave
back its descriptors of the store file under the thread (closing one drops the POSIX
locks of every connection of the process on the file: ``backends/sqlite/fds.py``),
closed its WAL descriptor (the thread could read a reused number: another file's bytes
in a chunk) and its SQLite connections, and the backup's file was closed and removed
under the thread writing it. :func:`run_joined` asks the thread to stop and waits for
it before the cancellation goes on: every thread of a backup runs through it (the
pages, a namespace's copy, a row chunk's sealing, the manifest, PostgreSQL's sealer),
its stop :meth:`.fileformat.FrameWriter.stop` where nothing else stops it (every
write from then on raises :class:`BackupStopped`). A backup's file is removed by its
:meth:`~.location.Location.writing` only once nothing writes it any more.
"""

from __future__ import annotations

import contextlib
import contextvars
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..._joined import exited_after, released_after, run_joined, run_owned
from ...errors import BackupError

__all__ = [
    "BackupStopped",
    "check_stopped",
    "copy_folder",
    "exited_after",
    "released_after",
    "run_joined",
    "run_stoppable",
]

T = TypeVar("T")


class BackupStopped(BackupError):
    """The backup was cancelled: its thread stops at its next write (what it wrote
    is removed, nothing is published)."""


@contextlib.contextmanager
def copy_folder() -> Iterator[str]:
    """A private temporary folder for a copy of a store (``$TMPDIR``); removed at the
    end, or by the thread still reading it that a second cancel walked away from."""
    folder = tempfile.mkdtemp(prefix="sk-backup-")

    def remove() -> None:
        shutil.rmtree(folder, ignore_errors=True)

    with released_after(remove, at_exit=remove):  # (the process's exit: removed too)
        yield folder


#: the stop of the restore thread running (each thread's own: its context's copy)
_STOPPING: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "statekeeper_backup_stopping", default=None
)


def check_stopped() -> None:
    """Raise :class:`BackupStopped` in a thread of :func:`run_stoppable` asked to stop
    (every frame read of a backup file checks: a restore's reads stop at the next)."""
    stopping = _STOPPING.get()
    if stopping is not None and stopping.is_set():
        raise BackupStopped("the restore reading this backup was cancelled")


async def run_stoppable(
    fn: Callable[..., T],
    *args: Any,
    release: Callable[[T], None] | None = None,
    holds: str = "a restore's read of its backup files",
) -> T:
    """``fn(*args)`` in a thread (:func:`run_joined`, or with ``release``
    :func:`~..._joined.run_owned`); cancelled, it stops at its next frame read
    (:func:`check_stopped`) and is waited for before the cancellation goes on."""
    stopping = threading.Event()

    def stoppable() -> T:
        _STOPPING.set(stopping)  # (in the thread's own copy of the context)
        return fn(*args)

    if release is None:
        return await run_joined(stopping.set, stoppable, holds=holds)
    return await run_owned(stoppable, release, stop=stopping.set, holds=holds)
