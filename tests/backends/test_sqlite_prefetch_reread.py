"""A second read of the store file's reader feeding a page backup's chunks
(``sqlite_prefetch``, the change "backupfeed"): where the reader sends the file
(``SINK``) must discard it: a ``/dev/null`` that is a regular file (a container whose
``/dev/null`` was removed and re-created by a redirection) got a copy of the whole
store; the reader failing part-way (both ``sendfile`` and ``preadv`` refused on its
descriptor, or an error it does not expect) wakes every waiting chunk and the backup
reads the file itself: its image byte for byte a snapshot's read without a reader; a
store with overflow pages (the ``dbstat`` fallback part-way through the chunks) while a
writer writes and checkpoints: the same; the disk failing under the reader and the
chunks: a typed error (BackendError naming the file), no backup file."""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from statekeeper.backends.sqlite import prefetch as sqlite_prefetch
from statekeeper.backends.sqlite.pages import PageSnapshot
from statekeeper.backends.sqlite.snapopen import open_snapshot

pytestmark = pytest.mark.skipif(
    not hasattr(os, "preadv") or not os.path.exists("/proc/meminfo"),
    reason="no preadv or /proc/meminfo (Linux): nothing is read ahead",
)

WINDOW = 64 << 10


def _store(path: Path, rows: int = 3000, value: int = 300) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA page_size = 1024")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE sk_events (k INTEGER PRIMARY KEY, v BLOB)")
        conn.executemany(
            "INSERT INTO sk_events VALUES (?, ?)", ((i, os.urandom(value)) for i in range(rows))
        )
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


@contextmanager
def _snapshot(path: Path) -> Iterator[PageSnapshot]:
    with closing(sqlite3.connect(path)) as writer:  # (keeps the WAL index)
        writer.execute("INSERT OR REPLACE INTO sk_events VALUES (-1, x'00')")
        writer.commit()
        snap = open_snapshot(str(path), 5.0)
        assert snap is not None
        try:
            yield snap
        finally:
            snap.close()


def _image(snap: PageSnapshot) -> tuple[bytes, bytes]:
    image = b"".join(bytes(piece) for piece in snap.chunks(4 * 1024, seed=7))
    return image, bytes(snap.digests)


