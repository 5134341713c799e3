"""A page backup's heads packed in C (``native/headpack.c``,
:meth:`PageSnapshot.packed_heads`): the very bytes ormsgpack (and msgpack) make of the
columns the C scan reads (:meth:`PageSnapshot.heads`), every length of str, bin and
array header and every width of integer; the store's own streams found; None wherever
the scan is None, and for an id Python's strict UTF-8 decoder refuses; damaged pages
None or bytes that read back; a backup so made is the backup of the lists, and its
result counts the same streams and events."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper import StateStore
from statekeeper.arguments import AUDIT_STREAM, HOLDS_STREAM
from statekeeper.backends.sqlite import pagepass as sqlite_pagepass
from statekeeper.backends.sqlite.pages import PageSnapshot
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.backup.fileformat import FrameReader
from statekeeper.governance.backup.framepack import packb
from statekeeper.governance.holds import add_hold

from ..governance._point_in_time import keyring
from ..governance.test_backup_page_delta import contents, fill
from .test_sqlite_headscan import HEADS, PURE, _store, _tag, snapshot

OWN = b"\x01sk-"
POLICY = parse_policy('[principals.ops]\nadmin = ["**"]\n')
BUILD = (
    "the C heads packer (statekeeper.backends._pagepass.heads_packed) is not built: install"
    " the package (pip install -e .) with a C compiler, or set STATEKEEPER_PURE=1"
)


def packer() -> None:
    if PURE:
        pytest.skip("STATEKEEPER_PURE=1: the heads are read with SQL")
    assert sqlite_pagepass.heads_packed is not None, BUILD


def test_a_normal_install_packs_the_heads_in_c() -> None:
    if PURE:
        assert sqlite_pagepass.heads_packed is None
    else:
        packer()


def _expected(snap: PageSnapshot, before: bytes, after: bytes) -> Any:
    """What :meth:`PageSnapshot.packed_heads` must give: the lists of the C scan
    packed by ormsgpack (:func:`packb`), and by msgpack too (the same bytes)."""
    scanned = snap.heads()
    if scanned is None:
        return None
    agents, heads, tags, accounted = scanned
    columns = {"agent": agents, "head": heads, "tag": tags}
    packed = packb(columns)
    assert packed == msgpack.packb(columns, use_bin_type=True)
    own = [(a, h) for a, h in zip(agents, heads, strict=True) if a.startswith(OWN.decode())]
    return before + packed + after, len(agents), accounted, own


#: heads at every boundary of msgpack's integer forms (fixint, uint 8/16/32/64; the
#: largest, 2**63 - 1, alone: a sum of the heads past it is the scan's None)
WIDTHS = [1, 127, 128, 255, 256, 65535, 65536, (1 << 32) - 1, 1 << 32, 1 << 48]


@pytest.mark.parametrize("page_size", [512, 2048, 4096])
@pytest.mark.parametrize("count", [0, 1, 15, 16, 2_000])
def test_the_packed_heads_are_the_scans_lists_packed(
    tmp_path: Path, page_size: int, count: int
) -> None:
    """Arrays of fewer than 16 and of 16 or more (fixarray, array 16), ids of every
    script and of 1 to 300 bytes (fixstr, str 8, str 16), heads of every integer form,
    the store's own streams among them, pages from the WAL."""
    packer()
    rng = random.Random(count * page_size)
    rows = []
    # (a 512-byte page holds a record of ~100 bytes whole: shorter ids and tags there)
    longs, width = ([0, 0, 8, 24], 8) if page_size == 512 else ([0, 0, 24, 200, 256, 300], 36)
    for i in range(count):
        agent = f"t{i % 7}/" + "é✓😀a"[i % 4] * rng.randrange(1, 5) + f"-{i}"
        agent += "x" * rng.choice(longs)
        if i % 50 == 3:
            agent = "\x01sk-" + agent
        rows.append((agent, rng.choice([*WIDTHS, 0, -3]), _tag(i, width)))
    _store(tmp_path / "s.db", rows, page_size)
    later = [(f"\x01sk-late-{i}", i + 1, _tag(-i, width)) for i in range(20)] if count > 1 else []
    with snapshot(tmp_path / "s.db", *later) as snap:
        expected = _expected(snap, b"B4", b"AFTER")
        assert expected is not None
        assert snap.packed_heads(b"B4", b"AFTER", OWN) == expected
        every = list(zip(*snap.heads()[:2], strict=True))  # type: ignore[index]
        assert snap.packed_heads(b"", b"", b"") == (*_expected(snap, b"", b"")[:3], every)


