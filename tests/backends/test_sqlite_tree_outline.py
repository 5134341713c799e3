"""A page backup's plan walks the dropped trees (the change feed's) without reading
their leaves (``tree_outline``, ``native/headscan.c``), then starts the file's read
ahead: from a cold page cache its leaves, all over the file, made the plan and every
chunk after it wait for the disk's read of nearly the whole file (docs/benchmarks.md,
"backup9").

The outline lists every page ``tree_pages`` lists but the overflow pages of the
leaves' cells; the leaves it lists are ``dbstat``'s; the plan reads none of them (the
leaves damaged, it plans as from the whole tree); the read ahead starts only once the
dropped trees are walked; a listed leaf that does not read as one stops the chunks
(the tree is not one SQLite wrote); the image and its digests are byte for byte
those of the whole walk's plan, a dropped leaf's overflow pages zeros as before."""

from __future__ import annotations

import array
import os
import random
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper.backends.sqlite import pagepass as sqlite_pagepass
from statekeeper.backends.sqlite import pages as sqlite_pages
from statekeeper.backends.sqlite import prefetch as sqlite_prefetch
from statekeeper.backends.sqlite.pages import PageSnapshot
from statekeeper.backends.sqlite.snapopen import open_snapshot

from .test_sqlite_headscan import BUILD, PURE, _store, _trees, damaged_tree
from .test_sqlite_headscan import snapshot as heads_snapshot


def outline() -> Any:
    if PURE:
        pytest.skip("STATEKEEPER_PURE=1: the plan reads the dropped trees with dbstat")
    assert sqlite_pagepass.tree_outline is not None, BUILD
    return sqlite_pagepass.tree_outline


def _walk(snap: PageSnapshot, root: int, walk: Any) -> tuple[Any, set[int]]:
    plan = bytearray(b"\x05") * (snap.pages + 1)
    usable = snap.page_size - snap._page(1)[20]
    args = (snap._db, snap._wal, snap._frame_offsets(), root, snap.page_size, usable)
    found = walk(*args, snap.pages, plan, 0)
    return found, {p for p, v in enumerate(plan) if v == 0}


def _dbstat(snap: PageSnapshot, name: str) -> dict[int, str]:
    query = "SELECT pageno, pagetype FROM dbstat WHERE name = ?"
    return dict(snap.conn.execute(query, (name,)).fetchall())


@pytest.mark.parametrize("page_size", [512, 1024, 4096])
def test_the_outline_lists_every_page_but_the_leaves_overflow(
    tmp_path: Path, page_size: int
) -> None:
    """Every b-tree of the file (rowid tables, WITHOUT ROWID tables, indexes, pages in
    the WAL): the leaves listed are dbstat's leaves (none where the root is the leaf:
    read, as by the whole walk); the pages set are the whole walk's, but overflow
    pages only (those of the leaves' cells); every interior and leaf page is set."""
    walk = outline()
    _store(tmp_path / "s.db", [], page_size)
    _trees(tmp_path / "s.db", page_size, page_size)
    later = [(f"t9/late-{i}", i + 1, b"t" * 36) for i in range(40)]
    with heads_snapshot(tmp_path / "s.db", *later) as snap:
        assert snap.frames
        trees = snap.conn.execute(
            "SELECT name, rootpage FROM sqlite_master WHERE rootpage > 1"
        ).fetchall()
        deep = 0
        for name, root in trees:
            kinds = _dbstat(snap, name)
            whole, whole_set = _walk(snap, root, sqlite_pagepass.tree_pages)
            got, got_set = _walk(snap, root, walk)
            assert whole == len(kinds) and got is not None, name
            count, raw = got
            leaves = array.array("I")
            leaves.frombytes(raw)
            trees_pages = {p for p, kind in kinds.items() if kind != "overflow"}
            if len(trees_pages) > 1:
                deep += 1
                assert sorted(leaves) == sorted(p for p, k in kinds.items() if k == "leaf"), name
            else:
                assert not leaves and got_set == whole_set, name
            assert count == len(got_set) and trees_pages <= got_set <= whole_set, name
            assert {kinds[p] for p in whole_set - got_set} <= {"overflow"}, name
        assert deep >= 3  # (the trees here are deeper than their root)


