"""A local backup file written with ``O_DIRECT``: its bytes go from a staging buffer of
ours to the disk, never through the page cache.

Through the page cache (:mod:`.writebehind`) the kernel copies every byte into a cache
page, marks it dirty, writes it back page by page and, told to (``posix_fadvise``),
drops it again: 0.050 CPU-s for a 148 MB backup, against 0.031 with ``O_DIRECT`` (one
copy of ours into a page-aligned 4 MiB buffer, the disk reading from it),
docs/benchmarks.md "backupsix". The backup file never enters the cache, so it never
pushes the live store's pages out, and the disk writes while the chunks are sealed.

``O_DIRECT`` wants the buffer, the file offset and the length aligned to the device's
logical block: the buffer is an anonymous mapping (page-aligned), every write but the
last is a whole :data:`BLOCK`, the last is padded with zeros to a multiple of
:data:`ALIGN` and the file then cut to its length. A file system that refuses
``O_DIRECT`` (tmpfs; some FUSE or network ones) refuses the ``open``
(:func:`direct_file` returns None: the caller writes behind instead); one that refuses
a write of it is written from there on through the ordinary descriptor, at the same
offsets (:class:`DirectFile` never loses a byte to the switch).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os

__all__ = ["ALIGN", "BLOCK", "DirectFile", "direct_file"]

#: bytes of every write but the last (a multiple of any logical block size)
BLOCK = 4 << 20
#: the last write is padded to a multiple of this (the largest usual logical block)
ALIGN = 4096
_O_DIRECT = getattr(os, "O_DIRECT", 0)


def direct_file(path: str, fd: int) -> DirectFile | None:
    """``path`` (empty, just created, open as ``fd``) opened once more with
    ``O_DIRECT`` for :class:`DirectFile`, or None: the system or its file system
    has no ``O_DIRECT`` (or ``path`` is no longer the file ``fd`` is)."""
    if not _O_DIRECT:
        return None
    try:  # never through a link, and only the file ``fd`` is (not one put in its place)
        direct = os.open(path, os.O_WRONLY | _O_DIRECT | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        mine, opened = os.fstat(fd), os.fstat(direct)
        if (mine.st_dev, mine.st_ino) == (opened.st_dev, opened.st_ino):
            return DirectFile(direct, fd)
    except OSError:
        pass
    os.close(direct)
    return None


class DirectFile:
    """What :meth:`.location.Location.writing` hands the
    :class:`~.fileformat.FrameWriter` (it calls ``write`` and ``flush``): bytes are
    copied into a staging buffer and written a :data:`BLOCK` at a time through the
    ``O_DIRECT`` descriptor; :meth:`finish` writes the rest and cuts the padding off.
    ``fd`` is the file's ordinary descriptor (the caller's: it fsyncs and closes it):
    the writes go through it once the ``O_DIRECT`` one is refused."""

    __slots__ = ("_buf", "_direct", "_fd", "_fill", "_offset", "_view")

    def __init__(self, direct: int, fd: int) -> None:
        self._direct = direct
        self._fd = fd
        self._buf = mmap.mmap(-1, BLOCK)
        self._view = memoryview(self._buf)
        self._fill = 0  # staged bytes
        self._offset = 0  # bytes written before the staged ones

    def write(self, data: bytes | bytearray | memoryview) -> int:
        with memoryview(data) as src:
            size = len(src)
            taken = 0
            while taken < size:
                n = min(BLOCK - self._fill, size - taken)
                self._view[self._fill : self._fill + n] = src[taken : taken + n]
                self._fill += n
                taken += n
                if self._fill == BLOCK:
                    self._put(BLOCK, BLOCK)
        return size

    def _put(self, length: int, padded: int) -> None:
        """Write the first ``length`` staged bytes (``padded``: as many, or more for
        ``O_DIRECT``'s alignment) at the file's offset; the staging buffer is empty
        after."""
        at = self._offset
        if self._direct >= 0:
            try:
                done = os.pwrite(self._direct, self._view[:padded], at)
                if done != padded:  # a short write (a full disk): said as the kernel says
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._stop_direct()  # refused for its alignment: the ordinary way
        if self._direct < 0:
            view = self._view[:length]
            while view:
                view = view[os.pwrite(self._fd, view, at + length - len(view)) :]
        self._offset += length
        self._fill = 0

    def _stop_direct(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._direct)
        self._direct = -1

    def flush(self) -> None:
        """Nothing: the staged bytes are written by :meth:`finish` (or once a block)."""

    def finish(self) -> None:
        """Write the staged rest (padded, then the file cut to its length) and close
        the ``O_DIRECT`` descriptor; the caller then fsyncs ``fd``."""
        try:
            if self._fill:
                length = self._fill
                padded = -(-length // ALIGN) * ALIGN
                self._view[length:padded] = bytes(padded - length)
                self._put(length, padded)
                if padded != length:
                    os.ftruncate(self._fd, self._offset)
        finally:
            self.close()

    def close(self) -> None:
        """Close the ``O_DIRECT`` descriptor and free the buffer (what is staged is
        dropped: the caller removes a file it did not finish)."""
        if self._direct >= 0:
            self._stop_direct()
        self._view.release()  # (twice: nothing)
        # a failed write's traceback may still hold a view of it: then freed with it
        with contextlib.suppress(BufferError):
            self._buf.close()

    def fileno(self) -> int:
        return self._fd