@pytest.mark.parametrize("width", [1, 31, 255, 256, 300])
def test_tags_of_every_bin_form(tmp_path: Path, width: int) -> None:
    packer()
    _store(tmp_path / "s.db", [(f"t1/a{i:03d}", i + 1, _tag(i, width)) for i in range(40)], 4096)
    with snapshot(tmp_path / "s.db") as snap:
        assert snap.packed_heads(b"", b"", OWN) == _expected(snap, b"", b"")


def test_the_largest_head(tmp_path: Path) -> None:
    packer()
    _store(tmp_path / "s.db", [("t1/a", (1 << 63) - 1, _tag(1)), ("t1/b", 0, _tag(2))])
    with snapshot(tmp_path / "s.db") as snap:
        got = snap.packed_heads(b"", b"", OWN)
        assert got is not None and b"\xcf\x7f" + b"\xff" * 7 in got[0]
        assert got == _expected(snap, b"", b"")


def test_an_array_of_65536_heads_and_more(tmp_path: Path) -> None:
    """array 32: 70,000 streams."""
    packer()
    _store(tmp_path / "s.db", [(f"a{i:06d}", 1 + i % 300, _tag(i % 97, 8)) for i in range(70_000)])
    with snapshot(tmp_path / "s.db") as snap:
        got = snap.packed_heads(b"", b"", OWN)
        assert got is not None and got[0][7:12] == b"\xdd\x00\x01\x11\x70"
        assert got == _expected(snap, b"", b"")


def _raw_ids(path: Path, ids: list[bytes]) -> None:
    """A heads table whose ids are these bytes as SQLite text (not checked by SQLite)."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(HEADS)
        conn.executemany(
            "INSERT INTO sk_agents VALUES (CAST(? AS TEXT), ?, 1.5, 2.5, ?)",
            [(raw, i + 1, _tag(i)) for i, raw in enumerate(ids)],
        )
        conn.commit()


@pytest.mark.parametrize(
    "raw",
    [
        b"\xed\xa0\x80",  # a surrogate
        b"\xc0\x80",  # an overlong NUL
        b"\xe0\x80\xaf",  # an overlong form
        b"\xf4\x90\x80\x80",  # past U+10FFFF
        b"\xe2\x82",  # cut short
        b"\x80",  # a continuation byte alone
        b"\xff",
    ],
)
def test_an_id_python_does_not_decode_is_left_to_sql(tmp_path: Path, raw: bytes) -> None:
    packer()
    _raw_ids(tmp_path / "s.db", [b"t1/a", b"t1/b" + raw, b"t1/c"])
    with snapshot(tmp_path / "s.db") as snap:
        assert snap.heads() is None and snap.packed_heads(b"", b"", OWN) is None


def test_the_edges_of_utf8_are_packed(tmp_path: Path) -> None:
    """U+0000, U+007F, U+0080, U+07FF, U+0800, U+D7FF, U+E000, U+FFFF, U+10000, U+10FFFF."""
    packer()
    edges = "\x00\x7f\x80\u07ff\u0800\ud7ff\ue000\uffff\U00010000\U0010ffff"
    _raw_ids(tmp_path / "s.db", [f"t{i}/{c}".encode() for i, c in enumerate(edges)])
    with snapshot(tmp_path / "s.db") as snap:
        assert snap.packed_heads(b"", b"", OWN) == _expected(snap, b"", b"")


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.binary(min_size=1, max_size=12), min_size=1, max_size=30, unique=True))
def test_any_id_bytes_are_packed_as_python_decodes_them(
    tmp_path_factory: pytest.TempPathFactory, ids: list[bytes]
) -> None:
    """Packed exactly where Python decodes every id (and the scan gives lists), None
    where it does not."""
    packer()
    path = tmp_path_factory.mktemp("ids") / "s.db"
    _raw_ids(path, ids)
    with snapshot(path) as snap:
        got = snap.packed_heads(b"", b"", OWN)
        if snap.heads() is None:  # (ids out of SQLite's order as text, or not UTF-8)
            assert got is None or all(_decodes(i) for i in ids)
        else:
            assert got == _expected(snap, b"", b"")


def _decodes(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.data())
def test_damaged_pages_are_none_or_bytes_that_read_back(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Any byte of the heads table's pages overwritten: None, or the scan's lists packed."""
    packer()
    path = tmp_path_factory.mktemp("damaged") / "s.db"
    _store(path, [(f"t1/a{i:05d}", i + 1, _tag(i)) for i in range(400)], 512)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute("SELECT pageno FROM dbstat WHERE name = 'sk_agents'").fetchall()
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 12))):
        (pageno,) = data.draw(st.sampled_from(pages))
        raw[(pageno - 1) * 512 + data.draw(st.integers(0, 511))] = data.draw(st.integers(0, 255))
    path.write_bytes(raw)
    with snapshot(path) as snap:
        got = snap.packed_heads(b"", b"", OWN)
        assert got == _expected(snap, b"", b"")
    if got is not None:
        columns = msgpack.unpackb(got[0])
        assert len(columns["agent"]) == len(columns["head"]) == len(columns["tag"]) == got[1]


