"""The WAL file of a SQLite store, at the file level: its frame count, and its file
grown ahead of the commits that would grow it.

**Why grow it ahead.** Until a WAL first restarts (the first checkpoint that copies all
of it), every commit appends to the file; on ext4 an ``fdatasync`` after a file grew
also commits the file system's journal (the new size), one more sleep and more system
time a commit than overwriting bytes the file already holds. SQLite removes the WAL
when the last connection closes, and ``SQLITE_FCNTL_PERSIST_WAL`` is out of reach of
Python's ``sqlite3``, so every process would pay that again on its first ~1,000
frames. :func:`grow` writes the file's tail ahead with zeros — written, not
``fallocate``'d: an unwritten extent is converted on its first write, which is a
journal commit again — and syncs it once.

**Why zeros are safe.** SQLite reads a WAL's frames from its start and stops at the
first frame whose salt (bytes 8-15 of its header) is not the WAL header's or whose
cumulative checksum does not match (https://www.sqlite.org/fileformat2.html#walformat);
the salt of a WAL header is random (and changes at every restart), a zero frame
carries salt 0 and checksum 0. A WAL file with no valid header (all zeros) is an empty
WAL. This is the state SQLite itself leaves a WAL file in after a restart (old frames
past the end) and relies on with ``journal_size_limit`` and persistent WALs.

:func:`grow` only appends past the file's end and must run while the caller holds
the database's write lock (an open ``BEGIN IMMEDIATE``): no other connection then
appends frames, and the last connection's close (which deletes the WAL) cannot run
while this connection is open. SQLite's locks live in the ``-shm`` file and the
database file, never in the WAL file, so opening and closing the WAL here drops none
of them (a POSIX lock is released by the close of *any* descriptor of its file).
"""

from __future__ import annotations

import os
import sys

from . import sqlite_fds

__all__ = ["FRAME_HEADER", "WAL_HEADER", "grow", "read_shm", "wal_frames"]

#: bytes of the WAL's header and of each frame's header (SQLite's WAL file format)
WAL_HEADER = 32
FRAME_HEADER = 24

#: where a frame header and the WAL header keep their salts (SQLite's WAL file format)
_FRAME_SALT = 8
_HEADER_SALT = 16
_WAL_MAGIC = (0x377F0682, 0x377F0683)

_CHUNK = 1 << 16  # (a small buffer: no memory peak for a restore to see)

#: the file's data (and its size) to the disk; macOS has no fdatasync
_datasync = getattr(os, "fdatasync", os.fsync)


def wal_frames(wal_path: str, page_size: int) -> int:
    """The frames written to the WAL at ``wal_path`` since it last restarted: the
    frames from its start that carry the WAL header's salt (SQLite stops reading at
    the first frame that does not; frames past it are a previous restart's or a grown
    file's zeros), found by a binary search on their headers — a dozen ``pread``s.
    0 without a WAL or with no valid header (an empty WAL). An estimate's check: a
    transaction being written counts as far as its frames reached.

    It opens the WAL file, never the ``-shm`` file: SQLite keeps its POSIX locks on
    ``-shm`` (and the database file), and the close of *any* descriptor of a file
    releases every such lock the process holds on it — the wal-index's reader and
    writer locks and the lock that keeps another process from truncating ``-shm``
    under this one's map (SIGBUS). The WAL file carries none.

    Frames of a transaction rolled back after SQLite spilled them to the WAL (a large
    one), or of a writer that crashed, carry the current salt too, past the last
    commit: the frames the salt counts are then capped by the wal-index's own count
    (``mxFrame``, read by :func:`read_shm` — through a descriptor SQLite holds, never
    closing one), when its header is whole and of this WAL (the same salts). Without
    that cap, a rolled-back transaction of 150 frames counted as 150 frames written
    long after the next commits had overwritten its first ones."""
    try:
        fd = os.open(wal_path, os.O_RDONLY)
    except OSError:
        return 0
    try:
        header = os.pread(fd, WAL_HEADER, 0)
        if len(header) < WAL_HEADER or int.from_bytes(header[:4], "big") not in _WAL_MAGIC:
            return 0
        salt = header[_HEADER_SALT : _HEADER_SALT + 8]
        frame = page_size + FRAME_HEADER
        size = os.fstat(fd).st_size

        def current(n: int) -> bool:  # frame n (0-based) is of this restart
            at = WAL_HEADER + n * frame + _FRAME_SALT
            return os.pread(fd, 8, at) == salt

        low, high = 0, max(size - WAL_HEADER, 0) // frame  # frames [0, low) are current
        while low < high:
            mid = (low + high) // 2
            if current(mid):
                low = mid + 1
            else:
                high = mid
    except OSError:
        return 0
    finally:
        os.close(fd)
    committed = _index_frames(wal_path.removesuffix("-wal"), salt)
    return low if committed is None else min(low, committed)


#: the wal-index header (``-shm``): two copies of 48 bytes; in each, ``isInit`` at 12,
#: ``mxFrame`` (the last valid frame, native byte order) at 16, the WAL's salts at 32
_INDEX_HEADER = 48


def _index_frames(db_path: str, salt: bytes) -> int | None:
    """``mxFrame`` of ``db_path``'s wal-index when its header is whole (both copies
    equal, initialised) and describes the WAL whose header carries ``salt``; else None."""
    try:
        index = read_shm(db_path, 2 * _INDEX_HEADER)
    except OSError:
        return None
    head = index[:_INDEX_HEADER]
    if (
        len(index) < 2 * _INDEX_HEADER
        or head != index[_INDEX_HEADER:]
        or head[12] != 1
        or head[32:40] != salt
    ):
        return None
    return int.from_bytes(head[16:20], sys.byteorder)


def grow(wal_path: str, frames: int, page_size: int) -> int:
    """Extend the WAL file at ``wal_path`` with zeros to room for ``frames`` frames of
    ``page_size`` and ``fdatasync`` it; bytes already there are never written. Returns
    the bytes added (0 when the file is missing — SQLite creates it — or large enough).
    The caller holds the database's write lock (see the module's docstring)."""
    target = WAL_HEADER + frames * (page_size + FRAME_HEADER)
    try:
        fh = open(wal_path, "r+b", buffering=0)  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        return 0
    with fh:
        size = fh.seek(0, os.SEEK_END)
        if size >= target:
            return 0
        zeros = memoryview(bytes(min(_CHUNK, target - size)))
        at = size
        while at < target:
            at += fh.write(zeros[: target - at]) or 0
        _datasync(fh.fileno())
        return target - size


def read_shm(db_path: str, size: int) -> bytes:
    """The first ``size`` bytes of ``db_path``'s ``-shm`` file (the wal-index), read
    without closing a descriptor SQLite's connections in this process rely on
    (:func:`.sqlite_fds.read_head`: why); empty when there is no such file."""
    try:
        return sqlite_fds.read_head(db_path + "-shm", size)
    except FileNotFoundError:
        return b""
