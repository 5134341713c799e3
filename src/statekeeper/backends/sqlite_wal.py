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

__all__ = ["FRAME_HEADER", "WAL_HEADER", "grow", "index_frames"]

#: bytes of the WAL's header and of each frame's header (SQLite's WAL file format)
WAL_HEADER = 32
FRAME_HEADER = 24

#: the wal-index header (``-shm``): two copies of 48 bytes, ``mxFrame`` (the frames of
#: the last commit) a native-order u32 at byte 16 and ``isInit`` at byte 12
#: (https://www.sqlite.org/walformat.html, "The WAL-Index Header")
_INDEX_HEADER = 48
_MX_FRAME = 16
_IS_INIT = 12

_CHUNK = 1 << 16  # (a small buffer: no memory peak for a restore to see)

#: the file's data (and its size) to the disk; macOS has no fdatasync
_datasync = getattr(os, "fdatasync", os.fsync)


def index_frames(db_path: str) -> int | None:
    """The frames of the WAL's last commit as the wal-index (``-shm``) holds them, or
    None when it cannot be read or its two header copies differ (a writer is updating
    it). One ``pread`` of the file SQLite maps into memory (the same page cache)."""
    try:
        with open(db_path + "-shm", "rb", buffering=0) as fh:
            head = fh.read(2 * _INDEX_HEADER)
    except OSError:
        return None
    if len(head) < 2 * _INDEX_HEADER or head[:_INDEX_HEADER] != head[_INDEX_HEADER:]:
        return None
    if not head[_IS_INIT]:
        return None
    return int.from_bytes(head[_MX_FRAME : _MX_FRAME + 4], sys.byteorder)


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
