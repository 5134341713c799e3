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
journal commit again — and leaves its sync to the next commit's (:func:`grow`: why);
:class:`Growth` decides when, a step of
:data:`GROW_STEP` frames ahead of the frames written at a time (why: its docstring).

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

import math
import os
import sys

from . import fds as sqlite_fds

__all__ = [
    "BIG_COMMIT_PAGES",
    "FRAME_HEADER",
    "GROW_AT_PAGES",
    "GROW_CAP",
    "GROW_STEP",
    "RETRY_PAGES",
    "WAL_HEADER",
    "Growth",
    "grow",
    "read_shm",
    "room",
    "wal_frames",
]

#: bytes of the WAL's header and of each frame's header (SQLite's WAL file format)
WAL_HEADER = 32
FRAME_HEADER = 24

#: where a frame header and the WAL header keep their salts (SQLite's WAL file format)
_FRAME_SALT = 8
_HEADER_SALT = 16
_WAL_MAGIC = (0x377F0682, 0x377F0683)

#: frames one step of :class:`Growth` adds to the WAL file (512 KiB at 2 KiB pages)
GROW_STEP = 256

#: frames the WAL file is never grown past: the first checkpoint comes at ~1,000
#: frames written (SQLiteBackend's CHECKPOINT_PAGES, calibrated) and the WAL restarts
#: after it (1,054 frames at most, measured: docs/benchmarks.md, "full11")
GROW_CAP = 1200

#: estimated WAL pages a writer commits before the first step (its first ~10 lone
#: saves): a writer that commits a few times only (a CLI command) never pays for it
GROW_AT_PAGES = 32

#: commits of more pages than this on average, since the last step, are not grown
#: for: each extends the file by ~100 KB or more, so its one extra journal commit is
#: spread over as many frames, and zeros written ahead would double the bytes written
#: for little (docs/benchmarks.md, "group11d")
BIG_COMMIT_PAGES = 48

#: estimated WAL pages after which a step that found the write lock held is retried
RETRY_PAGES = 16

