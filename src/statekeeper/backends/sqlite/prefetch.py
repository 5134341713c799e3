"""The store file read from the disk once, in file order, in large requests, while a
page backup's chunks are read behind the reader.

A page backup reads the store file three ways: the plan walks the change feed's
b-trees (``tree_outline``, a few pages), the heads' thread walks the heads table
(``heads_scan``, one ``pread`` of a page at a time, all over the file) and the chunk
pipeline reads the image in order. With the file not in the page cache (a store not
read since a reboot, or since the kernel needed the memory) each of those reads waits
for the disk: the plan took 1.4 s and a backup of the 100,000-agent bench store 2.9 s
where ``cp`` read and wrote the same file in 0.46 s (docs/benchmarks.md, "backup7").
Asking the kernel to read the file in (``POSIX_FADV_WILLNEED``) while they ran fixed
that, but reached the disk as ~0.6 MB requests, broken smaller still by the other
readers: the disk busy, moving 0.55-0.70x the bytes a second of a plain copy
(docs/benchmarks.md, "backupcold").

So :class:`Prefetch` is the file's one reader from the disk: a thread reads it from
byte 0 to its end in :data:`WINDOW` requests (on Linux sent to ``/dev/null`` by
``sendfile``: read into the page cache by the kernel's sequential read-ahead, never
copied out, ~5 against ~50 ms of CPU for the bench store; elsewhere ``preadv`` into one
scratch buffer, as ``dd bs=8M`` reads), on a descriptor of its own (its read-ahead
state its own). The plan reads its few pages first, then starts it; each chunk waits
(:meth:`Prefetch.wait`) until the reader is past its last byte, so the chunks are
filtered, sealed and written while it reads on (docs/benchmarks.md, "backupfeed"; the
plan waited for the whole read before, "backupread"); the heads' scan, whose pages are
all over the file, waits for its end. Every page they and the chunks read is then a
page-cache hit. Read ahead of it, even a few dozen scattered pages in the page cache
break the kernel's read-ahead of each window they fall in into single pages: the
100,000-agent store read in 0.20 s and 983 requests after 1,000 random pages, in
0.09 s and 61 requests without (docs/benchmarks.md, "backupread"); so the few the plan
read are dropped from the page cache before the reader starts, where the file is cold
(:func:`clear`). A file whose pages are all in the page cache (``cachestat``, Linux 6.5
and later; ``mincore`` of a mapping touching none of them before) is not read: nothing
waits. Memory: at most one buffer of :data:`WINDOW` bytes (none with ``sendfile``); the
file's pages are the page cache's, as a ``cp``'s are. A file larger than half the
memory the kernel reports available is not read ahead (it would push its own first
pages out before the backup reads them): its readers read as before, without waiting.

What the backup reads, and the snapshot it comes from, are what they were: the reader
only brings the file's pages into the page cache; the plan, the heads and the chunks
read them as before (``pages.py``).

Until :meth:`Prefetch.start` (the plan) or :meth:`Prefetch.stop` (the plan's failure,
the snapshot's close) or :meth:`Prefetch.halt` (a cancel) a waiter waits. The thread
reads through a descriptor from ``fds.take`` (never a plain ``open``/``close``: closing
a descriptor of a SQLite file drops the locks of every connection of the process on
it); the caller calls
:meth:`Prefetch.stop` before it gives that descriptor back.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from stat import S_ISCHR

__all__ = [
    "SCARCE",
    "WINDOW",
    "Prefetch",
    "available_memory",
    "cached",
    "can_read_ahead",
    "clear",
    "resident",
]

#: bytes read per request (``dd bs=8M``; the kernel's read-ahead here is 8 MiB)
WINDOW = 8 << 20

#: Linux's ``cachestat`` (6.5 and later; the same number on every architecture but alpha)
_CACHESTAT = 451
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def available_memory() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes, or None where there is none."""
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def can_read_ahead() -> bool:
    """Whether :class:`Prefetch` may read here at all (``preadv``, and the memory the
    kernel reports available: Linux): else it needs no descriptor."""
    return hasattr(os, "preadv") and available_memory() is not None


