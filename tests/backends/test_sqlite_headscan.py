"""A page backup's heads read from the snapshot's pages by the C scan
(``native/headscan.c``, :meth:`PageSnapshot.heads`): the same agents, head seqs, head
tags and sum of the head seqs as SQLite's statement (``tagheads.tag_heads`` on the
snapshot's connection) on heads tables of every depth and page size, with pages in
the WAL; None (SQL reads them) for every table it does not take whole: a stream
without a tag, tags of two lengths, a record too long for its page, another layout;
damaged pages are None or a result, never a crash; a page backup of a store reads its
heads so and restores."""

from __future__ import annotations

import os
import random
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper import StateStore
from statekeeper.backends.sqlite import pagepass as sqlite_pagepass
from statekeeper.backends.sqlite.pages import PageSnapshot
from statekeeper.backends.sqlite.snapopen import open_snapshot
from statekeeper.governance.backup import BackupKey, backup, restore, tagheads

from ..governance._point_in_time import keyring

BUILD = (
    "the C heads scan (statekeeper.backends._pagepass.heads_scan) is not built: install"
    " the package (pip install -e .) with a C compiler, or set STATEKEEPER_PURE=1"
)

#: the heads table as a store creates it (statekeeper/backends/sqlite/base.py)
HEADS = """
CREATE TABLE sk_agents (
    agent_id   TEXT PRIMARY KEY,
    head_seq   INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    head_tag   BLOB
) WITHOUT ROWID
"""


PURE = os.environ.get("STATEKEEPER_PURE", "") not in ("", "0")


def scan() -> Any:
    if PURE:  # (the SQL path: tests/governance/test_backup_heads.py and the others)
        pytest.skip("STATEKEEPER_PURE=1: the heads are read with SQL")
    assert sqlite_pagepass.heads_scan is not None, BUILD
    return sqlite_pagepass.heads_scan


def test_a_normal_install_scans_the_heads_in_c() -> None:
    if PURE:
        assert sqlite_pagepass.heads_scan is None and sqlite_pagepass.tree_pages is None
    else:
        scan()
        tree_pages()


def _tag(i: int, width: int = 36) -> bytes:
    return random.Random(i).randbytes(width)


def _store(path: Path, rows: list[tuple[str, int, bytes | None]], page_size: int = 2048) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA page_size = {page_size}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(HEADS)
        conn.executemany("INSERT INTO sk_agents VALUES (?, ?, 1.5, 2.5, ?)", rows)
        conn.commit()


@contextmanager
def snapshot(path: Path, *later: tuple[str, int, bytes | None]) -> Iterator[PageSnapshot]:
    """A snapshot of ``path`` (a writer holding it open: its WAL index stays), after
    ``later`` rows written and left in the WAL (no checkpoint)."""
    with closing(sqlite3.connect(path)) as writer:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.executemany("INSERT OR REPLACE INTO sk_agents VALUES (?, ?, 1.5, 2.5, ?)", later)
        writer.commit()
        snap = open_snapshot(str(path), 5.0)
        assert snap is not None
        try:
            yield snap
        finally:
            snap.close()


def _by_sql(snap: PageSnapshot) -> tuple[list[str], list[int], list[bytes | None], int]:
    listed = tagheads.tag_heads(snap.conn)
    assert listed.untagged == {"agent": [], "checksum": []}
    return listed.agents, listed.heads, listed.tags, listed.accounted


@pytest.mark.parametrize("page_size", [512, 1024, 2048, 4096, 65536])
@pytest.mark.parametrize("count", [0, 1, 3, 2_000])
def test_the_scan_reads_what_sql_reads(tmp_path: Path, page_size: int, count: int) -> None:
    """Leaves only, and interior pages whose cells hold keys too (an index b-tree: 512
    bytes a page, 2,000 heads make it three deep), ids of every script (short enough
    for a 512-byte page: a longer one is the overflow case below), heads of every
    integer width (1 to 8 bytes, and SQLite's 0 and 1), heads <= 0 left out, pages
    from the WAL."""
    scan()
    rng = random.Random(count * page_size)
    rows = []
    for i in range(count):
        agent = f"t{i % 7}/" + "é✓😀a"[i % 4] * rng.randrange(1, 5) + f"-{i}"
        head = rng.choice([1, 2, 200, 70_000, 1 << 40, (1 << 48) + i, 0, -3])
        rows.append((agent, head, _tag(i)))
    _store(tmp_path / "s.db", rows, page_size)
    later = [(f"t9/late-{i}", i + 1, _tag(-i)) for i in range(50)] if count > 1 else []
    with snapshot(tmp_path / "s.db", *later) as snap:
        assert not later or snap.frames  # (pages read from the WAL)
        got = snap.heads()
        assert got is not None
        assert got == _by_sql(snap)
        assert len(got[0]) == sum(1 for _, head, _ in rows + later if head > 0)


