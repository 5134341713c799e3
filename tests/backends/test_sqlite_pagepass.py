"""A page backup's per-page pass (backends/sqlite/pagepass.py): the C pass built from
native/pagepass.c and the Python reference give the same bytes, the same digests and
the same answer on every input: a real SQLite file's pages under any plan, crafted
b-tree pages (headers, cell counts and freeblock lists pointing anywhere), garbage;
bad arguments are a ValueError from both. A normal install runs the C pass; a backup of
a store whose pages are garbage is a typed error or a backup, never a crash."""

from __future__ import annotations

import array
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import threading
from contextlib import closing
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper import StateStore
from statekeeper.backends.sqlite import pagepass as sqlite_pagepass
from statekeeper.backends.sqlite import pages as sqlite_pages
from statekeeper.backends.sqlite import snapopen as sqlite_snapopen
from statekeeper.backends.sqlite.pagepass import python_pass
from statekeeper.errors import BackupCorrupt
from statekeeper.governance.backup import BackupKey, backup, restore

from ..governance._point_in_time import keyring

native_pass: Any
try:
    from statekeeper.backends._pagepass import page_pass as native_pass
except ImportError:  # not built: every test here but the pure one fails, saying so
    native_pass = None

BUILD = (
    "the C page pass (statekeeper.backends._pagepass) is not built: install the package"
    " (pip install -e .) with a C compiler and Python's headers, or set STATEKEEPER_PURE=1"
)


def native() -> Any:
    assert native_pass is not None, BUILD
    return native_pass


def native_frame() -> Any:
    assert native_pass is not None, BUILD
    from statekeeper.backends._pagepass import zero_run_frame

    return zero_run_frame


def test_a_normal_install_runs_the_native_pass() -> None:
    """CI installs the package (``pip install -e '.[dev]'``, a compiler at hand): the
    backup then runs the C pass, unless ``STATEKEEPER_PURE=1`` asks for Python."""
    if os.environ.get("STATEKEEPER_PURE", "") not in ("", "0"):
        assert not sqlite_pagepass.NATIVE
        return
    assert native_pass is not None, BUILD
    assert sqlite_pagepass.NATIVE and sqlite_pagepass.page_pass is native_pass


def test_statekeeper_pure_forces_the_python_pass() -> None:
    code = "from statekeeper.backends.sqlite import pagepass as p; print(p.NATIVE, p.page_pass)"
    env = {**os.environ, "STATEKEEPER_PURE": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("False <function python_pass")


def run_both(
    pages: bytes,
    plan: bytes,
    unused: array.array[int] | bytes | None,
    first: int,
    start: int,
    count: int,
    size: int,
    usable: int,
    read_overflow: bool,
    seed: int,
    digests: bool = True,
) -> tuple[object, bytes, bytes | None]:
    """Both passes over copies of the same input: their results must be equal."""
    outs = []
    for run in (python_pass, native()):
        buf = bytearray(pages)
        out = bytearray(16 * max(count, 0)) if digests else None
        try:
            result: object = run(
                memoryview(buf), plan, unused, out, first, start, count, size, usable,
                read_overflow, seed,
            )  # fmt: skip
        except ValueError:
            result = ValueError
        outs.append((result, bytes(buf), None if out is None else bytes(out)))
    assert outs[0] == outs[1]
    return outs[0]


SIZES = st.sampled_from([512, 1024, 2048])
#: a plan's byte: mostly the values the snapshot's plan holds, sometimes any
PLAN = st.one_of(st.integers(0, 5), st.integers(0, 255))
#: a 16-bit field of a page's header: near the page's bounds, or anything
FIELD = st.one_of(
    st.integers(0, 16), st.integers(0, 2100), st.integers(65520, 65535), st.integers(0, 65535)
)


@st.composite
def crafted_pages(draw: st.DrawFn) -> tuple[int, int, bytes, int]:
    """``(page_size, count, pages, usable)``: random bytes with b-tree headers and
    freeblock lists laid in at drawn places, pointing anywhere."""
    size = draw(SIZES)
    count = draw(st.integers(1, 4))
    rng = random.Random(draw(st.integers(0, 2**32)))
    filler = draw(st.sampled_from(["random", "zeros", "ones"]))
    if filler == "random":
        pages = bytearray(rng.randbytes(size * count))
    else:
        pages = bytearray((0 if filler == "zeros" else 0xFF,)) * (size * count)
    for i in range(count):
        at = i * size + draw(st.sampled_from([0, 100]))  # page 1's header is at 100
        pages[at] = draw(st.sampled_from([0x02, 0x05, 0x0A, 0x0D, 0x00, 0x01, 0xFF]))
        for off in (1, 3, 5):
            pages[at + off : at + off + 2] = draw(FIELD).to_bytes(2, "big")
        for _ in range(draw(st.integers(0, 3))):  # a freeblock: next, length
            block = draw(st.integers(0, size - 1))
            for value in (draw(FIELD), draw(FIELD)):
                if block + 2 <= size:
                    pages[i * size + block : i * size + block + 2] = value.to_bytes(2, "big")
                block += 2
    usable = draw(st.one_of(st.just(size), st.integers(size - 64, size), st.integers(1, size)))
    return size, count, bytes(pages), usable


@st.composite
def unused_of(draw: st.DrawFn, pages: int, size: int) -> array.array[int] | bytes | None:
    kind = draw(st.sampled_from(["array", "none", "short", "odd bytes"]))
    if kind == "none":
        return None
    n = pages if kind != "short" else draw(st.integers(0, pages))
    values = draw(
        st.lists(
            st.one_of(st.integers(0, size + 8), st.integers(0, 2**32 - 1)), min_size=n, max_size=n
        )
    )
    out = array.array("I", values)
    return out.tobytes() + b"\x07" if kind == "odd bytes" else out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), crafted=crafted_pages())