_CHUNK = 1 << 16  # (a small buffer: no memory peak for a restore to see)


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
    ``page_size``; bytes already there are never written. Returns the bytes added (0
    when the file is missing — SQLite creates it — or large enough). The caller holds
    the database's write lock (see the module's docstring).

    Not synced here: the growth is only ever made where every commit syncs the WAL
    (``synchronous`` ``FULL``/``EXTRA``), so the next commit's own ``fdatasync`` takes
    the zeros and the file's new size to the disk — the file system's journal commit
    once, in a sync that commit pays anyway —, and every commit after it overwrites
    bytes the file holds. A sync of its own cost the step a wait of one more sync,
    and the saves queued behind it that wait (docs/benchmarks.md, "group11 … issue
    11, 2026-12-05 afternoon"). Zeros that a crash leaves unwritten, or a size it
    leaves unsynced, are a WAL's tail SQLite ignores (the module's docstring)."""
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
        return target - size


def room(wal_path: str, page_size: int) -> int:
    """The frames the WAL file at ``wal_path`` has room for (0 without a file)."""
    try:
        size = os.stat(wal_path).st_size
    except OSError:
        return 0
    return max(size - WAL_HEADER, 0) // (page_size + FRAME_HEADER)


class Growth:
    """When the WAL file is grown ahead, and how far: in steps of :data:`GROW_STEP`
    frames kept ahead of the frames written, up to :data:`GROW_CAP`.

    **Why in steps.** Zeros written ahead are bytes written to the disk twice (the
    zeros, then the frames over them) and frames the WAL never reaches are written
    for nothing: one growth to the cap wrote 2.4 MB at 2 KiB pages whatever the
    writer went on to commit. Grown a step ahead of the frames, a writer that commits
    a few hundred frames before its WAL restarts (a short-lived process, a benchmark's
    round) writes a step of zeros past them at most, and a long one reaches the cap
    as before; each commit still overwrites bytes the file holds.

    The thresholds are in the backend's estimated WAL pages since its writer opened
    (``SQLiteBackend._wal_pages``, the count its commits add to): :meth:`due` says
    whether a step is due, :meth:`step` (under the database's write lock) makes it and
    sets the next threshold from the frames really written, :meth:`busy` retries a
    step that found the lock held, :meth:`stop` ends the growth (the WAL restarts at
    the first checkpoint: from then on its file is as large as it needs to be).
    Not thread-safe by itself: the backend calls it under its writer lock or from
    the commit that crossed the threshold (a race makes a step late or early, never
    unsafe: :func:`grow` only appends zeros past the file's end)."""

    __slots__ = ("_commits_at", "_frames_at", "_pages_at", "_step_pages", "next_at", "steps")

    def __init__(self, enabled: bool) -> None:
        #: estimated WAL pages at which the next step is due (inf: none is)
        self.next_at: float = GROW_AT_PAGES if enabled else math.inf
        #: steps that grew the file
        self.steps = 0
        self._pages_at = 0.0  # estimated pages and commits at the last decision
        self._commits_at = 0
        self._step_pages = 0.0  # estimated pages and frames written at the last step
        self._frames_at = -1

    def due(self, pages: float, commits: int) -> bool:
        """Whether a step is due at ``pages`` estimated WAL pages written in
        ``commits`` commits (both since the writer opened). Not when the commits
        since the last decision average more than :data:`BIG_COMMIT_PAGES` pages
        (asked again a quarter step later: the commits may get smaller — a group's
        first commit, say, creates all its agents at once). When due, the next
        threshold is left to :meth:`step` or :meth:`busy`."""
        if pages < self.next_at:
            return False
        window = commits - self._commits_at
        big = window > 0 and (pages - self._pages_at) / window > BIG_COMMIT_PAGES
        self._pages_at, self._commits_at = pages, commits
        if big:
            self.next_at = pages + GROW_STEP // 4
            return False
        self.next_at = math.inf  # (pending: step() or busy() sets the next)
        return True

    def step(self, wal_path: str, page_size: int, pages: float) -> int:
        """Grow the WAL file when fewer than half a step of frames are left past the
        frames written (:func:`wal_frames`): to the next multiple of
        :data:`GROW_STEP` frames at least half a step past them, capped at
        :data:`GROW_CAP`; and set the next threshold, when the estimated pages will
        have reached the file's room less half a step. Returns the bytes added. The
        caller holds the database's write lock (:func:`grow`); an ``OSError`` (no room
        on the disk, say) is the caller's, and the growth then ends."""
        self.next_at = math.inf
        frames = wal_frames(wal_path, page_size)
        have = room(wal_path, page_size)
        # estimated pages a frame since the last step: the backend's estimate runs
        # ~0.6x the frames before its first calibration and up to ~1.4x after it
        # (a group's commits share pages); 1 at the first step (the margin covers it)
        scale = 1.0
        if 0 <= self._frames_at < frames and pages > self._step_pages:
            scale = min(max((pages - self._step_pages) / (frames - self._frames_at), 0.25), 4.0)
        self._step_pages, self._frames_at = pages, frames
        added = 0
        if have - frames < GROW_STEP // 2 and have < GROW_CAP:
            target = min(GROW_CAP, ((frames + GROW_STEP // 2) // GROW_STEP + 1) * GROW_STEP)
            added = grow(wal_path, target, page_size)
            if added:
                self.steps += 1
                have = room(wal_path, page_size)
        if have >= GROW_CAP:
            return added  # grown to the cap (or past it by the commits): done
        self.next_at = pages + max((have - frames - GROW_STEP // 2) * scale, RETRY_PAGES)
        return added

    def busy(self, pages: float) -> None:
        """A step found the write lock held by another connection: retry after
        :data:`RETRY_PAGES` more estimated pages."""
        self.next_at = pages + RETRY_PAGES

    def stop(self) -> None:
        """No more steps (the first checkpoint is queued, or a step failed)."""
        self.next_at = math.inf


def read_shm(db_path: str, size: int) -> bytes:
    """The first ``size`` bytes of ``db_path``'s ``-shm`` file (the wal-index), read
    without closing a descriptor SQLite's connections in this process rely on
    (:func:`.fds.read_head`: why); empty when there is no such file."""
    try:
        return sqlite_fds.read_head(db_path + "-shm", size)
    except FileNotFoundError:
        return b""