def _cachestat() -> Callable[[int, int, int], int]:
    """``(fd, offset, length) -> pages of it in the page cache`` (-1: unknown): by
    ``cachestat``, else (Linux before 6.5, or the call refused: seccomp) by
    ``mincore`` of a mapping of the range that touches none of its pages."""
    if not sys.platform.startswith("linux"):
        return lambda fd, offset, length: -1
    import ctypes

    class Range(ctypes.Structure):
        _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]

    class Stat(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint64) for name in ("cache", "dirty", "wb", "ev", "rev")]

    libc = ctypes.CDLL(None, use_errno=True)
    call = libc.syscall
    call.restype = ctypes.c_long
    mmap, munmap, mincore = libc.mmap, libc.munmap, libc.mincore
    mmap.restype = ctypes.c_void_p
    mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    mmap.argtypes += [ctypes.c_int, ctypes.c_long]
    munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    failed = ctypes.c_void_p(-1).value
    alpha = os.uname().machine.startswith("alpha")  # (another number for cachestat)

    def resident(fd: int, offset: int, length: int) -> int:
        # (Linux 5.0 and later say only for a file the process owns or may write:
        # else its pages not mapped count as not cached, and the file is read)
        start = offset - offset % _PAGE
        span = offset + length - start
        addr = mmap(None, span, 1, 1, fd, start)  # PROT_READ, MAP_SHARED
        if addr in (None, failed):
            return -1
        try:
            vec = ctypes.create_string_buffer(-(-span // _PAGE))
            if mincore(addr, span, vec):
                return -1
            return vec.raw.translate(_LOW_BIT).count(1)
        finally:
            munmap(addr, span)

    def stat(fd: int, offset: int, length: int) -> int:
        got = Stat()
        if alpha or call(_CACHESTAT, fd, ctypes.byref(Range(offset, length)), ctypes.byref(got), 0):
            return resident(fd, offset, length)  # (cachestat: ENOSYS before Linux 6.5)
        return int(got.cache)

    return stat


#: a ``mincore`` byte -> whether its page is in the page cache (its lowest bit)
_LOW_BIT = bytes(i & 1 for i in range(256))
_stat: list[Callable[[int, int, int], int]] = []


def resident(fd: int, offset: int, length: int) -> int:
    """How many pages of ``length`` bytes at ``offset`` of the file open at ``fd`` are
    in the page cache (-1 where the kernel cannot say: not Linux)."""
    if not _stat:
        _stat.append(_cachestat())
    return _stat[0](fd, offset, length)


def cached(fd: int, offset: int, length: int) -> bool:
    """Whether every page of ``length`` bytes at ``offset`` of the file open at ``fd``
    is in the page cache (False where the kernel cannot say: not Linux). A page still being read
    counts as in it: ask before reading, not while."""
    return resident(fd, offset, length) >= -(-length // _PAGE)


#: a file past its first window with less than this share of its pages cached has
#: them dropped before it is read (:func:`clear`)
SCARCE = 1 / 16


def clear(fd: int, size: int) -> bool:
    """Drop the pages of the file open at ``fd`` past its first :data:`WINDOW` from the
    page cache where fewer than :data:`SCARCE` of them are in it (a cold file: what a
    plan read, a live store's few hot pages), so its reader's requests are not broken
    by them (docs/benchmarks.md, "backupfeed": 121-127 requests after a plan's 24
    pages against 60-76): it reads them back within its read. Dirty pages stay (the
    kernel drops only clean ones); the first window is left (the snapshot's open read
    it whole). Whether it dropped."""
    length = size - WINDOW
    if length <= 0 or not hasattr(os, "posix_fadvise"):
        return False
    count = resident(fd, WINDOW, length)
    if count < 0 or count * _PAGE >= length * SCARCE:
        return False
    try:
        os.posix_fadvise(fd, WINDOW, length, os.POSIX_FADV_DONTNEED)
    except OSError:
        return False
    return True


#: where the reader sends each window on Linux (``sendfile``: read into the page cache
#: in the kernel's large requests, never copied out of it: ~5 against ~50 ms of CPU
#: for the 188 MB bench store, docs/benchmarks.md "backupfeed"); None: read into a
#: buffer (``preadv``), as everywhere else
SINK: str | None = "/dev/null" if sys.platform.startswith("linux") else None


#: Linux's null device (``/dev/null``: character device 1, 3)
_NULL_DEVICE = (1, 3)


def _sink() -> int:
    """A descriptor of :data:`SINK` open for writing, or -1 (none: ``preadv``); -1 too
    where it is not the null device (a ``/dev/null`` re-created as a regular file, in a
    broken container: ``sendfile`` wrote the whole store file into it, for anyone to
    read)."""
    if SINK is None or not hasattr(os, "sendfile"):
        return -1
    try:
        # (never blocking: a FIFO there would hold the reader, and every chunk, forever)
        sink = os.open(SINK, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return -1
    try:
        st = os.fstat(sink)
        if S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == _NULL_DEVICE:
            return sink
    except OSError:
        pass
    os.close(sink)
    return -1


def _sent(sink: int, fd: int, at: int, length: int) -> bool:
    """``length`` bytes of ``fd`` from ``at`` sent to ``sink`` (read into the page
    cache; a file shorter than that: up to its end); False where the kernel refused
    the first send (the caller reads the window with ``preadv``)."""
    first = True
    while length > 0:
        try:
            got = os.sendfile(sink, fd, at, length)
        except OSError:
            if first:
                return False
            raise
        if not got:  # (the file's end)
            return True
        first = False
        at += got
        length -= got
    return True


class Prefetch:
    """Reads ``size`` bytes of the file open at ``fd`` from the disk, in order, from
    :meth:`start` on, in a thread; :meth:`wait` until it is past a byte (nothing is
    started where ``preadv`` is missing, the file is cached whole or too large: see
    the module documentation; then nothing waits). :meth:`stop` ends it, wakes every
    waiter and waits for the thread."""

    def __init__(self, fd: int, size: int) -> None:
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd, self.size = fd, size
        self._lock = threading.Lock()
        self._moved = threading.Condition(self._lock)
        #: bytes read from 0 on (in the page cache)
        self._done = 0
        #: whether waiters need not wait (the reading ended, was stopped or never ran)
        self._over = False

    def start(self) -> None:
        """Start reading (once: a second call, or one after :meth:`stop`, does
        nothing)."""
        with self._lock:
            if self._thread is not None or self._over:
                return
            memory = available_memory()
            size = self.size
            if (
                self._fd < 0  # (no descriptor: see can_read_ahead)
                or not hasattr(os, "preadv")
                or size <= 0
                or memory is None
                or size > memory // 2
                or cached(self._fd, 0, size)  # (warm: nothing to read)
            ):
                self._over = True
                self._moved.notify_all()
                return
            clear(self._fd, size)  # (a cold file: the pages read before it, dropped)
            thread = threading.Thread(
                target=self._run, args=(self._fd, size), name="statekeeper-prefetch", daemon=True
            )
            try:
                thread.start()
            except RuntimeError:  # (no thread to be had: read as without a read-ahead)
                self._over = True
                self._moved.notify_all()
                return
            self._thread = thread

    @property
    def started(self) -> bool:
        return self._thread is not None

    def wait(self, upto: int) -> None:
        """Return once the file's first ``upto`` bytes are read in, or nothing more
        will be (the reading ended, stopped, or was not started: see above)."""
        with self._lock:
            self._moved.wait_for(lambda: self._over or self._done >= min(upto, self.size))

    def _run(self, fd: int, size: int) -> None:
        scratch: memoryview | None = None
        sink = _sink()
        try:
            for at in range(0, size, WINDOW):
                if self._stopped.is_set():
                    return
                length = min(WINDOW, size - at)
                if sink >= 0 and not _sent(sink, fd, at, length):
                    os.close(sink)
                    sink = -1
                if sink < 0:
                    if scratch is None:
                        scratch = memoryview(bytearray(min(WINDOW, size)))
                    # (a view of the one buffer's start: a slice of a bytearray is a copy)
                    os.preadv(fd, [scratch if length == len(scratch) else scratch[:length]], at)
                with self._lock:
                    self._done = at + length
                    self._moved.notify_all()
        except OSError:  # only a read ahead: the readers read the file either way
            return
        finally:
            if sink >= 0:
                os.close(sink)
            with self._lock:
                self._over = True
                self._moved.notify_all()

    def halt(self) -> None:
        """Stop reading at the next window and wake every waiter, without waiting for
        the thread (a cancelled backup, from the event loop: :meth:`stop` joins it)."""
        with self._lock:
            self._stopped.set()
            self._over = True
            self._moved.notify_all()

    def stop(self) -> None:
        self.halt()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()