@pytest.mark.parametrize(
    "odd",
    [
        ("t1/b", 5, None),  # a stream without a tag: its head record's checksum, by SQL
        ("t1/b", 5, b"x" * 35),  # tags of two lengths
        ("t1/b", 5, b""),  # an empty tag
        ("t1/" + "b" * 600, 5, _tag(1)),  # a record too long for its page (overflow)
        ("t1/b", 5.5, _tag(1)),  # a head that is not an integer
        ("t1/b", 5, "text tag"),  # a tag stored as text
    ],
)
def test_a_table_the_scan_does_not_take_whole_is_left_to_sql(
    tmp_path: Path, odd: tuple[str, Any, Any]
) -> None:
    scan()
    rows = [(f"t1/a{i:04d}", i + 1, _tag(i)) for i in range(300)] + [odd]
    _store(tmp_path / "s.db", rows, 1024)
    with snapshot(tmp_path / "s.db") as snap:
        assert snap.heads() is None


def test_a_heads_table_of_another_layout_is_left_to_sql(tmp_path: Path) -> None:
    """A rowid table, or the columns in another order: the record is not what the scan
    reads, so it is not asked."""
    with closing(sqlite3.connect(tmp_path / "s.db")) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(HEADS.replace(") WITHOUT ROWID", ")"))
        conn.execute("INSERT INTO sk_agents VALUES ('t1/a', 1, 1.5, 2.5, x'00')")
        conn.commit()
    with snapshot(tmp_path / "s.db") as snap:
        assert snap.heads() is None


def test_the_scan_is_refused_bad_arguments() -> None:
    with pytest.raises(ValueError):
        scan()(0, -1, None, 2, 100, 100, 1)
    with pytest.raises(ValueError):
        scan()(0, -1, None, 2, 4096, 5000, 1)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.data())
def test_damaged_pages_are_none_or_a_result_never_a_crash(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Any byte of the heads table's pages (headers, cell pointers, child page numbers,
    varints, serial types) overwritten: the scan stays inside every page and returns
    None or lists of the types it promises."""
    scan()
    folder = tmp_path_factory.mktemp("damaged")
    path = folder / "s.db"
    _store(path, [(f"t1/a{i:05d}", i + 1, _tag(i)) for i in range(400)], 512)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute("SELECT pageno FROM dbstat WHERE name = 'sk_agents'").fetchall()
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 12))):
        (pageno,) = data.draw(st.sampled_from(pages))
        at = (pageno - 1) * size + data.draw(st.integers(0, size - 1))
        raw[at] = data.draw(st.integers(0, 255))
    path.write_bytes(raw)
    with snapshot(path) as snap:
        got = snap.heads()
    if got is not None:
        agents, heads, tags, accounted = got
        assert len(agents) == len(heads) == len(tags)
        assert all(isinstance(a, str) for a in agents) and agents == sorted(set(agents))
        assert all(isinstance(h, int) and h > 0 for h in heads) and accounted == sum(heads)
        assert len({len(t) for t in tags}) <= 1


async def test_a_page_backup_reads_its_heads_from_its_pages_and_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store's page backup takes its manifest's heads from the scan (no statement
    reads the heads table; packed in C, ``native/headpack.c``) and restores: the same
    streams, heads and states."""
    scan()
    scanned: list[Any] = []
    real = PageSnapshot.packed_heads

    def spy(self: PageSnapshot, *args: Any) -> Any:
        found = real(self, *args)
        if found is None:
            scanned.append(None)
        else:  # (the pairs of the manifest's heads and untagged columns)
            columns = msgpack.unpackb(b"\x82" + found[0])["heads"]
            scanned.append((columns["agent"], columns["head"], columns["tag"], found[2]))
        return found

    monkeypatch.setattr(PageSnapshot, "packed_heads", spy)
    key = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        for i in range(120):
            for j in range(1 + i % 3):
                await src.save(f"t{i % 4}/agent-{i:03d}", {"i": i, "j": j})
        made = await backup(src, tmp_path / "b.skb", key)
        heads = {a.agent_id: a.head_seq for a in await src.list_agents(limit=1000)}
    assert len(scanned) == 1 and scanned[0] is not None
    agents, seqs, _, accounted = scanned[0]
    listed = dict(zip(agents, seqs, strict=True))
    assert {a: listed[a] for a in heads} == heads and len(heads) == 120
    own = sum(seq for a, seq in listed.items() if a not in heads)  # (the store's own)
    assert (made.agents, made.events) == (120, accounted - own)
    async with StateStore(f"sqlite:///{tmp_path / 'd.db'}", keyring=keyring()) as dst:
        await restore(dst, [tmp_path / "b.skb"], key)
        assert (await dst.load("t3/agent-119")).data == {"i": 119, "j": 2}
        assert {a.agent_id: a.head_seq for a in await dst.list_agents(limit=1000)} == heads


