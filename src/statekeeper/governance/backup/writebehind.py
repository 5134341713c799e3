"""Write-behind for a backup file: its bytes leave the page cache as they reach the disk.

A backup is written once and not read again by this process; left to the kernel, its
pages stay dirty until the final ``fsync`` (here ``vm.dirty_background_ratio`` is 10 %
of 24 GB: a 170 MB backup never starts writeback by itself), so the disk is idle while
the chunks are sealed and busy alone at the end, and the file's pages then push the
live store's pages out of the cache. Every :data:`STEP` bytes written,
``posix_fadvise(POSIX_FADV_DONTNEED)`` over the bytes written since the last call
starts their writeback (on dirty pages Linux starts it and drops nothing), and over
the step before (written back by now) drops them. The end (after the ``fsync``:
every page clean) drops the rest (:func:`drop_all`). Advice only: a system without
``posix_fadvise``, or a call that fails, changes nothing but the cache.
"""

from __future__ import annotations

import contextlib
import os
from typing import IO

__all__ = ["STEP", "WriteBehind", "WriteBehindFile", "drop_all"]

#: bytes between two calls (one chunk of a page backup)
STEP = 8 << 20
_ADVISE = getattr(os, "posix_fadvise", None)
_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", 4)


class WriteBehind:
    """The write-behind of one file (see the module documentation)."""

    __slots__ = ("_dropped", "_fd", "_out", "_started")

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._fd = out.fileno()
        self._started = 0  # writeback asked for every byte before this
        self._dropped = 0  # dropped (asked to) every byte before this

    def wrote(self, offset: int) -> None:
        """The file now holds ``offset`` bytes."""
        if _ADVISE is None or offset - self._started < STEP:
            return
        self._out.flush()  # the buffered tail reaches the kernel first
        with contextlib.suppress(OSError):
            if self._started > self._dropped:  # a length of 0 would mean "to the end"
                _ADVISE(self._fd, self._dropped, self._started - self._dropped, _DONTNEED)
            _ADVISE(self._fd, self._started, offset - self._started, _DONTNEED)
        self._dropped, self._started = self._started, offset


class WriteBehindFile:
    """A local backup file written behind (what :meth:`.location.Location.writing`
    hands the :class:`~.fileformat.FrameWriter`: it calls ``write`` and ``flush``)."""

    __slots__ = ("_behind", "_offset", "_raw")

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._behind = WriteBehind(raw)
        self._offset = 0

    def write(self, data: bytes | memoryview) -> int:
        written = self._raw.write(data)
        self._offset += len(data)
        self._behind.wrote(self._offset)
        return written

    def flush(self) -> None:
        self._raw.flush()

    def fileno(self) -> int:
        return self._raw.fileno()


def drop_all(fd: int) -> None:
    """Drop the file's pages from the cache (call it once they are clean: after an
    ``fsync``)."""
    if _ADVISE is not None:
        with contextlib.suppress(OSError):
            _ADVISE(fd, 0, 0, _DONTNEED)