async def test_a_backup_of_packed_heads_is_the_backup_of_the_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same manifest (heads, untagged, totals) and result (agents, events, the
    store's own streams) with the heads packed in C as with the lists; both restore."""
    packer()
    bkey = BackupKey(os.urandom(32))
    made: dict[str, Any] = {}
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(
        url, keyring=keyring(), principal="ops", policy=POLICY, audit=Audit()
    ) as ops:
        await fill(ops, 90)  # (the store's own streams too: its audit log, its holds)
        await add_hold(ops, "t1/a001", "a matter")
    for name in ("packed", "lists"):  # (the same store twice: a backup is audited)
        shutil.copy(tmp_path / "s.db", tmp_path / f"{name}-s.db")
    for name in ("packed", "lists"):
        async with StateStore(f"sqlite:///{tmp_path / f'{name}-s.db'}", keyring=keyring()) as src:
            with monkeypatch.context() as patch:
                if name == "lists":
                    patch.setattr(PageSnapshot, "packed_heads", lambda self, *args: None)
                made[name] = await backup(src, tmp_path / f"{name}.skb", bkey)
            expected = await contents(src)
    manifests = {}
    for name in made:
        reader = FrameReader(tmp_path / f"{name}.skb", bkey)
        try:
            manifests[name] = {
                k: v
                for k, v in reader.manifest.items()
                if k not in ("backup_id", "created_at", "chunks")
            }
        finally:
            reader.close()
    assert manifests["packed"] == manifests["lists"]
    assert len(manifests["packed"]["heads"]["agent"]) >= 90
    packed, lists = made["packed"], made["lists"]
    assert (
        packed.internal_streams
        == lists.internal_streams
        == tuple(sorted((AUDIT_STREAM, HOLDS_STREAM)))
    )
    assert (packed.agents, packed.events, packed.internal) == (
        lists.agents,
        lists.events,
        lists.internal,
    )
    for name in made:
        async with StateStore(f"sqlite:///{tmp_path / f'{name}.db'}", keyring=keyring()) as dst:
            await restore(dst, [tmp_path / f"{name}.skb"], bkey)
            assert await contents(dst) == expected