def tree_pages() -> Any:
    if PURE:
        pytest.skip("STATEKEEPER_PURE=1: the plan reads the dropped trees with dbstat")
    assert sqlite_pagepass.tree_pages is not None, BUILD
    return sqlite_pagepass.tree_pages


def damaged_tree(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> tuple[Path, int]:
    """A store of :func:`_trees` (512-byte pages, checkpointed) with 1–12 bytes of one
    b-tree's pages (``r``, ``r_note`` or ``w``, drawn) overwritten at random: its path
    and that tree's root page."""
    path = tmp_path_factory.mktemp("damaged") / "s.db"
    _store(path, [], 512)
    _trees(path, 512, 1)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        name = data.draw(st.sampled_from(["r", "r_note", "w"]))
        pages = conn.execute("SELECT pageno FROM dbstat WHERE name = ?", (name,)).fetchall()
        cursor = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,))
        (root,) = cursor.fetchone()
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 12))):
        (pageno,) = data.draw(st.sampled_from(pages))
        at = (pageno - 1) * 512 + data.draw(st.integers(0, 511))
        raw[at] = data.draw(st.integers(0, 255))
    path.write_bytes(raw)
    return path, root


def _trees(path: Path, page_size: int, seed: int) -> None:
    """Tables and indexes of every b-tree kind, rows with and without overflow pages
    (a payload of each length around a page's local limit), some deleted."""
    rng = random.Random(seed)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA page_size = {page_size}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE r (id INTEGER PRIMARY KEY, body BLOB, note TEXT)")
        conn.execute("CREATE INDEX r_note ON r (note)")
        conn.execute("CREATE TABLE w (k TEXT PRIMARY KEY, v BLOB) WITHOUT ROWID")
        for i in range(300):
            size = rng.choice([0, 10, page_size // 4, page_size - 40, page_size, 5 * page_size])
            size += rng.randrange(-3, 4) if size else 0
            conn.execute(
                "INSERT INTO r VALUES (?, ?, ?)",
                (i, rng.randbytes(size), "n" * rng.randrange(0, page_size // 2) + str(i)),
            )
            key = "k" * rng.choice([1, page_size // 8, page_size // 3, page_size]) + str(i)
            conn.execute("INSERT INTO w VALUES (?, ?)", (key, rng.randbytes(rng.randrange(50))))
        conn.execute("DELETE FROM r WHERE id % 7 = 3")
        conn.commit()


def _walk(snap: PageSnapshot, root: int) -> tuple[Any, bytearray]:
    plan = bytearray(b"\x05") * (snap.pages + 1)
    usable = snap.page_size - snap._page(1)[20]
    found = tree_pages()(
        snap._db,
        snap._wal,
        snap._frame_offsets(),
        root,
        snap.page_size,
        usable,
        snap.pages,
        plan,
        0,
    )
    return found, plan


@pytest.mark.parametrize("page_size", [512, 1024, 4096])
def test_the_tree_walk_lists_the_pages_dbstat_lists(tmp_path: Path, page_size: int) -> None:
    """Every b-tree of the file (rowid tables, WITHOUT ROWID tables, indexes; interior
    and leaf pages, overflow chains of table and index cells, pages in the WAL): the
    pages the walk sets in the plan are the ones ``dbstat`` lists for the tree."""
    _store(tmp_path / "s.db", [], page_size)  # (sk_agents, empty)
    _trees(tmp_path / "s.db", page_size, page_size)
    later = [(f"t9/late-{i}", i + 1, _tag(i)) for i in range(40)]
    with snapshot(tmp_path / "s.db", *later) as snap:
        assert snap.frames
        trees = snap.conn.execute(
            "SELECT name, rootpage FROM sqlite_master WHERE rootpage > 1"
        ).fetchall()
        assert len(trees) == 4
        for name, root in trees:
            listed = {
                p for (p,) in snap.conn.execute("SELECT pageno FROM dbstat WHERE name = ?", (name,))
            }
            found, plan = _walk(snap, root)
            assert found == len(listed), name
            assert {p for p, v in enumerate(plan) if v == 0} == listed, name


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.data())
def test_a_damaged_tree_is_walked_or_refused_whole_never_a_crash(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Any bytes of a tree's pages overwritten: the walk stays inside every page; it
    sets the pages it lists (each once, in the file) or, refusing the tree, none."""
    tree_pages()
    path, root = damaged_tree(tmp_path_factory, data)
    with snapshot(path) as snap:
        found, plan = _walk(snap, root)
        dropped = [p for p, v in enumerate(plan) if v == 0]
        if found is None:
            assert dropped == []
        else:
            assert found == len(dropped) and all(1 <= p <= snap.pages for p in dropped)
