"""One run at a time on a retention progress file (``retention apply --progress-file``).

A progress file records one run's resume point and what it did before it. Two runs
sharing one (two operators, a cron job overlapping the next) would each write their
own over the other's: a resume would start after an agent the other run did, and count
its work as done "before the resume". So a run holds ``<progress file>.lock`` while it
reads, writes and finally removes the file: an advisory ``flock`` that the operating
system releases when the holder exits or dies (as a migration journal's,
:mod:`statekeeper.schema.running`). A second run finds it held and is refused at once
with :class:`~statekeeper.errors.ProgressFileBusy`, naming the file and the holder; a
crashed run holds nothing, and the next run resumes from the file. A dry run neither
reads nor writes the file: it takes no lock. Without ``fcntl`` (not POSIX) none is taken.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import NotOwned, ProgressFileBusy

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["progress_held"]

#: how every lock file starts (a file without it was not written by a run: not touched)
_MARK = b"statekeeper retention progress lock: "


@contextlib.contextmanager
def progress_held(progress_file: Path | None) -> Iterator[None]:
    """Hold ``progress_file``'s lock for the block (nothing for None);
    :class:`ProgressFileBusy` when another run holds it."""
    if progress_file is None or fcntl is None:
        yield
        return
    path = progress_file.with_name(progress_file.name + ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        found = os.pread(fd, 512, 0)
        if found and not found.startswith(_MARK):  # never written by a run: not ours
            raise NotOwned(
                f"{path} is the lock file of retention progress file {progress_file}, but it"
                " holds something else: it was left untouched (move it, or give another"
                " progress file)"
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = found[len(_MARK) :].decode("utf-8", "replace").strip()
            raise ProgressFileBusy(str(progress_file), holder or "unknown") from None
        os.ftruncate(fd, 0)  # who holds it, for the message of a run refused meanwhile
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        who = f"pid {os.getpid()} on {socket.gethostname()} since {stamp} UTC"
        os.pwrite(fd, _MARK + who.encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            os.pwrite(fd, _MARK, 0)
    finally:
        os.close(fd)  # (releases the flock)
