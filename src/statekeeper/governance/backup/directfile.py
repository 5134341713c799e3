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

**The frames' buffers in huge pages** (:func:`frame_buffer`). The disk reads a write
from the buffer's pages, one segment per physically contiguous run: from 4 KiB pages
the kernel cuts a 4 MiB write into requests of at most the device's segments (254
here: ~1 MiB each), from a 2 MiB huge page into requests of the device's largest size.
A 100,000-agent backup's writes went as 119-366 requests, ``cp``'s writeback of the
same store as 48-81 (the page cache's large folios); this disk takes 160 MiB of such
writes in 1.48-2.07x less time from huge pages (45-52 requests against 316-320,
docs/benchmarks.md, "h/bkwarm"). ``mmap.mmap(-1, n)`` maps shared memory (shmem: no
transparent huge pages unless the system turns them on for it); a private anonymous
mapping of whole 2 MiB advised ``MADV_HUGEPAGE`` takes them where the system allows
(``madvise`` mode). Elsewhere, or refused, it is the same buffer in small pages.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["ALIGN", "BLOCK", "HUGE", "DirectFile", "direct_file", "frame_buffer"]

#: bytes of every write but the last (a multiple of any logical block size)
BLOCK = 4 << 20
#: the last write is padded to a multiple of this (the largest usual logical block)
ALIGN = 4096
_O_DIRECT = getattr(os, "O_DIRECT", 0)
#: :meth:`DirectFile.placed_buffer`'s buffers kept from one backup to the next (at most
#: :data:`_SPARE_MAX`: a backup's sealing pipeline holds ``threads + 3``)
_SPARE: list[mmap.mmap] = []
_SPARE_MAX = 8
#: a huge page's bytes (x86-64, arm64 with 4 KiB pages): a mapping of whole ones is
#: placed at a multiple of it by Linux (6.7 on), each then one huge page when advised
HUGE = 2 << 20
_PRIVATE = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)