def _feed_store(path: Path, rows: int = 4000, page_size: int = 1024, long: int = 0) -> None:
    """A store-like file: a kept table (``sk_events``) and a dropped one (``sk_feed``,
    rowid, several levels deep), their rows interleaved over the file; ``long``: every
    tenth feed row that many bytes (its cell's overflow pages)."""
    rng = random.Random(rows)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA page_size = {page_size}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE sk_events (k INTEGER PRIMARY KEY, v BLOB)")
        conn.execute("CREATE TABLE sk_feed (position INTEGER PRIMARY KEY, agent_id TEXT, seq INT)")
        for i in range(rows):
            conn.execute("INSERT INTO sk_events VALUES (?, ?)", (i, rng.randbytes(60)))
            agent = "a" * (long if long and i % 10 == 0 else 12) + str(i)
            conn.execute("INSERT INTO sk_feed VALUES (?, ?, ?)", (i, agent, i))
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


@contextmanager
def _snapshot(path: Path) -> Iterator[PageSnapshot]:
    with closing(sqlite3.connect(path)) as writer:  # (keeps the WAL index)
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("INSERT OR REPLACE INTO sk_events VALUES (-1, x'00')")
        writer.commit()
        snap = open_snapshot(str(path), 5.0)
        assert snap is not None
        try:
            yield snap
        finally:
            snap.close()


def _image(snap: PageSnapshot) -> tuple[bytes, bytes]:
    image = b"".join(bytes(c) for c in snap.chunks(64 << 10, seed=7))
    return image, bytes(snap.digests)


def _leaves_of(path: Path, name: str) -> tuple[dict[int, str], int]:
    with closing(sqlite3.connect(path)) as conn:
        kinds = dict(
            conn.execute("SELECT pageno, pagetype FROM dbstat WHERE name = ?", (name,)).fetchall()
        )
        query = "SELECT rootpage FROM sqlite_master WHERE name = ?"
        (root,) = conn.execute(query, (name,)).fetchone()
    return kinds, root


def test_the_plan_reads_no_leaf_of_a_dropped_tree_but_the_first(tmp_path: Path) -> None:
    """Every leaf of the change feed but the leftmost (read: the leaves' depth)
    overwritten with bytes no page reads as: the plan still drops exactly the feed's
    pages, by the outline (the whole walk refuses such a tree: ``dbstat`` lists it
    then), and lists those leaves to be checked."""
    outline()
    db = tmp_path / "s.db"
    _feed_store(db)
    kinds, root = _leaves_of(db, "sk_feed")
    leaves = [p for p, kind in kinds.items() if kind == "leaf"]
    assert len(leaves) > 20 and "internal" in kinds.values()
    with closing(sqlite3.connect(db)) as conn:
        query = "SELECT pageno FROM dbstat WHERE name = 'sk_feed' AND pagetype = 'leaf'"
        (leftmost,) = conn.execute(query + " ORDER BY path LIMIT 1").fetchone()
    raw = bytearray(db.read_bytes())
    for pageno in set(leaves) - {leftmost}:
        raw[(pageno - 1) * 1024 : pageno * 1024] = b"\xee" * 1024
    db.write_bytes(raw)
    with _snapshot(db) as snap:
        snap.plan()
        plan = snap._plan
        assert plan is not None
        assert {p for p in kinds if p != root} <= {p for p, v in enumerate(plan) if v == 0}
        assert plan[root] == sqlite_pagepass.EMPTY_TABLE
        assert sorted(snap._leaves) == sorted(leaves)


