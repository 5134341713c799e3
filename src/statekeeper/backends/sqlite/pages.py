"""A point-in-time image of a live SQLite store, read as pages: what a full backup of
a SQLite store ships (no table rebuilt, no temporary copy on disk).

**The snapshot.** For a moment the store's write lock is held (``BEGIN IMMEDIATE`` on
a connection of our own: writers wait, as for any other writer's commit); meanwhile
a read-only connection opens its read transaction (that is the snapshot) and the
wal-index header (the ``-shm`` file, https://www.sqlite.org/walformat.html) tells
how many WAL frames it sees (``mxFrame``), how many pages the database has then
(``nPage``) and how many frames are copied into the database file already
(``nBackfill``). The write lock is then released: writers commit while the pages
are read. The image of page *p* is the latest of the frames ``1..mxFrame`` that
holds *p*, else the database file's page *p*. While the read transaction stays open,
SQLite guarantees both stay true: frames ``1..mxFrame`` are never overwritten (the
WAL is not restarted under a reader's mark), and a checkpoint copies into the
database file only frames up to the reader's mark (so a page the image takes from
the file has no frame of the snapshot, and no later one can reach the file). The
same connection reads the manifest's heads and counts: they describe exactly the
bytes shipped.

**What leaves the store.** Only the stream tables (:data:`COPIED_TABLES` and their
indexes) and the schema, as their b-tree pages; every other page is zeros: free
pages, the change feed and its deletion marks, the leases (the root of each such
table is an empty leaf: it reads as an empty table). Inside the kept pages, the
bytes SQLite no longer uses (the unallocated gap, freeblocks, the unused tail of an
overflow page) are zeroed too: without ``secure_delete`` they still hold the bytes
of deleted rows. Which pages the dropped tables hold, and how much of an overflow
page is used, SQLite's ``dbstat`` table says; the free pages, page 1's free-page list;
a kept page's first byte whether it is a b-tree or an overflow page (see
:meth:`PageSnapshot.plan`: ``dbstat`` reads the stream tables only when they have
overflow pages). Page 1's header no longer lists a free-page list
and says "rollback journal" (the image is a plain file, never opened with a WAL).
"""

from __future__ import annotations

import array
import os
import sqlite3
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterator

from ...errors import BackendError, StatekeeperError
from . import fds as sqlite_fds
from .export import COPIED_TABLES
from .pagepass import (
    BTREE,
    DROP,
    EMPTY_INDEX,
    EMPTY_TABLE,
    KEPT,
    OVERFLOW,
    heads_packed,
    heads_scan,
    page_pass,
    tree_outline,
    tree_pages,
)
from .prefetch import Prefetch, can_read_ahead

__all__ = ["PageSnapshot", "SnapshotStopped"]

# what becomes of a page of the image (:mod:`.pagepass` applies it)
_DROP = DROP
_BTREE = BTREE
_OVERFLOW = OVERFLOW
_EMPTY_TABLE = EMPTY_TABLE
_EMPTY_INDEX = EMPTY_INDEX
_KEPT = KEPT
#: fewer pages than this: an overflow page's first byte (of the next page's number) is 0
_FIRST_BYTE_PAGES = 1 << 24
_LOCK_BYTE = 0x40000000  # the page holding this offset is never used (file locks)
_LEAF_TYPES = (0x0A, 0x0D)  # an index and a table b-tree leaf's first byte


class SnapshotStopped(StatekeeperError):
    """:meth:`PageSnapshot.chunks` after :meth:`PageSnapshot.cancel` (its caller cancelled)."""