def test_a_sink_that_is_not_the_null_device_gets_none_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SINK`` a regular file (a ``/dev/null`` re-created by ``> /dev/null`` as root,
    a broken container): the reader reads the file into its buffer (``preadv``) and
    writes nothing there (was: ``sendfile`` copied the whole store file into it, for
    anyone to read, the disk filled as the store's size)."""
    data = tmp_path / "f"
    data.write_bytes(os.urandom(3 * WINDOW + 100))
    sink = tmp_path / "null"
    sink.write_bytes(b"")
    monkeypatch.setattr(sqlite_prefetch, "SINK", str(sink))
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", WINDOW)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    read: list[int] = []
    real = os.preadv

    def preadv(fd: int, buffers: list[memoryview], offset: int) -> int:
        read.append(offset)
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", preadv)
    fd = os.open(data, os.O_RDONLY)
    try:
        ahead = sqlite_prefetch.Prefetch(fd, data.stat().st_size)
        ahead.start()
        ahead.wait(ahead.size)
        ahead.stop()
    finally:
        os.close(fd)
    assert ahead.started
    assert sink.stat().st_size == 0
    assert read == [0, WINDOW, 2 * WINDOW, 3 * WINDOW]


def test_the_null_device_is_a_sink() -> None:
    """The real ``/dev/null`` is taken (``sendfile``: no copy out of the page cache)."""
    if sqlite_prefetch.SINK is None or not hasattr(os, "sendfile"):
        pytest.skip("no sendfile sink here")
    sink = sqlite_prefetch._sink()
    assert sink >= 0
    os.close(sink)


class _Held:
    """The reader's requests (``sendfile`` or ``preadv`` on descriptor :attr:`fd`) from
    ``WINDOW`` on wait for :attr:`go` (:attr:`held` set once one waits), then do what
    ``fail`` does (raise, or nothing)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: BaseException | None) -> None:
        self.fd = -1
        self.held, self.go = threading.Event(), threading.Event()
        real_send, real_read = os.sendfile, os.preadv

        def hold(fd: int, offset: int) -> None:
            if fd == self.fd and offset >= WINDOW:
                self.held.set()
                assert self.go.wait(30.0)
                if fail is not None:
                    raise fail

        def sendfile(out: int, fd: int, offset: int, count: int) -> int:
            hold(fd, offset)
            return real_send(out, fd, offset, count)

        def preadv(fd: int, buffers: list[memoryview], offset: int) -> int:
            hold(fd, offset)
            return real_read(fd, buffers, offset)

        monkeypatch.setattr(os, "sendfile", sendfile)
        monkeypatch.setattr(os, "preadv", preadv)


def _two_snapshots(db: Path) -> tuple[PageSnapshot, PageSnapshot]:
    """Two snapshots of the one state (no commit between)."""
    first = open_snapshot(str(db), 5.0)
    assert first is not None
    second = open_snapshot(str(db), 5.0)
    assert second is not None
    return first, second


@pytest.mark.parametrize(
    "fail",
    [OSError(errno.EIO, "injected"), RuntimeError("injected")],
    ids=["eio", "unexpected"],
)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_reader_failing_part_way_wakes_the_waiting_chunk_and_the_image_is_the_snapshots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: BaseException
) -> None:
    """The reader's second window refused (``sendfile`` and its ``preadv`` fallback
    both: EIO; or an error it does not expect) while a chunk waits for it: the chunk
    wakes, and every chunk reads the file itself: the image and digests those of a
    snapshot of the same state read without a reader."""
    db = tmp_path / "s.db"
    _store(db)
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", WINDOW)
    with closing(sqlite3.connect(db)) as writer:  # (keeps the WAL index)
        writer.execute("INSERT OR REPLACE INTO sk_events VALUES (-1, x'00')")
        writer.commit()
        plain, fed = _two_snapshots(db)
        try:
            monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: True)
            want = _image(plain)
            assert not plain._prefetch.started
            monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
            held = _Held(monkeypatch, fail)
            held.fd = fed._prefetch._fd
            got: list[tuple[bytes, bytes]] = []
            reading = threading.Thread(target=lambda: got.append(_image(fed)))
            reading.start()
            assert held.held.wait(30.0)
            held.go.set()
            reading.join(30.0)
            assert not reading.is_alive()
            assert fed._prefetch.started
            assert got == [want]
        finally:
            plain.close()
            fed.close()


def test_overflow_pages_while_a_writer_writes_and_checkpoints_under_the_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Long values (overflow pages: the ``dbstat`` fallback met part-way through the
    chunks), many of the snapshot's pages in the WAL; while the reader is held after
    its first window a writer checkpoints (the snapshot's frames moved into the main
    file), rewrites every row and checkpoints again: the image and digests read behind
    the reader are those of a snapshot of the same state read before any of it."""
    db = tmp_path / "s.db"
    _store(db, rows=400, value=3000)
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", WINDOW)
    with closing(sqlite3.connect(db)) as writer:
        writer.executemany(
            "UPDATE sk_events SET v = ? WHERE k = ?",
            ((os.urandom(2500), k) for k in range(0, 400, 2)),
        )
        writer.commit()  # (the snapshot's pages in the WAL, not yet in the file)
        plain, fed = _two_snapshots(db)
        try:
            assert fed.frames
            monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: True)
            want = _image(plain)
            monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
            held = _Held(monkeypatch, None)
            held.fd = fed._prefetch._fd
            got: list[tuple[bytes, bytes]] = []
            reading = threading.Thread(target=lambda: got.append(_image(fed)))
            reading.start()
            assert held.held.wait(30.0)
            writer.execute("PRAGMA wal_checkpoint(PASSIVE)")
            writer.executemany(
                "UPDATE sk_events SET v = ? WHERE k = ?",
                ((os.urandom(4000), k) for k in range(400)),
            )
            writer.commit()
            writer.execute("PRAGMA wal_checkpoint(PASSIVE)")
            held.go.set()
            reading.join(30.0)
            assert not reading.is_alive()
            assert fed._read_overflow
            assert got == [want]
        finally:
            plain.close()
            fed.close()


def test_a_cancel_while_the_heads_scan_waits_for_the_plan_ends_its_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``will_plan``, the heads' scan waiting for the plan, then a cancel (twice): the
    scan goes on (reads its pages itself), the plan starts no reader, the chunks stop
    at once (SnapshotStopped), and the snapshot closes with no thread of it left."""
    from statekeeper.backends.sqlite.pages import SnapshotStopped

    db = tmp_path / "s.db"
    _store(db)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    with _snapshot(db) as snap:
        snap.will_plan()
        asked = threading.Event()
        real_wait = snap._no_plan_ahead.wait

        def waiting() -> bool:
            asked.set()
            return real_wait()

        monkeypatch.setattr(snap._no_plan_ahead, "wait", waiting)
        heads = threading.Thread(target=snap.heads)
        heads.start()
        assert asked.wait(30.0)
        snap.cancel()
        snap.cancel()
        heads.join(30.0)
        assert not heads.is_alive()
        with pytest.raises(SnapshotStopped):
            next(iter(snap.chunks(4 * 1024)))
        assert not snap._prefetch.started
    assert not [t for t in threading.enumerate() if t.name == "statekeeper-prefetch"]


def test_a_one_page_store_is_read_behind_its_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store of one page (no table): the reader reads its one page, the one chunk
    is that page."""
    db = tmp_path / "s.db"
    with closing(sqlite3.connect(db)) as writer:
        writer.execute("PRAGMA page_size = 1024")
        writer.execute("PRAGMA journal_mode = WAL")
        writer.execute("PRAGMA user_version = 7")
        writer.commit()
        writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        writer.execute("PRAGMA user_version = 8")  # (a frame: the WAL index kept)
        plain, fed = _two_snapshots(db)
        try:
            assert fed.pages == 1
            monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: True)
            want = _image(plain)
            monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
            assert _image(fed) == want
            assert fed._prefetch.started
            assert len(want[0]) == 1024
        finally:
            plain.close()
            fed.close()


