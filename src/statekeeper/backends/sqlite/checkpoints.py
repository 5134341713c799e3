"""The WAL's bookkeeping: the pages each commit adds (estimated, calibrated against the
WAL's frames), the passive checkpoints queued on the writer thread and the WAL
file's growth ahead."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence

from . import wal as sqlite_wal
from .engine import SQLiteEngine, _Queued

#: estimated WAL pages between two checkpoints (SQLite's own auto-checkpoint default)
CHECKPOINT_PAGES = 1000

#: estimated WAL pages after which a backend checks its estimate against the WAL's real
#: size, once (see SQLiteBackend._calibrate)
CALIBRATE_PAGES = 100


def _pages(requests: Sequence[_Queued]) -> int:
    """Estimated WAL pages a commit of ``requests`` writes: two for the commit (head
    and index pages, shared by the requests of a batch), and per event one page plus
    one per half page of payload (a row that large fills a leaf page of its own and
    touches the table's interior pages). Measured: 3.3 frames for a lone small
    one-event append, 5.1 for one with a 3 KB payload. The backend calibrates the
    estimate against the WAL's real size at each checkpoint (``_wal_scale``)."""
    pages = 2
    for request in requests:
        if isinstance(request, tuple):  # (append_next's arguments: one event)
            pages += 1 + ((len(request[3]) + 1100) >> 11)
            continue
        for event in request.events:
            pages += 1 + ((len(event.payload) + 1100) >> 11)
    return pages


#: a payload shorter than this adds 3 WAL pages to the estimate (``3 + ((n + 1100) >>
#: 11)``, :func:`_pages`)
_SMALL_PAYLOAD = 948


class SQLiteCheckpoints(SQLiteEngine):
    """WAL pages counted, checkpoints and the WAL's growth scheduled."""

    def _wrote(self, pages: int, held: bool = False) -> None:
        """Count the WAL pages a commit added (an estimate, see :func:`_pages`); past
        :data:`CHECKPOINT_PAGES`, queue a passive checkpoint on the writer thread, and
        when the WAL's growth says a step is due (:class:`.wal.Growth`), that
        step. The writer connection's own auto-checkpoint is off, so no commit — inline
        on the event loop least of all — ever runs one; writes arriving meanwhile queue
        behind it on the writer thread, as they would behind a commit.

        Not under ``_writer_busy``: a commit counts its pages after releasing it (the
        loop's inline commits, the commit thread's), so this may run on two threads at
        once, and ``_wal_pages`` may lose one commit's pages, or keep them across a
        reset. Harmless, checked (2026-12-04): these fields only schedule work that is
        safe at any time — a PASSIVE checkpoint (queued twice: the second copies
        nothing) or a step of the WAL file's zeros (SQLite ignores them; both run
        under the lock, on the writer thread) — never what is written or read. The
        estimate drifts by a commit's pages at most per race, and each checkpoint
        calibrates it again; a lost count delays the next checkpoint by one commit."""
        self._wal_pages += pages * self._wal_scale
        if self._wal_pages < self._wal_limit:
            return
        growth = self._growth
        if self._wal_pages >= self._checkpoint_at:
            if self._checkpoint_at < CHECKPOINT_PAGES:
                self._checkpoint_at = CHECKPOINT_PAGES
                self._calibrate()
            if self._wal_pages >= CHECKPOINT_PAGES:
                # the WAL restarts after this checkpoint: its file is as large as the
                # commits need from then on, grown or not
                growth.stop()
                self._estimated = self._wal_pages / self._wal_scale
                self._wal_pages = 0.0
                self._wal_limit = self._checkpoint_at
                self._checkpoint_due = True
                with contextlib.suppress(RuntimeError):  # shut down by close()
                    self._writer_pool.submit(self._locked, self._checkpoint)
                return
        if growth.due(self._wal_pages, self.append_commits) and not self._grow_here(held):
            self._checkpoint_due = True  # (the next write queues behind the step)
            with contextlib.suppress(RuntimeError):  # shut down by close()
                self._writer_pool.submit(self._locked, self._grow_wal)
        self._wal_limit = min(self._checkpoint_at, growth.next_at)

    def _grow_here(self, held: bool = False) -> bool:
        """The WAL's growth step made on this thread (the loop's, or the commit
        thread's, right after a commit) when the writer is idle — or its lock is
        ``held`` by this thread already (a commit of :meth:`_append_batch_sync`) — and
        nothing is queued on the writer thread; False, nothing done, else (the caller
        queues it there).
        A step writes zeros to the page cache and syncs nothing (:func:`.wal.grow`:
        the next commit's sync takes them), ~0.15 ms: on the writer thread it cost a
        lone writer that thread's start, the step's own sync and its next save's hop
        to that thread (docs/benchmarks.md, "group11 … issue 11, 2026-12-05
        afternoon")."""
        if self._checkpoint_due or self._closed:
            return False
        if held:
            self._grow_now()
            return True
        if not self._writer_busy.acquire(False):
            return False
        try:
            if self._checkpoint_due:  # queued meanwhile (another thread): it goes first
                return False
            self._grow_now()
        finally:
            self._writer_busy.release()
        return True

    def _grow_now(self) -> None:
        """:meth:`_grow_wal` under the writer lock the caller holds, after a commit:
        an error ends the growth, never the commit that counted it (on the writer
        thread, where the step was only queued, nobody saw it either)."""
        try:
            self._grow_wal()
        except Exception:
            self._growth.stop()

    def _wal_frames(self) -> int:
        """The frames written to the WAL since it last restarted, read off the WAL
        file's frame headers (:func:`.wal.wal_frames`: never the ``-shm``
        file, whose close would drop SQLite's locks on it)."""
        return sqlite_wal.wal_frames(self.path + "-wal", self._page_size)

    def _grow_wal(self) -> None:
        """One step of the WAL file's growth ahead (:class:`.wal.Growth`: how
        far, and why in steps): zeros, left for the next commit to sync
        (:func:`.wal.grow`: why, and why SQLite ignores them), inside a write
        transaction of the writer connection that writes nothing — no other
        connection appends frames meanwhile. Retried a few saves later if another
        connection holds the write lock (busy timeout 0: it never waits). Made by
        :meth:`_wrote`, at ``synchronous`` ``FULL``/``EXTRA`` only (where every commit
        syncs the WAL), on the committing thread when the writer is idle
        (:meth:`_grow_here`), else queued on the writer thread, where the next write
        queues behind it, as behind a checkpoint. Until the WAL first
        restarts, each commit would otherwise extend the file, and on ext4 the
        fdatasync of a grown file also commits the file system's journal. Measured
        (docs/benchmarks.md, "full11b", "group11d"): a few ms once per step, against
        ~0.1 ms and a sleep on each of a new WAL's first ~175 sequential saves."""
        self._checkpoint_due = False
        conn = self._writer
        if conn is None or self._closed:
            return  # (the last connection's close removes the WAL)
        growth = self._growth
        try:
            conn.execute("BEGIN IMMEDIATE")  # busy_timeout 0: never waits
        except sqlite3.Error:
            growth.busy(self._wal_pages)
        else:
            try:
                growth.step(self.path + "-wal", self._page_size, self._wal_pages)
            except OSError:
                growth.stop()  # (no room on the disk, say: the commits grow the file)
            finally:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
        self._wal_limit = min(self._checkpoint_at, growth.next_at)

    def _calibrate(self) -> None:
        """Check the estimated WAL pages against the frames the WAL holds, once, early
        (at :data:`CALIBRATE_PAGES`), and correct the scale: the first checkpoint then
        comes at CHECKPOINT_PAGES frames written, not estimated. Until the WAL first
        restarts every commit extends its file, and on ext4 an fdatasync that follows
        a file's growth commits the file system's journal too (more system time and one
        more sleep a commit than overwriting a restarted WAL): with the estimate
        uncorrected, the first checkpoint came at ~1,850 frames written, not 1,000
        (5.75 frames a lone save at 2 KiB pages against ~3.5 estimated), and a
        sequential save at ``synchronous=FULL`` paid that growth twice as long as
        SQLite's own auto-checkpoint does (docs/benchmarks.md, "full11"). Each
        checkpoint calibrates the scale again (:meth:`_checkpoint`)."""
        frames = self._wal_frames() - self._wal_frames_at_open
        if frames > 0 and self._wal_pages > 0:
            self._wal_scale = min(max(self._wal_scale * frames / self._wal_pages, 0.5), 4.0)
            self._wal_small = 3 * self._wal_scale
            self._wal_pages = max(self._wal_pages, float(frames))

    def _checkpoint(self) -> None:
        self._checkpoint_due = False
        conn = self._writer
        if conn is None:
            return
        # PASSIVE: copies what no reader still needs, never waits for readers; the
        # next write restarts the WAL from its start when all of it was copied
        with contextlib.suppress(sqlite3.Error):  # a failed checkpoint: the next retries
            row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            # row: (busy, frames in the WAL, frames checkpointed). The WAL restarted at
            # the last checkpoint, so its frames are those written since: calibrate the
            # estimate on them (bounded: a WAL a reader kept from restarting is larger)
            if row is not None and row[1] > 0 and self._estimated > 0:
                self._wal_scale = min(max(row[1] / self._estimated, 0.5), 4.0)
                self._wal_small = 3 * self._wal_scale
