"""A full backup of a SQLite store ships its pages (issue 15, fifth pass): the image of
one read snapshot (database file + the snapshot's WAL frames), no table copied, no
temporary file; writes committed after the snapshot are not in it, even once a
checkpoint has copied the snapshot's frames into the file while the pages are read;
only the stream tables' pages leave the store, with the bytes SQLite no longer uses
zeroed. (Into another engine: test_backup.py, SQLite -> PostgreSQL while a writer writes.)"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import export as sqlite_export
from statekeeper.backends.sqlite import pagepass as sqlite_pagepass
from statekeeper.backends.sqlite import pages as sqlite_pages
from statekeeper.backends.sqlite import snapopen as sqlite_snapopen
from statekeeper.governance.backup import BackupKey, backup, filecopy, restore
from statekeeper.governance.backup.fileformat import FrameReader

from ._point_in_time import check_as_it_began, keyring, write_before_heads, write_during


def decrypted_image(file: Path, key: BackupKey) -> bytes:
    reader = FrameReader(file, key)
    try:
        with filecopy.opened_copy(reader) as copy:
            return Path(copy).read_bytes()
    finally:
        reader.close()


async def fill(store: StateStore, agents: int, events: int = 3) -> None:
    for i in range(agents):
        for j in range(events):
            key = f"k{j}" if j == 1 else None
            await store.save(f"t{i % 3}/a{i:03d}", {"i": i, "j": j}, idempotency_key=key)


async def test_a_whole_store_is_shipped_as_its_pages_without_a_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No table is copied (``copy_file`` is never called), no temporary folder is
    made: the chunks are the snapshot's pages, as many bytes as the store file has
    pages; it restores with every stream checked against the manifest."""
    made: list[str] = []
    real_folder = tempfile.TemporaryDirectory

    def counted_folder(*args: Any, **kwargs: Any) -> Any:
        made.append("folder")
        return real_folder(*args, **kwargs)

    def no_copy(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the tables were copied")

    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    db = tmp_path / "s.db"
    async with StateStore(f"sqlite:///{db}", keyring=keyring(), snapshot_every=2) as src:
        await fill(src, 30)
        with closing(sqlite3.connect(db)) as conn:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        monkeypatch.setattr(sqlite_export, "copy_file", no_copy)
        monkeypatch.setattr(tempfile, "TemporaryDirectory", counted_folder)
        result = await backup(src, file, bkey, chunk_bytes=8192)
        monkeypatch.undo()
        assert made == []
        assert result.agents == 30 and result.events == 90 and result.snapshots == 30
        assert result.record_bytes == pages * page_size  # the image: every page of the file
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        restored = await restore(dst, [file], bkey)
        assert restored.agents == 30 and restored.events == 90
        assert (await dst.verify()).ok
        assert (await dst.load("t1/a004")).data == {"i": 4, "j": 2}
        assert (await dst.save("t1/a004", {"i": 4, "j": 1}, idempotency_key="k1")).duplicate


async def test_writes_committed_while_the_pages_are_read_are_not_in_the_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point in time: the snapshot holds WAL frames (counted); once it is taken,
    another writer appends, creates and deletes agents and commits, and a checkpoint
    copies what it may of the WAL into the database file (the snapshot's frames: the
    pages the image then reads from the file); more writes commit before the heads
    are read. The backup and its manifest hold the store as it was at the snapshot."""
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    db = tmp_path / "s.db"
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        await fill(src, 12)
        before = {a.agent_id: a.head_seq async for a in src.iter_agents()}
        loop = asyncio.get_running_loop()
        seen: list[Any] = []

        plan = sqlite_pages.PageSnapshot.plan

        def planned(snapshot: sqlite_pages.PageSnapshot) -> None:  # the backup's thread
            asyncio.run_coroutine_threadsafe(write_during(src), loop).result()
            checkpoint = sqlite3.connect(db)
            try:
                _, frames, copied = checkpoint.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            finally:
                checkpoint.close()
            seen.append((len(snapshot.frames), frames, copied))
            plan(snapshot)

        heads_of = filecopy._heads_of

        def heads(conn: sqlite3.Connection, *args: Any) -> Any:
            asyncio.run_coroutine_threadsafe(write_before_heads(src), loop).result()
            seen.append("heads")
            return heads_of(conn, *args)

        monkeypatch.setattr(sqlite_pages.PageSnapshot, "plan", planned)
        monkeypatch.setattr(filecopy, "_heads_of", heads)
        result = await backup(src, file, bkey)
        monkeypatch.undo()
        assert "heads" in seen and len(seen) == 2
        (held, frames, copied) = next(s for s in seen if s != "heads")
        assert held > 0  # the snapshot's pages were taken from its WAL frames too
        assert 0 < copied < frames  # the checkpoint copied the snapshot's frames, no more
        await check_as_it_began(src, result, file, bkey, before, tmp_path)


async def test_only_the_stream_tables_leave_the_store_and_no_deleted_bytes(
    tmp_path: Path,
) -> None:
    """Bytes of deleted rows stay in a SQLite file without ``secure_delete`` (in
    freeblocks, the unallocated gap, free pages, overflow pages); the feed names
    deleted agents, the leases their holders: none of it is in the image, whose feed
    and lease tables read empty and whose stream tables read whole."""
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    db = tmp_path / "s.db"
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        await fill(src, 20)
        await src.save("acme/erased-customer-4711", {"pad": "x" * 500})
        await src.delete("acme/erased-customer-4711")
        raw = sqlite3.connect(db, isolation_level=None)
        try:
            raw.execute("PRAGMA secure_delete = OFF")  # whatever this SQLite's default
            raw.execute("BEGIN IMMEDIATE")
            for i in range(6):  # overflow pages, then free pages once deleted
                raw.execute(
                    "INSERT INTO sk_meta (key, value) VALUES (?, ?)",
                    (f"gone-{i}", "stale-secret-7c1e" * 600),
                )
            raw.execute("INSERT INTO sk_meta (key, value) VALUES ('kept', ?)", ("k" * 9000,))
            raw.execute("INSERT INTO sk_meta (key, value) VALUES ('short', 'stale-short-0b2d')")
            raw.execute("COMMIT")
            raw.execute("DELETE FROM sk_meta WHERE key LIKE 'gone-%' OR key = 'short'")
            raw.execute(
                "INSERT INTO sk_leases (agent_id, holder, token, expires_at)"
                " VALUES ('t0/a000', 'holder-secret-55aa', 1, 1e12)"
            )
        finally:
            raw.close()
        stored = db.read_bytes() + Path(f"{db}-wal").read_bytes()  # noqa: ASYNC240
        assert b"stale-secret-7c1e" in stored and b"stale-short-0b2d" in stored
        assert b"holder-secret-55aa" in stored
        await backup(src, file, bkey)
    image = decrypted_image(file, bkey)
    assert b"t1/a001" in image  # a live agent's id (its records stay encrypted)
    for gone in (b"stale-secret-7c1e", b"stale-short-0b2d", b"holder-secret-55aa"):
        assert gone not in image
    assert b"erased-customer-4711" not in image
    copy = tmp_path / "image.db"
    copy.write_bytes(image)
    conn = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
        for table in ("sk_feed", "sk_feed_deleted", "sk_leases"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0
        # the agents' 60 events, and the delete's tombstone (the feed's, sealed)
        assert conn.execute("SELECT count(*) FROM sk_events").fetchone()[0] == 61
        assert (
            conn.execute("SELECT length(value) FROM sk_meta WHERE key = 'kept'").fetchone()[0]
            == 9000
        )
        assert (
            conn.execute(
                "SELECT count(*) FROM sk_agents INDEXED BY sk_agents_written WHERE updated_at > 0"
            ).fetchone()[0]
            == 21  # (and the tombstone stream)
        )
    finally:
        conn.close()


async def test_a_namespace_or_a_store_not_in_wal_mode_copies_its_tables(tmp_path: Path) -> None:
    """The page image is the whole file: a namespace's backup (another tenant's rows
    must not leave) and a file without a wal-index are declined (None)."""
    db = tmp_path / "s.db"
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        await fill(src, 3)
        assert await src.backend.page_snapshot("t1/") is None
        whole = await src.backend.page_snapshot("")
        assert whole is not None
        whole.close()
    plain = tmp_path / "plain.db"
    sqlite3.connect(plain).execute("CREATE TABLE t (x)").connection.close()
    assert sqlite_snapopen.open_snapshot(str(plain), 1.0) is None


def snapshot_image(db: Path, traced: list[str] | None = None) -> bytes:
    """The page image of ``db`` as a backup takes it; ``traced``: the statements the
    plan runs (SQL with its parameters)."""
    snapshot = sqlite_snapopen.open_snapshot(str(db), 5.0)
    assert snapshot is not None
    try:
        if traced is not None:
            snapshot._stat.set_trace_callback(traced.append)
        return b"".join(bytes(piece) for piece in snapshot.chunks(8192))
    finally:
        snapshot.close()


async def test_the_plan_reads_the_kept_trees_only_once_an_overflow_page_is_met(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every page of the image is kept but the dropped trees', the free pages and the
    lock-byte page, a b-tree or overflow page as its first byte says: ``dbstat``
    reads the stream tables (most of a store's pages: 0.10 of a full backup's ~0.95
    CPU-s for the 100,000-agent bench store) only once an overflow page is met (how
    much of it is used). The image is the one a plan reading every kept tree with
    ``dbstat`` makes (the free-page list declared unreadable), byte for byte: with
    and without overflow pages, free pages, pages of the WAL."""
    db = tmp_path / "s.db"
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        await fill(src, 40)
        await src.save("acme/erased-customer-4711", {"pad": "x" * 500})
        await src.delete("acme/erased-customer-4711")
        traced: list[str] = []
        image = snapshot_image(db, traced)
        kept_trees = [s for s in traced if "dbstat" in s and "'sk_events'" in s]
        assert kept_trees == []  # no overflow page: the stream tables are not read
        # the dropped ones: walked in C where built (native/headscan.c), else by dbstat
        dropped = [s for s in traced if "dbstat" in s and "'sk_feed'" in s]
        assert bool(dropped) == (sqlite_pagepass.tree_pages is None)
        with monkeypatch.context() as patched:
            patched.setattr(sqlite_pages.PageSnapshot, "_free_pages", lambda self, first: None)
            assert snapshot_image(db) == image

        raw = sqlite3.connect(db, isolation_level=None)
        try:
            raw.execute("PRAGMA secure_delete = OFF")
            raw.execute("BEGIN IMMEDIATE")
            for i in range(6):  # pages of stale bytes, free once deleted
                raw.execute(
                    "INSERT INTO sk_meta (key, value) VALUES (?, ?)",
                    (f"gone-{i}", "stale-secret-7c1e" * 600),
                )
            raw.execute("COMMIT")
            raw.execute("DELETE FROM sk_meta WHERE key LIKE 'gone-%'")
            assert raw.execute("PRAGMA freelist_count").fetchone()[0] > 2
            # overflow pages (the last one not full: its tail unused) reused from the free ones
            raw.execute("INSERT INTO sk_meta (key, value) VALUES ('kept', ?)", ("k" * 12460,))
            # SQLite hands a reused free page over zeroed: the stale bytes of an
            # overflow page's unused tail are put there by hand, in the file itself
            assert raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
            size = raw.execute("PRAGMA page_size").fetchone()[0]
            (last, spare) = raw.execute(
                "SELECT pageno, unused FROM dbstat WHERE name = 'sk_meta'"
                " AND pagetype = 'overflow' AND unused > 16"
            ).fetchone()
        finally:
            raw.close()
        with open(db, "r+b") as fh:  # noqa: ASYNC230
            fh.seek(last * size - spare)
            fh.write((b"stale-tail-9e1f" * spare)[:spare])
        await src.save("t0/a000", {"after": 1})
        traced.clear()
        image = snapshot_image(db, traced)
        assert [s for s in traced if "dbstat" in s and "'sk_events'" in s]  # overflow met
        assert b"stale-secret-7c1e" not in image and b"stale-tail-9e1f" not in image
        copy = tmp_path / "image.db"
        copy.write_bytes(image)
        with closing(sqlite3.connect(f"file:{copy}?mode=ro", uri=True)) as conn:
            (value,) = conn.execute("SELECT value FROM sk_meta WHERE key = 'kept'").fetchone()
            assert value == "k" * 12460
        with monkeypatch.context() as patched:
            patched.setattr(sqlite_pages.PageSnapshot, "_free_pages", lambda self, first: None)
            assert snapshot_image(db) == image


