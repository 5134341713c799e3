"""Reading a SQLite store's files beside SQLite's own connections in this process,
without dropping their locks.

SQLite keeps POSIX advisory locks on the database file (a connection with the WAL
open holds a shared lock for as long as it is open: the last connection to close
checkpoints and deletes the WAL only when it can lock the file exclusively) and on the
``-shm`` file (readers' marks, the writer's lock, the lock that keeps another process
from truncating it under this one's map). POSIX drops *every* lock a process holds on
a file when *any* descriptor of that file is closed
(https://www.sqlite.org/howtocorrupt.html, section 2.2). A plain ``open``/``close`` of
either file while a connection of this process has it open would let another process
delete the WAL this one still writes to, checkpoint over pages a read transaction
needs, or truncate ``-shm`` (SIGBUS).

So: a descriptor this process already holds on the file (found through
``/proc/self/fd``, compared by device and inode) is read and never closed; a file
nobody in this process holds open carries no lock of ours, and opening and closing it
is safe. A descriptor the page backup opened itself while others held the file is
kept and reused, never closed under them. Without ``/proc/self/fd``
(not Linux) files are opened and closed as before.
"""

from __future__ import annotations

import os
import threading

__all__ = ["held_fd", "read_head", "release", "take"]

_kept: dict[tuple[int, int], list[int]] = {}
_kept_lock = threading.Lock()


def _key(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def held_fd(path: str, skip: int = -1) -> int | None:
    """A descriptor this process holds open on ``path``'s file (not ``skip``), or None."""
    try:
        target = _key(os.stat(path))
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for name in names:
        fd = int(name)
        if fd == skip:
            continue
        try:
            if _key(os.fstat(fd)) == target:
                return fd
        except OSError:
            continue
    return None


def read_head(path: str, size: int) -> bytes:
    """The first ``size`` bytes of ``path``, read without closing a descriptor of a
    file this process's connections hold open (see the module documentation).
    Raises :class:`OSError` as ``open`` would."""
    fd = held_fd(path)
    if fd is not None:
        try:
            return os.pread(fd, size, 0)
        except OSError:
            pass
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)


def take(path: str) -> int:
    """A descriptor of ``path`` for reading, to be given back with :func:`release`."""
    key = _key(os.stat(path))
    with _kept_lock:
        spare = _kept.get(key)
        fd = spare.pop() if spare else None
    if fd is not None:
        try:
            if _key(os.fstat(fd)) == key:
                return fd
        except OSError:
            pass
    return os.open(path, os.O_RDONLY)


def release(fd: int) -> None:
    """Give back a descriptor from :func:`take`: closed when no other descriptor of
    its file is open in this process, else kept for the next :func:`take`."""
    try:
        key = _key(os.fstat(fd))
    except OSError:
        return
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        names = []
    for name in names:
        other = int(name)
        if other == fd:
            continue
        try:
            held = _key(os.fstat(other)) == key
        except OSError:
            continue
        if held:  # closing it would drop the locks of the other's connection
            with _kept_lock:
                _kept.setdefault(key, []).append(fd)
            return
    os.close(fd)