def frame_buffer(size: int) -> mmap.mmap:
    """A new anonymous mapping of at least ``size`` bytes (a multiple of :data:`ALIGN`)
    for the disk to write from: private, of whole :data:`HUGE` (so placed at a multiple
    of it), its first ``size`` bytes' whole huge pieces advised to be huge pages and the
    rest left in small pages (a 2 MiB chunk's frame and its ~40 KiB over: one huge page
    and ten small ones faulted in, not two huge ones). See the module's documentation."""
    if not _PRIVATE:
        return mmap.mmap(-1, size)
    if _HUGEPAGE is None or size < HUGE:  # (private all the same: a forked child's
        return mmap.mmap(-1, size, flags=_PRIVATE)  # backup seals into its own copy)
    buf = mmap.mmap(-1, -(-size // HUGE) * HUGE, flags=_PRIVATE)
    with contextlib.suppress(OSError, ValueError):  # (advice only: small pages then)
        buf.madvise(_HUGEPAGE, 0, size - size % HUGE)
    return buf


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
    the writes go through it once the ``O_DIRECT`` one is refused.

    **Two staging buffers.** A full block is written by a thread of its own while the
    caller fills the other buffer: the disk is not left idle while a block is staged
    (a 4 MiB copy) and while the writing thread waits for the GIL between two writes.
    The 100,000-agent page backup's 37 blocks were written one after the other from
    the writing thread, ~0.15 s of ``pwrite`` in a ~0.21 s page pipeline
    (docs/benchmarks.md, "backup3"). One write is in flight at most, so the blocks
    reach the file in order; its failure is raised by the next :meth:`write` or by
    :meth:`finish`. A chunk's frame is not staged: sealed into its place in a buffer
    of its own, it is written from there (:meth:`write_placed`)."""

    __slots__ = (
        "_batch",
        "_batch_at",
        "_bufs",
        "_direct",
        "_disk",
        "_fd",
        "_fill",
        "_offset",
        "_pending",
        "_placed",
        "_views",
    )

    def __init__(self, direct: int, fd: int) -> None:
        self._direct = direct
        self._fd = fd
        self._bufs = [mmap.mmap(-1, BLOCK), mmap.mmap(-1, BLOCK)]
        #: the buffer being filled first, the one being written (or free) second
        self._views = [memoryview(buf) for buf in self._bufs]
        self._fill = 0  # staged bytes
        self._offset = 0  # bytes written (or being written) before the staged ones
        self._disk = ThreadPoolExecutor(1, thread_name_prefix="sk-backup-disk")
        self._pending: Future[None] | None = None  # the other buffer's write
        self._placed: list[mmap.mmap] = []  # the buffers of :meth:`placed_buffer`
        #: placed frames not yet handed to the disk's thread, from the file's ``_batch_at``
        self._batch: list[tuple[mmap.mmap, int, Callable[[mmap.mmap], None]]] = []
        self._batch_at = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        with memoryview(data) as src:
            size = len(src)
            taken = 0
            while taken < size:
                n = min(BLOCK - self._fill, size - taken)
                self._views[0][self._fill : self._fill + n] = src[taken : taken + n]
                self._fill += n
                taken += n
                if self._fill == BLOCK:
                    self._put(BLOCK, BLOCK)
        return size

    def placed_buffer(self, size: int, keep: bool = True) -> mmap.mmap:
        """A buffer for :meth:`write_placed` holding a frame of up to ``size`` bytes
        (page-aligned, as ``O_DIRECT`` wants, and a block more for the place): one a
        backup before :meth:`finish`-ed, if large enough (a new mapping's pages are
        faulted in and zeroed by the kernel: 2 MiB, 512 faults), or a new one.
        ``keep=False``: a new one, not kept for another backup (a manifest's, of any
        size: :mod:`.placedframe`)."""
        need = -(-(size + ALIGN) // ALIGN) * ALIGN
        if not keep:
            return frame_buffer(need)
        try:
            buf = _SPARE.pop()  # atomic: backups side by side take their own
        except IndexError:
            buf = None
        if buf is None or len(buf) < need:
            buf = frame_buffer(need)
        self._placed.append(buf)
        return buf

    def place(self, offset: int) -> int:
        """Where in a :meth:`placed_buffer` the bytes of the file's ``offset`` go."""
        return offset % ALIGN

    def write_placed(self, buf: mmap.mmap, length: int, done: Callable[[mmap.mmap], None]) -> None:
        """Write the ``length`` bytes at :meth:`place` of the next offset in ``buf``
        (a :meth:`placed_buffer`) from ``buf`` itself: a sealed frame encrypted into
        its place is never copied again ("backup5": the copy of every frame into the
        staging buffer was 158 M instructions of a 100,000-agent backup, under the
        GIL). The staged bytes of the frame's first block (fewer than :data:`ALIGN`)
        are copied in front of it, and the bytes of its last, partial block back into
        the staging buffer; the whole blocks between are written by the disk's thread,
        ``done(buf)`` called once they are (or failed: raised by the next write)."""
        self._wait()
        whole = self._fill - self._fill % ALIGN
        if whole:  # (only bytes written before the first frame: the header)
            self._put(whole, whole, self._fill - whole)
            self._wait()  # (one write in flight: its failure raised here)
        at = self._fill
        if self.place(self._offset + at) != at:
            raise ValueError("a placed write's buffer is not at the file's offset")
        buf[:at] = self._views[0][:at]
        total = at + length
        whole = total - total % ALIGN
        self._views[0][: total - whole] = buf[whole:total]
        self._fill = total - whole
        if not whole:
            done(buf)
            return
        # written a few frames at once, :data:`BLOCK` or more (one ``pwritev``): a 2 MiB
        # write each took this disk 1.5x the time of the 4 MiB blocks ("backup5")
        if not self._batch:
            self._batch_at = self._offset
        self._batch.append((buf, whole, done))
        self._offset += whole
        if self._offset - self._batch_at >= BLOCK:
            self.write_batch()

    def write_batch(self) -> None:
        """Hand the placed frames not yet written to the disk's thread (one write): the
        last ones as soon as the chunks are all sealed, not after the manifest."""
        batch, self._batch = self._batch, []
        if not batch:
            return
        self._wait()
        views = [memoryview(buf)[:whole] for buf, whole, _ in batch]
        pending = self._disk.submit(self._pwritev, views, self._batch_at)
        pending.add_done_callback(lambda _: [done(buf) for buf, _, done in batch])
        self._pending = pending

    def _put(self, length: int, padded: int, keep: int = 0) -> None:
        """Hand the first ``length`` staged bytes (``padded``: as many, or more for
        ``O_DIRECT``'s alignment) to the disk's thread, to be written at the file's
        offset, once the write before is done (its failure raised here); the other
        buffer is the staging one after."""
        self.write_batch()  # (the placed frames before the staged bytes)
        self._wait()
        view = self._views[0]
        self._views.reverse()
        # ``keep``: the staged bytes after ``length`` go on being staged, in the other buffer
        self._views[0][:keep] = view[length : length + keep]
        self._pending = self._disk.submit(self._pwrite, view, self._offset, length, padded)
        self._offset += length
        self._fill = keep

    def _wait(self) -> None:
        """The write in flight done (or its failure raised)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _pwrite(self, view: memoryview, at: int, length: int, padded: int) -> None:
        """The disk's thread: ``view``'s first ``length`` bytes written at ``at``."""
        if self._direct >= 0:
            try:
                done = os.pwrite(self._direct, view[:padded], at)
                if done != padded:  # a short write (a full disk): said as the kernel says
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._stop_direct()  # refused for its alignment: the ordinary way
        if self._direct < 0:
            rest = view[:length]
            while rest:
                rest = rest[os.pwrite(self._fd, rest, at + length - len(rest)) :]

    def _pwritev(self, views: list[memoryview], at: int) -> None:
        """The disk's thread: ``views`` (each aligned) written one after another at ``at``."""
        total = sum(len(view) for view in views)
        if self._direct >= 0:
            try:
                if os.pwritev(self._direct, views, at) != total:  # a full disk
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._stop_direct()
        for view in views:  # refused for its alignment: the ordinary way
            self._pwrite(view, at, len(view), len(view))
            at += len(view)

    def _stop_direct(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._direct)
        self._direct = -1

    def flush(self) -> None:
        """Nothing: the staged bytes are written by :meth:`finish` (or once a block)."""

    def finish(self) -> None:
        """Write the staged rest (padded, then the file cut to its length), wait for
        every write and close the ``O_DIRECT`` descriptor; the caller then fsyncs
        ``fd``."""
        try:
            length = self._fill
            if length:
                padded = -(-length // ALIGN) * ALIGN
                self._views[0][length:padded] = bytes(padded - length)
                self._put(length, padded)
            self.write_batch()
            self._wait()
            if length and padded != length:
                os.ftruncate(self._fd, self._offset)
        finally:
            self.close()
        # every write done: the placed buffers kept for the next backup (a few)
        while self._placed and len(_SPARE) < _SPARE_MAX:
            _SPARE.append(self._placed.pop())

    def close(self) -> None:
        """Wait for the write in flight (its failure dropped: :meth:`finish` raised it,
        or the caller removes the file it did not finish), close the ``O_DIRECT``
        descriptor and free the buffers (what is staged is dropped)."""
        with contextlib.suppress(Exception):
            self._wait()
        self._disk.shutdown(wait=True)
        if self._direct >= 0:
            self._stop_direct()
        for view in self._views:
            view.release()  # (twice: nothing)
        # a failed write's traceback may still hold a view of it: then freed with it
        for buf in self._bufs:
            with contextlib.suppress(BufferError):
                buf.close()

    def fileno(self) -> int:
        return self._fd
