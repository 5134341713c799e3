"""A page backup's chunks fed while the store file's one reader reads it
(``sqlite_prefetch.Prefetch``, docs/benchmarks.md "backupfeed"): the plan reads its few
pages, then starts the reader and returns without waiting for it; each chunk is read
once the reader is past its last byte (a page-cache hit, never a read ahead of the
reader), so a chunk is sealed and written while the reader reads the next windows;
the image and its digests are byte for byte those of a snapshot read without a
read-ahead; a cancel while a chunk waits for the reader ends the chunks at once (the
reader still in its request); a backup taken so, with a writer writing and
checkpointing while the reader is held, restores the snapshot's state."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import prefetch as sqlite_prefetch
from statekeeper.backends.sqlite.pages import PageSnapshot, SnapshotStopped
from statekeeper.backends.sqlite.snapopen import open_snapshot
from statekeeper.governance.backup import BackupKey, backup, restore

from ..governance._point_in_time import keyring

pytestmark = pytest.mark.skipif(
    not hasattr(os, "preadv") or not os.path.exists("/proc/meminfo"),
    reason="no preadv or /proc/meminfo (Linux): nothing is read ahead",
)

WINDOW = 64 << 10
#: the deadline of a wait for a condition (never a sleep: the condition ends it)
DEADLINE = 30.0


def _store(path: Path, rows: int = 3000) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA page_size = 1024")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE sk_events (k INTEGER PRIMARY KEY, v BLOB)")
        conn.executemany(
            "INSERT INTO sk_events VALUES (?, ?)", ((i, os.urandom(300)) for i in range(rows))
        )
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


@contextmanager
def snapshot(path: Path) -> Iterator[PageSnapshot]:
    with closing(sqlite3.connect(path)) as writer:  # (keeps the WAL index)
        writer.execute("INSERT OR REPLACE INTO sk_events VALUES (-1, x'00')")
        writer.commit()
        snap = open_snapshot(str(path), 5.0)
        assert snap is not None
        try:
            yield snap
        finally:
            snap.close()


class _Gate:
    """The reader's requests (on its own descriptor: a window sent to ``/dev/null``
    or read into its buffer) from ``hold_from`` on wait for :attr:`go`; :attr:`held`
    is set once one waits. Every request and every chunk read (``preadv`` on another
    descriptor) noted in order in :attr:`said`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, hold_from: int) -> None:
        self.fd = -1
        self.hold_from = hold_from
        self.held, self.go = threading.Event(), threading.Event()
        self.said: list[tuple[str, int, int]] = []
        real, real_send = os.preadv, os.sendfile

        def hold(offset: int) -> None:
            if offset >= self.hold_from:
                self.held.set()
                assert self.go.wait(DEADLINE)

        def preadv(fd: int, buffers: list[Any], offset: int, *rest: Any) -> int:
            length = sum(len(b) for b in buffers)
            if fd == self.fd and self.fd >= 0:
                hold(offset)
                got = real(fd, buffers, offset, *rest)
                self.said.append(("read", offset, offset + got))
                return got
            self.said.append(("chunk", offset, offset + length))
            return real(fd, buffers, offset, *rest)

        def sendfile(out: int, fd: int, offset: int, count: int) -> int:
            if fd != self.fd or self.fd < 0:
                return real_send(out, fd, offset, count)
            hold(offset)
            got = real_send(out, fd, offset, count)
            self.said.append(("read", offset, offset + got))
            return got

        monkeypatch.setattr(os, "preadv", preadv)
        monkeypatch.setattr(os, "sendfile", sendfile)