def test_a_listed_leaf_that_is_not_one_stops_the_chunks(tmp_path: Path) -> None:
    """A page the plan listed as a dropped tree's leaf that reads as an interior page
    (a tree SQLite did not write: the pages below it were not listed): the chunk
    holding it is refused, naming the page, before a byte of it is passed on."""
    outline()
    db = tmp_path / "s.db"
    _feed_store(db)
    kinds, _ = _leaves_of(db, "sk_feed")
    leaf = max(p for p, kind in kinds.items() if kind == "leaf")
    raw = bytearray(db.read_bytes())
    raw[(leaf - 1) * 1024] = 0x05  # (a table's interior page)
    db.write_bytes(raw)
    with _snapshot(db) as snap:
        snap.plan()
        got = []
        with pytest.raises(sqlite3.DatabaseError, match=f"page {leaf} of a dropped table"):
            for chunk in snap.chunks(16 << 10):
                got.append(len(chunk))
        assert sum(got) <= (leaf - 1) * 1024  # (the chunks before its own only)


def test_the_dropped_trees_are_walked_before_the_file_is_read_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening the snapshot reads nothing ahead; the plan walks the dropped trees
    (their interior pages: a few) first, then starts the file's one reader (in large
    requests) and returns: the chunks are read as it passes them, docs/benchmarks.md
    "backupfeed". (Was: the whole file read in first, "backupread"; before that the
    walk's pages queued behind the file's ``WILLNEED``, "backup9".)"""
    walk = outline()
    db = tmp_path / "s.db"
    _feed_store(db, rows=500)
    said: list[str] = []

    def walked(*args: Any) -> Any:
        said.append("walk")
        return walk(*args)

    real, real_send = os.preadv, os.sendfile
    ahead = -1

    def read(fd: int, buffers: list[Any], offset: int) -> int:
        if fd == ahead:
            said.append("ahead")
        return real(fd, buffers, offset)

    def send(out: int, fd: int, offset: int, count: int) -> int:
        if fd == ahead:
            said.append("ahead")
        return real_send(out, fd, offset, count)

    monkeypatch.setattr(sqlite_pages, "tree_outline", walked, raising=False)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    monkeypatch.setattr(os, "preadv", read)
    monkeypatch.setattr(os, "sendfile", send)
    with _snapshot(db) as snap:
        ahead = snap._prefetch._fd
        assert not snap._prefetch.started
        snap.plan()
        assert snap._prefetch.started
        snap._prefetch.wait(snap.size)
    assert said.count("walk") == 1 and "ahead" in said
    assert said.index("walk") < said.index("ahead")


@pytest.mark.parametrize("long", [0, 3000])
def test_the_image_is_the_whole_walks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, long: int
) -> None:
    """The image and its page digests with the outline are those with the whole walk
    (``tree_outline`` missing: a module built before it), byte for byte; with feed
    rows too long for their leaf (``long``), their overflow pages, not listed by the
    outline, are zeros all the same (``dbstat`` reads the kept trees then)."""
    outline()
    db = tmp_path / "s.db"
    _feed_store(db, rows=1500, long=long)
    kinds, root = _leaves_of(db, "sk_feed")
    assert ("overflow" in kinds.values()) == bool(long)
    with _snapshot(db) as snap:
        image, digests = _image(snap)
        assert snap._leaves and snap._read_overflow == bool(long)
    for pageno in kinds:  # (the root an empty table leaf: its type and content offset)
        page = image[(pageno - 1) * 1024 : pageno * 1024]
        empty = b"\x0d" + bytes(4) + page[5:7] + bytes(1017) if pageno == root else bytes(1024)
        assert page == empty, pageno
    monkeypatch.setattr(sqlite_pages, "tree_outline", None)
    with _snapshot(db) as snap:
        assert (image, digests) == _image(snap)
        assert not snap._leaves


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.data())
def test_a_damaged_tree_is_outlined_or_refused_whole_never_a_crash(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Any bytes of a tree's pages overwritten: the outline stays inside every page it
    reads; it sets the pages it lists (each once, in the file), its leaves among them,
    or, refusing the tree, none."""
    walk = outline()
    path, root = damaged_tree(tmp_path_factory, data)
    with heads_snapshot(path) as snap:
        found, dropped = _walk(snap, root, walk)
        if found is None:
            assert dropped == set()
        else:
            count, listed = found
            leaves = array.array("I")
            leaves.frombytes(listed)
            assert count == len(dropped) and all(1 <= p <= snap.pages for p in dropped)
            assert set(leaves) <= dropped and len(set(leaves)) == len(leaves)
