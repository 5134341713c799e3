"""The store file read ahead of a page backup, from the disk in file order.

A page backup reads pages out of order before its first chunk: the plan walks the
change feed's b-trees (``tree_pages``) and the heads' thread walks the heads table
(``heads_scan``), one ``pread`` of a page at a time. With the file in the page cache
that costs ~0.05 s; with the file's pages not cached (a store not read since a reboot,
or since the kernel needed the memory) each read waits for the disk: the plan took
1.4 s and a backup of the 100,000-agent bench store 2.9 s, where ``cp`` read and wrote
the same file in 0.46 s (docs/benchmarks.md, "backup7"). :class:`Prefetch` asks the
kernel, from a thread, to read the whole file in (``POSIX_FADV_WILLNEED``, a window
at a time: the kernel reads at most its read-ahead size, ~8 MiB, per call), so the
disk streams the file at its sequential rate while those walks run, and every later
read is a page-cache hit. A file already cached costs the kernel's lookup of its pages
(3-7 ms for 188 MB). A file larger than half the memory the kernel reports available
is not read ahead (it would push its own first pages out before the backup reads
them): its backup reads as before.

The snapshot's plan starts it (:meth:`Prefetch.start`) once it has read its own few
pages (the change feed's interior pages, ``tree_outline``): queued behind the whole
file's reads, each of those waited for the disk's read of nearly all of it, and the
first chunk for the plan (docs/benchmarks.md, "backup9").

The thread uses the caller's descriptor (never a ``dup``: closing a second descriptor
of a SQLite file drops the locks of every connection of the process on it); the
caller calls :meth:`Prefetch.stop` before it closes that descriptor.
"""

from __future__ import annotations

import os
import threading

__all__ = ["WINDOW", "Prefetch", "available_memory"]

#: bytes asked for per call (the kernel caps a call at its read-ahead size)
WINDOW = 8 << 20


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


class Prefetch:
    """Reads ``size`` bytes of the file open at ``fd`` into the page cache, in the
    background from :meth:`start` on (nothing is started where ``posix_fadvise`` is
    missing or the file is too large: see the module documentation). :meth:`stop`
    ends it and waits."""

    def __init__(self, fd: int, size: int) -> None:
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd, self._size = fd, size
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start reading (once: a second call, or one after :meth:`stop`, does
        nothing)."""
        with self._lock:
            if self._thread is not None or self._stopped.is_set():
                return
            advise = getattr(os, "posix_fadvise", None)
            memory = available_memory()
            size = self._size
            if advise is None or size <= 0 or memory is None or size > memory // 2:
                return
            self._thread = threading.Thread(
                target=self._run, args=(self._fd, size), name="statekeeper-prefetch", daemon=True
            )
            self._thread.start()

    @property
    def started(self) -> bool:
        return self._thread is not None

    def _run(self, fd: int, size: int) -> None:
        for at in range(0, size, WINDOW):
            if self._stopped.is_set():
                return
            try:
                os.posix_fadvise(fd, at, min(WINDOW, size - at), os.POSIX_FADV_WILLNEED)
            except OSError:  # only advice: the backup reads the file either way
                return

    def stop(self) -> None:
        with self._lock:
            self._stopped.set()
            thread = self._thread
        if thread is not None:
            thread.join()