def test_a_chunk_is_yielded_while_the_reader_still_reads_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader held at its third window: the plan returns and the first chunks
    (the first two windows' pages) are yielded meanwhile (was: the plan waited for
    the reader's last request, so no chunk came before the whole file was read)."""
    db = tmp_path / "s.db"
    _store(db)
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", WINDOW)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    gate = _Gate(monkeypatch, hold_from=2 * WINDOW)
    got: list[bytes] = []
    first = threading.Event()
    failed: list[BaseException] = []
    with snapshot(db) as snap:
        gate.fd = snap._prefetch._fd

        def read() -> None:
            try:
                for piece in snap.chunks(WINDOW):
                    got.append(bytes(piece))
                    first.set()
            except BaseException as exc:  # (reported by the test's thread)
                failed.append(exc)
                first.set()

        reading = threading.Thread(target=read)
        reading.start()
        try:
            assert first.wait(DEADLINE), "no chunk while the reader was held"
            assert not failed
            assert not gate.go.is_set() and gate.held.wait(DEADLINE)
            assert len(got) >= 1
        finally:
            gate.go.set()
            reading.join(DEADLINE)
        assert not reading.is_alive() and not failed
        assert sum(len(piece) for piece in got) == snap.size


def test_each_chunk_is_read_after_the_reader_passed_it_and_the_image_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every chunk's read comes after the reader's request covering its last byte
    (a page-cache hit: never a page read ahead of the reader, which would break its
    large requests, docs/benchmarks.md "backupread"); the image and its digests are
    those of the same snapshot read without a read-ahead."""
    db = tmp_path / "s.db"
    _store(db)
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", WINDOW)
    with snapshot(db) as snap:  # (a file just written: cached, nothing read ahead)
        plain = b"".join(bytes(p) for p in snap.chunks(3 << 10, seed=7))
        plain_digests = bytes(snap.digests)
        assert not snap._prefetch.started
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    gate = _Gate(monkeypatch, hold_from=1 << 62)
    with snapshot(db) as snap:
        gate.fd = snap._prefetch._fd
        fed = b"".join(bytes(p) for p in snap.chunks(3 << 10, seed=7))
        fed_digests = bytes(snap.digests)
        assert snap._prefetch.started
        size = snap.size
    assert fed == plain and fed_digests == plain_digests
    done = 0
    chunks = 0
    for kind, _, end in gate.said:
        if kind == "read":
            done = end
        else:
            chunks += 1
            assert end <= done or done >= size, (end, done)
    assert chunks >= size // (3 << 10)


def test_a_cancel_while_a_chunk_waits_for_the_reader_ends_the_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader held in its second window, the chunks waiting for it: a cancel
    raises SnapshotStopped in the chunks' thread before it reads another chunk, the
    reader still in its request; the close after waits for the reader."""
    db = tmp_path / "s.db"
    _store(db)
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", WINDOW)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    gate = _Gate(monkeypatch, hold_from=WINDOW)
    raised: list[BaseException] = []
    with snapshot(db) as snap:
        gate.fd = snap._prefetch._fd

        def read() -> None:
            try:
                for _ in snap.chunks(WINDOW):
                    pass
            except BaseException as exc:
                raised.append(exc)

        reading = threading.Thread(target=read)
        reading.start()
        try:
            assert gate.held.wait(DEADLINE)
            snap.cancel()
            reading.join(DEADLINE)
            assert not reading.is_alive()
            assert gate.held.is_set() and not gate.go.is_set()  # (still in its request)
        finally:
            gate.go.set()
    assert len(raised) == 1 and isinstance(raised[0], SnapshotStopped)
    chunk_ends = [end for kind, _, end in gate.said if kind == "chunk"]
    assert all(end <= WINDOW for end in chunk_ends)


async def test_a_backup_fed_under_the_reading_restores_its_snapshot_while_a_writer_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader held at its second window until a writer has saved over every
    agent and checkpointed (the backup's chunks meanwhile fed from what was read):
    the backup restores the state of its snapshot, every check of the restore
    passed."""
    key = BackupKey(os.urandom(32))
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", WINDOW)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    db = tmp_path / "s.db"
    gate = _Gate(monkeypatch, hold_from=WINDOW)
    real_init = PageSnapshot.__init__

    def noted(self: PageSnapshot, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        gate.fd = self._prefetch._fd

    monkeypatch.setattr(PageSnapshot, "__init__", noted)
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        for i in range(400):
            await src.save(f"t{i % 3}/agent-{i:03d}", {"i": i, "pad": "x" * 200})
        running = __import__("asyncio").ensure_future(backup(src, tmp_path / "b.skb", key))
        loop = __import__("asyncio").get_running_loop()
        assert await loop.run_in_executor(None, gate.held.wait, DEADLINE)
        for i in range(400):
            await src.save(f"t{i % 3}/agent-{i:03d}", {"i": -i})
        with closing(sqlite3.connect(db)) as other:
            other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        gate.go.set()
        await running
    async with StateStore(f"sqlite:///{tmp_path / 'd.db'}", keyring=keyring()) as dst:
        await restore(dst, [tmp_path / "b.skb"], key)
        for i in (0, 199, 399):
            assert (await dst.load(f"t{i % 3}/agent-{i:03d}")).data == {"i": i, "pad": "x" * 200}


def test_a_cold_files_few_cached_pages_are_dropped_before_it_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file with a few scattered pages cached past its first window (what a plan
    read) has them dropped when its reader starts (read before it, ahead of it, they
    broke its requests: 121-127 against 60-76 for the bench store); a file mostly
    cached keeps its pages. (On a disk: a tmpfs never drops its pages.)"""
    import tempfile

    if not os.path.isdir("/var/tmp"):
        pytest.skip("no /var/tmp")
    window = sqlite_prefetch.WINDOW
    with tempfile.TemporaryDirectory(dir="/var/tmp") as where:
        path = Path(where) / "f"
        path.write_bytes(os.urandom(3 * window))
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            if sqlite_prefetch.resident(fd, 0, 3 * window) > 0:
                pytest.skip("this file system keeps the file's pages (tmpfs?)")
            for at in range(window, 3 * window, window // 4):  # (a plan's scattered pages)
                os.pread(fd, 1024, at)
            assert sqlite_prefetch.resident(fd, window, 2 * window) > 0
            dropped: list[tuple[int, int, bool]] = []
            real = os.posix_fadvise

            def advise(fd: int, offset: int, length: int, advice: int) -> None:
                cached = sqlite_prefetch.resident(fd, window, 2 * window)
                real(fd, offset, length, advice)
                dropped.append((offset, length, cached > 0 and advice == os.POSIX_FADV_DONTNEED))

            monkeypatch.setattr(os, "posix_fadvise", advise)
            ahead = sqlite_prefetch.Prefetch(fd, 3 * window)
            ahead.start()
            ahead.wait(ahead.size)
            ahead.stop()
            monkeypatch.setattr(os, "posix_fadvise", real)
            assert ahead.started
            assert dropped == [(window, 2 * window, True)]
            assert sqlite_prefetch.cached(fd, 0, 3 * window)  # (read back in by the reader)
            # mostly cached (every page but one window's): nothing dropped
            os.posix_fadvise(fd, 0, window, os.POSIX_FADV_DONTNEED)
            before = sqlite_prefetch.resident(fd, window, 2 * window)
            assert not sqlite_prefetch.clear(fd, 3 * window)
            assert sqlite_prefetch.resident(fd, window, 2 * window) == before
            # scarce: dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.pread(fd, 1024, 2 * window)
            assert sqlite_prefetch.clear(fd, 3 * window)
            assert sqlite_prefetch.resident(fd, window, 2 * window) == 0
        finally:
            os.close(fd)


def test_a_heads_scan_started_before_a_plan_it_was_told_of_waits_for_its_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``will_plan`` and the heads' scan started first (as a backup starts its heads'
    thread): the plan's pages are read before the reader's first request (the scan
    did not start it), and the scan reads after the reader's last."""
    db = tmp_path / "s.db"
    _store(db)
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", WINDOW)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    gate = _Gate(monkeypatch, hold_from=1 << 62)
    real_pread = os.pread

    def pread(fd: int, size: int, offset: int) -> bytes:
        if gate.fd >= 0:
            gate.said.append(("page", offset, offset + size))
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", pread)
    with snapshot(db) as snap:
        gate.fd = snap._prefetch._fd
        conn = snap.conn
        asked = threading.Event()

        class Noted:
            def execute(self, *args: Any) -> Any:
                gate.said.append(("heads", 0, 0))
                return conn.execute(*args)

        snap.conn = Noted()  # type: ignore[assignment]
        snap.will_plan()
        real_wait = snap._no_plan_ahead.wait

        def waiting() -> bool:
            asked.set()
            return real_wait()

        monkeypatch.setattr(snap._no_plan_ahead, "wait", waiting)
        heads = threading.Thread(target=snap.heads)
        heads.start()
        assert asked.wait(DEADLINE)  # (the scan waits for the plan)
        snap.plan()
        heads.join(DEADLINE)
        assert not heads.is_alive()
        snap.conn = conn
    kinds = [s[0] for s in gate.said]
    first_read = kinds.index("read")
    last_read = len(kinds) - 1 - kinds[::-1].index("read")
    assert "page" in kinds[:first_read]
    assert kinds.index("heads") > last_read