class PageSnapshot:
    """An open snapshot of the store at ``path`` (see the module documentation):
    :attr:`conn` reads it with SQL (while :meth:`plan` reads it on a connection of its
    own), :meth:`chunks` yields its image. Close it, once no thread reads it any more:
    a thread reading it is stopped by :meth:`cancel` (after the chunk in hand)."""

    def __init__(
        self,
        path: str,
        conn: sqlite3.Connection,
        stat: sqlite3.Connection,
        page_size: int,
        pages: int,
        frames: dict[int, int],
    ) -> None:
        self.path = path
        self.conn = conn
        self._stat = stat
        self.page_size = page_size
        self.pages = pages
        #: page number -> offset in the WAL of its latest frame of the snapshot
        self.frames = frames
        self._plan: bytearray | None = None
        #: the unused bytes at the end of each overflow page, by page number (once
        #: ``dbstat`` read the kept trees)
        self._unused: array.array[int] | None = None
        #: the page digests' seed (:meth:`chunks`), and the digests of the pages read
        self._seed: int | None = None
        self.digests = bytearray()
        self._usable = page_size
        self._kept: list[str] = []
        #: whether ``dbstat`` read the kept trees (their overflow pages are known)
        self._read_overflow = False
        #: the dropped trees' leaves the plan listed without reading them (sorted):
        #: each checked to read as a leaf as its chunk is read (:meth:`_apply`)
        self._leaves: array.array[int] = array.array("I")
        self._cancelled = threading.Event()
        #: clear while a plan is to come (:meth:`will_plan`): the heads' scan waits
        self._no_plan_ahead = threading.Event()
        self._no_plan_ahead.set()
        # (given back, not closed, while other connections of this process hold it;
        # given back if what follows fails)
        self._db = sqlite_fds.take(path)
        self._wal = self._ahead = -1
        try:
            self._wal = os.open(path + "-wal", os.O_RDONLY) if frames else -1
            #: the file's one reader from the disk (in order, in large requests, before
            #: any other read of the backup's: docs/benchmarks.md, "backupread"), on
            #: its own descriptor (``fds.take``: never closed under SQLite's locks), so
            #: its read-ahead state is its own; none where no read-ahead can run
            #: (without ``/proc/self/fd`` a descriptor taken is closed after: the
            #: process's locks on the file dropped)
            if can_read_ahead():
                self._ahead = sqlite_fds.take(path)
            size = min(pages * page_size, os.fstat(self._db).st_size)
            self._prefetch = Prefetch(self._ahead, size)
        except BaseException:
            self._give_back()
            raise

    @property
    def size(self) -> int:
        """The image's size in bytes."""
        return self.pages * self.page_size

    def cancel(self) -> None:
        """Ask the thread reading the image to stop: :meth:`chunks` raises
        :class:`SnapshotStopped` before its next piece, the plan's (and the heads')
        wait for the read-ahead ends. Safe from any thread; nothing is closed: the
        caller waits for the reading thread to end, then closes (closing under it
        would give back descriptors it reads: ``fds.py``)."""
        self._cancelled.set()
        self._prefetch.halt()
        self._no_plan_ahead.set()

    def close(self) -> None:
        self._no_plan_ahead.set()
        try:
            self._prefetch.stop()  # (it reads through self._ahead)
            self.conn.close()
            self._stat.close()
        finally:
            self._give_back()

    def _give_back(self) -> None:
        try:
            if self._ahead >= 0:
                sqlite_fds.release(self._ahead)
            sqlite_fds.release(self._db)
        finally:
            if self._wal >= 0:
                os.close(self._wal)

    def plan(self) -> None:
        """Work out which pages are kept, in the snapshot: call once, before
        :meth:`chunks`. Every page is kept but the dropped trees' (``dbstat`` over
        them: the change feed, its deletion marks, the leases), the free pages (the
        free-page list of page 1's header) and the lock-byte page; whether a kept page
        is a b-tree or an overflow page its first byte says (a b-tree page's type, 2,
        5, 10 or 13; an overflow page begins with the next page's number, whose first
        byte is 0 in a file of fewer than 2**24 pages). ``dbstat`` over the kept trees
        (what the plan cost before: 0.10 of a full backup's ~0.95 CPU-s for the
        100,000-agent bench store, docs/benchmarks.md, backupcpu) runs only once an
        overflow page is met, for the length of its used part. A file this cannot read
        so (auto-vacuum's pointer-map pages, 2**24 pages or more, a free-page list that
        does not add up) is planned with ``dbstat`` over the kept trees at once. The
        dropped trees' leaves are listed from their interior pages, not read
        (:meth:`_walked`).

        Its pages (page 1, the free-page list, the dropped trees' interior pages: a
        few dozen) are read first, then the file's one reader started
        (:class:`.prefetch.Prefetch`: in file order, in large requests, on a file not
        in the page cache), and it returns: :meth:`chunks` reads each chunk once the
        reader is past it, so the chunks are sealed and written while the reader reads
        on (docs/benchmarks.md, "backupfeed"; the plan waited for the whole file's read
        before, "backupread"). A plan that needs ``dbstat`` (pages all over the file)
        waits for the reader first: read before it, they would break its requests into
        single pages. On a failure here the reading is stopped (its waiters go on)."""
        try:
            self._planned()
            self._prefetch.start()
        except BaseException as exc:
            self._prefetch.stop()
            if isinstance(exc, OSError):  # (as :meth:`chunks`)
                raise BackendError(f"{self.path}: cannot read the store file: {exc}") from exc
            raise
        finally:
            self._no_plan_ahead.set()

    def will_plan(self) -> None:
        """Say :meth:`plan` is to be called, on another thread: the heads' scan (which
        reads pages all over the file) then waits for it to start the file's reader
        once its own pages are read, rather than start it first (the plan's reads
        would queue behind the reader's)."""
        if self._plan is None and not self._cancelled.is_set():
            self._no_plan_ahead.clear()

    def _read_in(self) -> None:
        """The whole file read in by its one reader (started here if not yet) before
        what follows reads pages all over it: ``dbstat``."""
        self._prefetch.start()
        self._prefetch.wait(self._prefetch.size)

    def _planned(self) -> None:
        conn = self._stat
        first = self._page(1)
        reserved = first[20]
        self._usable = self.page_size - reserved
        marks = ",".join("?" * len(COPIED_TABLES))
        trees = conn.execute(
            "SELECT name, tbl_name IN (" + marks + "), rootpage FROM sqlite_master"
            " WHERE rootpage > 0 ORDER BY rootpage",
            COPIED_TABLES,
        ).fetchall()
        kept = ["sqlite_schema" if sqlite3.sqlite_version_info >= (3, 33) else "sqlite_master"]
        kept += [name for name, keep, _ in trees if keep]
        self._kept = kept
        free = None
        if self.pages < _FIRST_BYTE_PAGES and not int.from_bytes(first[52:56], "big"):
            free = self._free_pages(first)
        if free is None:  # read every kept tree with dbstat, as before
            self._read_in()
            plan = bytearray(self.pages + 1)  # _DROP everywhere
            self._overflow_pages(plan)
        else:
            plan = bytearray((_KEPT,)) * (self.pages + 1)  # _KEPT everywhere
            plan[0] = _DROP
            for pageno in free:
                plan[pageno] = _DROP
            lock = _LOCK_BYTE // self.page_size + 1
            if lock <= self.pages:
                plan[lock] = _DROP
            offsets = self._frame_offsets()
            unwalked = [
                name
                for name, keep, root in trees
                if not keep and not self._walked(root, plan, offsets)
            ]
            if unwalked:
                self._read_in()
            for name in unwalked:
                for (pageno,) in conn.execute("SELECT pageno FROM dbstat WHERE name = ?", (name,)):
                    plan[self._in_file(pageno)] = _DROP
        for _, keep, root in trees:
            if not keep and 1 < root <= self.pages:
                table = self._page(root)[0] in (0x05, 0x0D)  # else an index b-tree
                plan[root] = _EMPTY_TABLE if table else _EMPTY_INDEX
        self._plan = plan

    def _walked(self, root: int, plan: bytearray, offsets: array.array[int] | None) -> bool:
        """Whether the C walk (``native/headscan.c``) set every page of the b-tree at
        ``root`` to be dropped in ``plan`` (else nothing is set: ``dbstat`` lists them).
        ``dbstat`` of the change feed's trees cost ~70 M instructions (10-20 ms) before
        a backup's first chunk (docs/benchmarks.md, "backup4").

        The walk reads the tree's interior pages only (``tree_outline``): the pages
        they point to at the leaves' depth are listed unread, and each is checked to
        read as a leaf when its chunk is read (:meth:`_apply`). Reading the leaves
        (the change feed's ~4,700 pages, all over the file) made the plan, and every
        chunk after it, wait for the disk's read of nearly the whole file when it was
        not cached (docs/benchmarks.md, "backup9"). A leaf's cells' overflow pages are
        not listed: such a page, kept by the plan, reads as an overflow page of no
        kept tree once ``dbstat`` read the kept trees, and is dropped
        (:mod:`.pagepass`)."""
        if not 1 < root <= self.pages:
            return False
        args = (self._db, self._wal, offsets, root, self.page_size, self._usable, self.pages)
        if tree_outline is not None:
            outline = tree_outline(*args, plan, _DROP)
            if outline is None:
                return False
            leaves = array.array("I")
            leaves.frombytes(outline[1])
            self._leaves = array.array("I", sorted(self._leaves + leaves))
            return True
        return tree_pages is not None and tree_pages(*args, plan, _DROP) is not None

    def _frame_offsets(self) -> array.array[int] | None:
        """The snapshot's WAL frames as the C scans read them: the offset of page
        *p*'s frame at index *p* (0: the page is read from the database file)."""
        if not self.frames:
            return None
        offsets = array.array("Q", bytes(8 * (max(self.frames) + 1)))
        for pageno, at in self.frames.items():
            offsets[pageno] = at
        return offsets

    def _overflow_pages(self, plan: bytearray) -> None:
        """``dbstat`` over the kept trees: each of their pages marked in ``plan``
        (b-tree or overflow) and every overflow page's unused bytes noted."""
        unused = array.array("I", bytes(4 * (self.pages + 1)))
        self._unused = unused
        for name in self._kept:
            for pageno, page_type, spare in self._stat.execute(
                "SELECT pageno, pagetype, unused FROM dbstat WHERE name = ?", (name,)
            ):
                self._in_file(pageno)
                if page_type == "overflow":
                    plan[pageno] = _OVERFLOW
                    unused[pageno] = spare
                else:
                    plan[pageno] = _BTREE
        self._read_overflow = True

    def _in_file(self, pageno: int) -> int:
        """``pageno``, a page ``dbstat`` listed, if it is one of the snapshot's; else
        ``sqlite3.DatabaseError``: a damaged b-tree's cells name any page number
        (``dbstat`` lists them as they read), past the plan's end (was: IndexError)."""
        if not 1 <= pageno <= self.pages:
            raise sqlite3.DatabaseError(
                f"{self.path}: a b-tree's page {pageno} is not one of the file's"
                f" {self.pages}: the file is damaged (PRAGMA integrity_check)"
            )
        return pageno

    def _free_pages(self, first: bytes) -> list[int] | None:
        """The pages of the free-page list page 1's header starts (trunk pages and
        the leaves each lists), or None: the list is not what the header counts."""
        count = int.from_bytes(first[36:40], "big")
        trunk = int.from_bytes(first[32:36], "big")
        out: list[int] = []
        while trunk:
            if not 1 < trunk <= self.pages or len(out) >= count:
                return None
            page = self._page(trunk)
            leaves = int.from_bytes(page[4:8], "big")
            if 8 + 4 * leaves > self._usable:
                return None
            out.append(trunk)
            for at in range(8, 8 + 4 * leaves, 4):
                leaf = int.from_bytes(page[at : at + 4], "big")
                if not 1 < leaf <= self.pages:
                    return None
                out.append(leaf)
            trunk = int.from_bytes(page[:4], "big")
        return out if len(out) == count else None

    def heads(self) -> tuple[list[str], list[int], list[bytes], int] | None:
        """The heads table (``sk_agents``) read from the snapshot's pages by the C
        scan (``native/headscan.c``): ``(agents, head seqs, head tags, sum of the head
        seqs)`` of the streams with a head, in id order; or None: the scan is not
        built, or the table is not in the form it reads (another layout of its
        record, a stream without a tag, tags of several lengths, a record too long
        for its page ...): SQL reads the heads then (:mod:`~statekeeper.governance.
        backup.tagheads`). What SQLite's statement and its split cost: 383 M of a
        100,000-agent backup's 1,513 M instructions (docs/benchmarks.md, "backup4").
        Reads through :attr:`conn` (call it on that connection's thread)."""
        if heads_scan is None:
            return None
        scan = self._scan_args()
        return None if scan is None else heads_scan(*scan)

    def packed_heads(
        self, before: bytes, after: bytes, prefix: bytes
    ) -> tuple[bytes, int, int, list[tuple[str, int]]] | None:
        """:meth:`heads` as msgpack, never as a Python object per stream
        (``native/headpack.c``): ``(before + the packed map {"agent": agents, "head":
        heads, "tag": tags} + after, streams, sum of the head seqs, own)``, ``own`` the
        ``(agent, head)`` of the agents whose UTF-8 id starts with ``prefix``; or None
        where :meth:`heads` would be None (or the module is older). The 300,000
        objects of a 100,000-agent store, packed and freed under the GIL, held up the
        page pipeline's threads (docs/benchmarks.md, "backup8")."""
        if heads_packed is None:
            return None
        scan = self._scan_args()
        return None if scan is None else heads_packed(*scan, before, after, prefix)

    def _scan_args(
        self,
    ) -> tuple[int, int, array.array[int] | None, int, int, int, int] | None:
        """What both C entry points over the heads table read: the snapshot's
        files and frames, the table's root page, the page size, the pages' usable
        bytes and the page count; or None: the table's record is not the one the C
        scan reads. Through :attr:`conn`."""
        # the table's pages are all over the file: read once the file's one reader is
        # done; started here too (once: a plan to come starts it), or a scan with no
        # plan waited forever
        self._no_plan_ahead.wait()
        self._read_in()
        conn = self.conn
        root = conn.execute(_HEADS_ROOT).fetchone()
        layout = conn.execute(_HEADS_LAYOUT).fetchall()
        if root is None or layout != _HEADS_RECORD:
            return None
        usable = self.page_size - self._page(1)[20]
        return (
            self._db,
            self._wal,
            self._frame_offsets(),
            int(root[0]),
            self.page_size,
            usable,
            self.pages,
        )

    def _page(self, pageno: int) -> bytes:
        """One page of the snapshot, as stored (no plan applied)."""
        size = self.page_size
        at = self.frames.get(pageno)
        if at is not None:
            return os.pread(self._wal, size, at)
        return os.pread(self._db, size, (pageno - 1) * size).ljust(size, b"\0")

    def chunks(
        self,
        chunk_bytes: int,
        spare: Callable[[int], bytearray | None] | None = None,
        seed: int | None = None,
    ) -> Iterator[bytearray]:
        """The image, in pieces of about ``chunk_bytes`` (whole pages), each a buffer
        the caller keeps (read into it: no copy): ``spare(n)`` if it gives one (a
        buffer of ``n`` bytes the caller is done with: every byte is overwritten), else
        a new one. With a ``seed``, every page's digest (XXH3-128 under it,
        :func:`~statekeeper.governance.backup.pagedelta.page_digests`) is in
        :attr:`digests` once its piece is yielded, taken in the same pass. Each piece
        is read once the file's reader is past it (a page-cache hit, the reader reading
        on while it is sealed and written: docs/benchmarks.md, "backupfeed")."""
        if self._plan is None:
            self.plan()
        self._seed = seed
        self.digests = bytearray()
        size = self.page_size
        step = max(1, chunk_bytes // size)
        for first in range(1, self.pages + 1, step):
            count = min(step, self.pages + 1 - first)
            # (once the reader is past the chunk: a page-cache hit; a cancel wakes it)
            self._prefetch.wait((first - 1 + count) * size)
            if self._cancelled.is_set():
                raise SnapshotStopped(f"{self.path}: the backup reading it was cancelled")
            buf = spare(count * size) if spare is not None else None
            if buf is None:
                buf = bytearray(count * size)
            try:  # (the disk failing: a typed error naming the file, was the bare OSError)
                got = os.preadv(self._db, [buf], (first - 1) * size)
                if got < len(buf):  # zeros past the file's end: pages only the WAL holds
                    buf[got:] = bytes(len(buf) - got)
                self._apply(buf, first, count)
            except OSError as exc:
                raise BackendError(f"{self.path}: cannot read the store file: {exc}") from exc
            yield buf

    def _apply(self, chunk: bytearray, first: int, count: int) -> None:
        """The chunk of pages ``first`` to ``first + count - 1``: the WAL's frames of
        the snapshot laid in, then every page filtered by the plan and digested
        (:mod:`.pagepass`, in C where it was built: docs/benchmarks.md,
        "backupc")."""
        plan = self._plan
        assert plan is not None
        size = self.page_size
        frames = self.frames
        with memoryview(chunk) as buf:
            if frames:  # the snapshot's pages the WAL holds, first
                wal = self._wal
                for pageno in range(first, first + count):
                    frame = frames.get(pageno)
                    if frame is not None:
                        at = (pageno - first) * size
                        buf[at : at + size] = os.pread(wal, size, frame)
            if self._leaves:
                self._check_leaves(buf, first, count)
            seed = self._seed
            digests = None
            if seed is not None:
                done = len(self.digests)
                self.digests.extend(bytes(16 * count))
                digests = memoryview(self.digests)[done:]
            try:
                start = 0
                while start < count:
                    stop = page_pass(
                        buf,
                        plan,
                        self._unused,
                        digests,
                        first,
                        start,
                        count,
                        size,
                        self._usable,
                        self._read_overflow,
                        seed or 0,
                    )
                    if stop < 0:
                        break
                    self._read_in()  # (dbstat: pages all over the file)
                    self._overflow_pages(plan)  # then the pass takes its page again
                    start = stop
            finally:
                if digests is not None:
                    digests.release()

    def _check_leaves(self, chunk: memoryview, first: int, count: int) -> None:
        """The dropped trees' pages :meth:`plan` listed as leaves unread, in the chunk
        of pages ``first`` to ``first + count - 1``: each must read as a leaf (else the
        tree is not one SQLite wrote: the pages below it were not listed)."""
        leaves = self._leaves
        size = self.page_size
        for pageno in leaves[bisect_left(leaves, first) : bisect_left(leaves, first + count)]:
            if chunk[(pageno - first) * size] not in _LEAF_TYPES:
                raise sqlite3.DatabaseError(
                    f"{self.path}: page {pageno} of a dropped table's b-tree (the change"
                    " feed's, its deletion marks' or the leases') is not a leaf at its"
                    " tree's leaf depth: the file is damaged (PRAGMA integrity_check)"
                )


_HEADS_ROOT = "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = 'sk_agents'"
#: the heads table's record, column by column (its primary key's ``index_xinfo``: a
#: WITHOUT ROWID table lists every column, the key first), as the C scan reads it
_HEADS_LAYOUT = """
SELECT name, desc, coll, key FROM pragma_index_xinfo((
  SELECT name FROM pragma_index_list('sk_agents') WHERE origin = 'pk'
)) ORDER BY seqno
"""
_HEADS_RECORD = [
    ("agent_id", 0, "BINARY", 1),
    ("head_seq", 0, "BINARY", 0),
    ("created_at", 0, "BINARY", 0),
    ("updated_at", 0, "BINARY", 0),
    ("head_tag", 0, "BINARY", 0),
]