async def test_the_image_is_the_same_whatever_the_chunks(tmp_path: Path) -> None:
    """Each chunk's b-tree headers are read in one call: the image is byte for byte
    the same cut in chunks of one page (page 1 alone: its header after the file's),
    of an odd number of pages, and in one chunk, with pages in the WAL; the bytes of
    deleted rows (freeblocks, the gap between the cell pointers and the cells) are
    zeros in every one."""
    db = tmp_path / "s.db"
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        await fill(src, 30)
        raw = sqlite3.connect(db, isolation_level=None)
        try:
            raw.execute("PRAGMA secure_delete = OFF")
            raw.execute("PRAGMA wal_autocheckpoint = 0")  # what follows stays in the WAL
            for i in range(12):
                raw.execute(
                    "INSERT INTO sk_meta (key, value) VALUES (?, ?)", (f"gone-{i}", f"rm-8d2b-{i}")
                )
            raw.execute("DELETE FROM sk_meta WHERE key IN ('gone-3', 'gone-7', 'gone-11')")
            size = raw.execute("PRAGMA page_size").fetchone()[0]
            pages = raw.execute("PRAGMA page_count").fetchone()[0]
        finally:
            raw.close()
        images = []
        for chunk in (size, 3 * size, pages * size):
            snapshot = sqlite_snapopen.open_snapshot(str(db), 5.0)
            assert snapshot is not None
            try:
                assert snapshot.frames  # pages the WAL holds
                images.append(b"".join(bytes(piece) for piece in snapshot.chunks(chunk)))
            finally:
                snapshot.close()
        assert images[0] == images[1] == images[2]
        assert len(images[0]) == pages * size
        assert b"rm-8d2b-3" not in images[0] and b"rm-8d2b-7" not in images[0]
        assert b"rm-8d2b-4" in images[0]  # a kept row
