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

from ..._joined import run_joined
from ...errors import BackupError

__all__ = ["BackupStopped", "run_joined"]


class BackupStopped(BackupError):
    """The backup was cancelled: its thread stops at its next write (what it wrote
    is removed, nothing is published)."""