def test_crafted_and_garbage_pages_give_the_same_bytes(
    data: st.DataObject, crafted: tuple[int, int, bytes, int]
) -> None:
    size, count, pages, usable = crafted
    first = data.draw(st.one_of(st.just(1), st.integers(2, 40)))
    plan = bytes(data.draw(st.lists(PLAN, min_size=first + count, max_size=first + count + 3)))
    unused = data.draw(unused_of(first + count + 1, size))
    start = data.draw(st.integers(0, count))
    seed = data.draw(st.integers(0, 2**64 - 1))
    result, _, _ = run_both(
        pages, plan, unused, first, start, count, size, usable, data.draw(st.booleans()), seed
    )
    assert result is not ValueError


@cache
def sqlite_files() -> list[tuple[int, bytes]]:
    """``(page_size, file bytes)`` of a few SQLite files (kept across examples): rows
    of random lengths, some longer than a page (overflow pages), some deleted (free
    pages, freeblocks, gaps), an index, a WITHOUT ROWID table."""
    out = []
    folder = tempfile.mkdtemp(prefix="sk-pagepass-")
    rng = random.Random(15)
    for size in (512, 1024, 4096):
        path = os.path.join(folder, f"{size}.db")
        with closing(sqlite3.connect(path)) as conn:
            conn.execute(f"PRAGMA page_size = {size}")
            conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB, note TEXT)")
            conn.execute("CREATE INDEX t_note ON t (note)")
            conn.execute("CREATE TABLE w (k TEXT PRIMARY KEY, v BLOB) WITHOUT ROWID")
            for i in range(400):
                body = rng.randbytes(rng.choice([10, 80, 300, size + 50, 3 * size]))
                conn.execute("INSERT INTO t VALUES (?, ?, ?)", (i, body, f"n{rng.random()}"))
                conn.execute("INSERT INTO w VALUES (?, ?)", (f"k{i}", rng.randbytes(40)))
            conn.execute("DELETE FROM t WHERE id % 3 = 0")
            conn.execute("DELETE FROM w WHERE k LIKE 'k1%'")
            conn.commit()
        out.append((size, Path(path).read_bytes()))
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_real_sqlite_pages_give_the_same_bytes(data: st.DataObject) -> None:
    """Runs of pages of real SQLite files, under any plan (kept, b-tree, overflow with
    any unused size, dropped, empty roots), with and without digests."""
    size, raw = data.draw(st.sampled_from(sqlite_files()))
    total = len(raw) // size
    first = data.draw(st.integers(1, total))
    count = data.draw(st.integers(1, min(16, total - first + 1)))
    pages = raw[(first - 1) * size : (first - 1 + count) * size]
    plan = bytes(data.draw(st.lists(PLAN, min_size=first + count, max_size=first + count)))
    unused = data.draw(unused_of(first + count, size))
    usable = size - data.draw(st.sampled_from([0, 0, 8, 32]))
    seed = data.draw(st.integers(0, 2**64 - 1))
    over = data.draw(st.booleans())
    result, _, _ = run_both(
        pages, plan, unused, first, 0, count, size, usable, over, seed, data.draw(st.booleans())
    )
    assert result == -1 or 0 <= int(result) < count  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("size", "usable", "first", "count", "plan", "digests"),
    [
        (1000, 1000, 1, 1, 4, 16),  # not a power of two
        (256, 256, 1, 1, 4, 16),  # too small
        (131072, 131072, 1, 1, 4, 16),  # too large
        (1024, 0, 1, 1, 4, 16),  # no usable byte
        (1024, 1025, 1, 1, 4, 16),  # more usable bytes than the page
        (1024, 1024, 0, 1, 4, 16),  # no page 0
        (1024, 1024, 1, 3, 8, 48),  # more pages than the buffer
        (1024, 1024, 3, 2, 4, 32),  # the plan too short
        (1024, 1024, 1, 2, 4, 16),  # the digests' buffer too short
    ],
)
def test_bad_arguments_are_a_value_error_from_both(
    size: int, usable: int, first: int, count: int, plan: int, digests: int
) -> None:
    pages = bytes(2 * 1024)
    for run in (python_pass, native()):
        with pytest.raises(ValueError, match="page_pass"):
            run(
                memoryview(bytearray(pages)), bytes(plan), None, bytearray(digests),
                first, 0, count, size, usable, False, 0,
            )  # fmt: skip