def test_a_sink_that_is_a_fifo_does_not_hold_the_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SINK`` a FIFO no one reads: the reader reads the file into its buffer, and a
    waiter wakes (was: its open of the sink waited for a reader of the FIFO forever,
    and every chunk with it)."""
    data = tmp_path / "f"
    data.write_bytes(os.urandom(2 * WINDOW))
    sink = tmp_path / "fifo"
    os.mkfifo(sink)
    monkeypatch.setattr(sqlite_prefetch, "SINK", str(sink))
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", WINDOW)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    fd = os.open(data, os.O_RDONLY)
    ahead = sqlite_prefetch.Prefetch(fd, data.stat().st_size)
    done = threading.Event()
    try:
        ahead.start()

        def waits() -> None:
            ahead.wait(ahead.size)
            done.set()

        waiter = threading.Thread(target=waits)
        waiter.start()
        woke = done.wait(30.0)
        if not woke:  # (the code before: its open let go by a reader of the FIFO)
            os.close(os.open(sink, os.O_RDONLY | os.O_NONBLOCK))
        ahead.stop()
        waiter.join(30.0)
    finally:
        os.close(fd)
    assert woke
    assert ahead._done == ahead.size


async def test_a_disk_failing_under_the_reader_and_the_chunks_fails_the_backup_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fails past the reader's first window for the reader (``sendfile`` and
    ``preadv``) and for the chunk reading there: the backup raises a BackendError
    naming the store file (was: the bare OSError), and leaves no backup file."""
    from statekeeper import StateStore
    from statekeeper.errors import BackendError
    from statekeeper.governance.backup import BackupKey, backup

    from ..governance._point_in_time import keyring

    monkeypatch.setattr(sqlite_prefetch, "WINDOW", WINDOW)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    failing: list[int] = []
    real_init = PageSnapshot.__init__

    def noted(self: PageSnapshot, *args: object, **kwargs: object) -> None:
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]
        failing.extend([self._prefetch._fd, self._db])

    real_send, real_read = os.sendfile, os.preadv

    def sendfile(out: int, fd: int, offset: int, count: int) -> int:
        if fd in failing and offset + count > WINDOW:
            raise OSError(errno.EIO, "injected")
        return real_send(out, fd, offset, count)

    def preadv(fd: int, buffers: list[memoryview], offset: int) -> int:
        if fd in failing and offset + sum(len(b) for b in buffers) > WINDOW:
            raise OSError(errno.EIO, "injected")
        return real_read(fd, buffers, offset)

    db = tmp_path / "s.db"
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        for i in range(400):
            await src.save(f"t{i % 3}/agent-{i:03d}", {"i": i, "pad": "x" * 200})
        await src.flush()
        with closing(sqlite3.connect(db)) as other:
            other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert db.stat().st_size > 2 * WINDOW
        monkeypatch.setattr(PageSnapshot, "__init__", noted)
        monkeypatch.setattr(os, "sendfile", sendfile)
        monkeypatch.setattr(os, "preadv", preadv)
        with pytest.raises(BackendError, match=r"s\.db: cannot read the store file"):
            await backup(src, tmp_path / "b.skb", BackupKey(os.urandom(32)))
    assert failing
    assert not (tmp_path / "b.skb").exists()


def test_a_disk_failing_under_the_plan_fails_it_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan's read of page 1 refused (EIO): a BackendError naming the store file
    (was: the bare OSError), no reader started."""
    from statekeeper.errors import BackendError

    db = tmp_path / "s.db"
    _store(db)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    with _snapshot(db) as snap:
        real = os.pread

        def pread(fd: int, size: int, offset: int) -> bytes:
            if fd == snap._db:
                raise OSError(errno.EIO, "injected")
            return real(fd, size, offset)

        monkeypatch.setattr(os, "pread", pread)
        with pytest.raises(BackendError, match=r"s\.db: cannot read the store file"):
            snap.plan()
        monkeypatch.setattr(os, "pread", real)
        assert not snap._prefetch.started
