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
kept and reused, never closed under them; once no other descriptor of its file is
open in this process (the stores on it closed: :func:`sweep`, run by the SQLite
backend's ``close``, which looks only when its own file, or one deleted or replaced
since, has a descriptor kept: a look at ``/proc/self/fd`` costs an ``fstat`` per
descriptor open), it is closed. So a process keeps at most two descriptors per
page backup running at once of a file still open (its pages' and its read-ahead's,
``prefetch.py``), and none for a file no store of
it holds any more (a deleted file's is never reused: its inode is not the path's).

Without ``/proc/self/fd`` (macOS, the BSDs) nothing lists the descriptors: the files
of the SQLite stores open in this process (:func:`attach`, :func:`detach`: the
backend's open and close) and their ``-shm`` files count as held, so a descriptor
taken of one is kept until the last such store closes, and a head read of one goes
through a kept descriptor (was: every page backup, every ``-shm`` read and every
second store's opening closed a descriptor of the file: the process's locks dropped).
A file no store of this process has open is opened and closed (a connection of the
process not a store's, a user's own ``sqlite3``, is not seen there).

(A connection that opens the file on another thread between :func:`sweep`'s look at
``/proc/self/fd`` and its ``close`` would lose its locks: the sweep runs as the
stores on the file close, when nothing of this process is opening it.)
"""

from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["attach", "detach", "held_fd", "read_head", "release", "sweep", "take"]

#: descriptors :func:`release` kept (not in use), by their file's (device, inode)
_kept: dict[tuple[int, int], list[int]] = {}
#: descriptors :func:`take` handed out and not yet given back
_out: set[int] = set()
#: (taken for every change of the two, and around each close of ours: a descriptor
#: number is never ours and another's at once in what :func:`_others_hold` reads)
_kept_lock = threading.Lock()
#: the SQLite stores open in this process, by their file's absolute path: how many
#: (what counts as held where descriptors cannot be listed; see the module's doc)
_attached: dict[str, int] = {}


def _key(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _listed() -> list[str] | None:
    """This process's open descriptors (their numbers), or None: no ``/proc/self/fd``."""
    try:
        return os.listdir("/proc/self/fd")
    except OSError:
        return None


def attach(path: str) -> str:
    """A SQLite store of this process opens ``path`` (its connections will hold it);
    returns the absolute path it is counted by, for its :func:`detach` (a ``chdir``
    meanwhile: still the same file)."""
    with _kept_lock:
        where = os.path.abspath(path)
        _attached[where] = _attached.get(where, 0) + 1
    return where


def detach(path: str) -> None:
    """A store of :func:`attach` closed (``path``: what :func:`attach` returned):
    then :func:`sweep` of its file."""
    with _kept_lock:
        where = os.path.abspath(path)
        left = _attached.pop(where, 0) - 1
        if left > 0:
            _attached[where] = left
    sweep(path)


def _attached_keys() -> set[tuple[int, int]]:
    """The files (device, inode) of the stores open in this process and their ``-shm``."""
    keys = set()
    for where in list(_attached):
        for name in (where, where + "-shm"):
            with contextlib.suppress(OSError):
                keys.add(_key(os.stat(name)))
    return keys


def _held_keys(ours: set[int]) -> set[tuple[int, int]]:
    """The files (device, inode) this process holds open through a descriptor not in
    ``ours``; without ``/proc/self/fd``, those of the stores open (:func:`attach`)."""
    names = _listed()
    if names is None:
        return _attached_keys()
    held = set()
    for name in names:
        fd = int(name)
        if fd in ours:
            continue
        try:
            held.add(_key(os.fstat(fd)))
        except OSError:
            continue
    return held


def _ours() -> set[int]:
    return _out.union(*_kept.values())


def held_fd(path: str, skip: int = -1) -> int | None:
    """A descriptor this process holds open on ``path``'s file (not ``skip``), or None."""
    return _held_fd(path, skip)[0]


def _held_fd(path: str, skip: int = -1) -> tuple[int | None, bool]:
    """:func:`held_fd`, and whether this process's descriptors could be listed."""
    try:
        target = _key(os.stat(path))
    except OSError:
        return None, True
    names = _listed()
    if names is None:
        return None, False
    for name in names:
        fd = int(name)
        if fd == skip:
            continue
        try:
            if _key(os.fstat(fd)) == target:
                return fd, True
        except OSError:
            continue
    return None, True


def read_head(path: str, size: int) -> bytes:
    """The first ``size`` bytes of ``path``, read without closing a descriptor of a
    file this process's connections hold open (see the module documentation).
    Raises :class:`OSError` as ``open`` would."""
    fd, listed = _held_fd(path)
    if fd is not None:
        try:
            return os.pread(fd, size, 0)
        except OSError:
            pass
    elif not listed:  # (nothing listed: the file of a store open here counts as held)
        with _kept_lock:
            held = _key(os.stat(path)) in _attached_keys()
        if held:  # (kept until the last store of it closes: :func:`detach`)
            fd = take(path)
            try:
                return os.pread(fd, size, 0)
            finally:
                release(fd)
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
        if spare == []:
            del _kept[key]
        if fd is not None:
            _out.add(fd)  # (kept under its file's key: an open descriptor's file stays)
            return fd
        fd = os.open(path, os.O_RDONLY)
        _out.add(fd)
        return fd


def release(fd: int) -> None:
    """Give back a descriptor from :func:`take`: closed when no other descriptor of
    its file is open in this process, else kept for the next :func:`take` (and closed
    by :func:`sweep` once the others are)."""
    with _kept_lock:
        _out.discard(fd)
        try:
            key = _key(os.fstat(fd))
        except OSError:
            return
        _kept.setdefault(key, []).append(fd)
        _sweep_locked()


def sweep(path: str | None = None) -> None:
    """Close the kept descriptors of every file no other descriptor of this process
    holds open any more (run as a store on such a file closes). With ``path`` (the
    closing store's file) only its file's kept descriptors and those of files deleted
    or replaced since are looked at: a close of a store whose file has none kept costs
    no look at ``/proc/self/fd`` (one look is O(descriptors open); was: one at every
    store's close while any file's descriptor stayed kept). Cheap when nothing is
    kept."""
    if not _kept:
        return
    with _kept_lock:
        if path is None:
            _sweep_locked()
            return
        keys = _gone_keys()
        for name in (path, path + "-shm"):  # (a -shm head read keeps one: unlisted)
            with contextlib.suppress(OSError):
                keys.add(_key(os.stat(name)))
        if not keys.isdisjoint(_kept):
            _sweep_locked(keys)


def _gone_keys() -> set[tuple[int, int]]:
    """(Holding the lock.) The kept files no path names any more (deleted, or replaced
    by a rename): no store opens them again, only a look tells whether they are free."""
    gone = set()
    for key, fds in _kept.items():
        try:
            if os.fstat(fds[0]).st_nlink == 0:
                gone.add(key)
        except OSError:
            gone.add(key)
    return gone


def _sweep_locked(only: set[tuple[int, int]] | None = None) -> None:
    if not _kept:
        return
    held = _held_keys(_ours())
    for key in [key for key in _kept if key not in held and (only is None or key in only)]:
        for fd in _kept.pop(key):
            os.close(fd)