@pytest.mark.parametrize("pure", [False, True])
async def test_a_store_image_is_the_same_by_either_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pure: bool
) -> None:
    """A statekeeper store with overflow pages (large states), deletes, dropped tables
    and WAL frames: its snapshot image and digests are the same by either pass (the
    other run's, read again), and the backup restores."""
    db = tmp_path / "s.db"
    rng = random.Random(7)
    images: list[tuple[bytes, bytes]] = []
    async with StateStore(f"sqlite:///{db}", keyring=keyring(), snapshot_every=2) as src:
        for i in range(40):
            big = rng.randbytes(rng.choice([50, 3000, 9000])).hex()
            await src.save(f"a{i:02d}", {"i": i, "big": big})
            await src.save(f"a{i:02d}", {"i": i, "big": big[: len(big) // 2]})
        for i in range(0, 40, 4):
            await src.delete(f"a{i:02d}")
        for run in (python_pass, native()):
            monkeypatch.setattr(sqlite_pages, "page_pass", run)
            snapshot = sqlite_snapopen.open_snapshot(str(db), 5.0)
            assert snapshot is not None
            try:
                assert snapshot.frames  # the WAL holds pages of the snapshot
                image = b"".join(bytes(p) for p in snapshot.chunks(16384, None, 99))
                images.append((image, bytes(snapshot.digests)))
                assert snapshot._read_overflow  # overflow pages were met
            finally:
                snapshot.close()
        assert images[0] == images[1]
        monkeypatch.setattr(sqlite_pages, "page_pass", python_pass if pure else native())
        bkey = BackupKey(os.urandom(32))
        await backup(src, tmp_path / "b.skb", bkey, chunk_bytes=16384)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        restored = await restore(dst, [tmp_path / "b.skb"], bkey)
        assert restored.agents == 30
        assert (await dst.verify()).ok


def damage(db: Path, pages: list[int], size: int) -> None:
    """Each of ``pages`` of ``db`` overwritten with garbage that still reads as a
    table leaf (its first byte): its header and cells garbage."""
    rng = random.Random(3)
    with open(db, "r+b") as fh:
        for n in pages:
            fh.seek((n - 1) * size)
            garbage = bytearray(rng.randbytes(size))
            garbage[0] = 0x0D
            fh.write(garbage)


async def test_a_backup_of_a_store_with_garbage_pages_is_a_typed_error(tmp_path: Path) -> None:
    """Leaf pages of the events' tree overwritten with garbage (a disk's corruption,
    the heads table intact): the backup ships them through the page pass as they read
    (no crash, no read past a page), and the restore refuses the image with
    BackupCorrupt, SQLite's own refusal typed, nothing restored (it was SQLite's
    untyped ``DatabaseError`` before)."""
    db = tmp_path / "s.db"
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        for i in range(300):
            await src.save(f"a{i:03d}", {"i": i, "pad": "x" * 200})
    with closing(sqlite3.connect(db)) as conn:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = [
            n
            for (n,) in conn.execute(
                "SELECT pageno FROM dbstat WHERE name = 'sk_events' AND pagetype = 'leaf'"
            )
        ]
    damage(db, pages[1::2], size)
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        await backup(src, file, bkey)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        with pytest.raises(BackupCorrupt, match="store image: SQLite cannot read it"):
            await restore(dst, [file], bkey)
        assert await dst.list_agents() == []


#: bytes with long and short zero runs, at and around a zstd block's largest size
RUNS = st.lists(
    st.one_of(
        st.integers(1, 40).map(bytes),
        st.sampled_from([131071, 131072, 131073, 300000]).map(bytes),
        st.binary(min_size=1, max_size=64),
        st.sampled_from([131072, 131073]).map(lambda n: b"\x01" * n),
    ),
    max_size=8,
).map(b"".join)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=RUNS)
def test_a_zero_run_frame_is_a_zstd_frame_of_the_same_bytes(data: bytes) -> None:
    """Any zstd reader (the restore's ``ZstdDecompressor().decompress``, which needs
    the content size in the frame's header) gives the bytes back; no more than a few
    bytes a block over them, fewer when there are zero runs."""
    import zstandard

    frame = native_frame()(data)
    assert zstandard.ZstdDecompressor().decompress(frame) == data
    assert zstandard.get_frame_parameters(frame).content_size == len(data)
    assert len(frame) <= 17 + len(data) + 3 * (len(data) // 32 + len(data) // 131072 + 1)
    frames = sqlite_pagepass.ZeroRunFrames()  # into one buffer, reused
    assert bytes(frames.compress(data)) == frame
    assert bytes(frames.compress(data[1:])) == native_frame()(data[1:])


def test_a_zero_run_frame_never_writes_past_its_buffer() -> None:
    from statekeeper.backends._pagepass import zero_run_frame_into

    data = b"\x01" * 1000
    with pytest.raises(ValueError, match="too short"):
        zero_run_frame_into(data, bytearray(1000))
    out = bytearray(len(data) + len(data) // 8 + 64)
    assert out[: zero_run_frame_into(data, out)] == native_frame()(data)


async def test_a_local_page_backup_leaves_the_zero_runs_out_and_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole store's page backup to a local file makes every chunk's frame with
    ``ZeroRunFrames`` (every byte of the image goes through it, none through zstd):
    fewer bytes than the image (its zero runs), and it restores."""
    from statekeeper.governance.backup import filecopy

    native_frame()  # the C pass is built
    framed: list[int] = []

    class Counted(sqlite_pagepass.ZeroRunFrames):
        def compress(self, data: Any) -> memoryview:
            # the image's chunks (not the manifest's heads or rest: "backup4", "backup6")
            if threading.current_thread().name.startswith("sk-backup-seal"):
                framed.append(len(data))
            return super().compress(data)

    db = tmp_path / "s.db"
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        for i in range(200):
            await src.save(f"a{i:03d}", {"i": i})
        monkeypatch.setattr(filecopy, "zero_run_frames", Counted)
        bkey = BackupKey(os.urandom(32))
        made = await backup(src, tmp_path / "b.skb", bkey, chunk_bytes=65536)
        monkeypatch.undo()
    sizes = [p.stat().st_size for p in (db, tmp_path / "b.skb")]
    assert sum(framed) == made.record_bytes == sizes[0]
    assert sizes[1] < made.record_bytes
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        assert (await restore(dst, [tmp_path / "b.skb"], bkey)).agents == 200
        assert (await dst.load("a123")).data == {"i": 123}
