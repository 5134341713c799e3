"""A page backup's per-page pass over one chunk of a SQLite store's image
(:mod:`.pages`): each page filtered by the snapshot's plan (the unused bytes of
a kept b-tree page zeroed: its gap and its freeblocks' bodies; the unused tail of an
overflow page; a dropped page all zeros; a dropped tree's root an empty leaf; page 1's
header made a plain file's) and digested (XXH3-128 under a seed, what
:func:`statekeeper.governance.backup.pagedelta.page_digests` gives).

:func:`python_pass` is the reference. :data:`page_pass` is what runs: the same pass
in C (``statekeeper.backends._pagepass``, built from ``native/pagepass.c`` when the
package is installed) when it was built, else the reference; ``STATEKEEPER_PURE=1`` in
the environment (read at import) forces the reference. Why a native pass: in Python
the filter cost ~0.045 and the digests ~0.033 CPU-s of a ~0.42 CPU-s backup of the
100,000-agent bench store (188 MB, 2 KiB pages), the largest parts driven page by page
from the interpreter (docs/benchmarks.md, "backupsix": "What 1.7x would take"); the C
pass does both in one read of each page, without the GIL (docs/benchmarks.md,
"backupc"). ``tests/backends/test_sqlite_pagepass.py`` holds the two to the same bytes.

Every offset a page's bytes give is bounded by that page (its usable bytes): a
malformed page is filtered as well as it reads, never read or written past its end.
"""

from __future__ import annotations

import array
import functools
import os
import struct
from collections.abc import Callable
from typing import Any

import xxhash

__all__ = [
    "NATIVE",
    "HeadsPacked",
    "HeadsScan",
    "PagePass",
    "ZeroRunFrames",
    "heads_packed",
    "heads_scan",
    "page_pass",
    "python_pass",
    "tree_outline",
    "tree_pages",
    "zero_run_frame",
    "zero_run_frames",
]

# what becomes of a page of the image (the plan's values, :mod:`.pages`)
DROP = 0  # zeros: free, or another table's
BTREE = 1  # a kept b-tree page: its unused bytes zeroed
OVERFLOW = 2  # a kept overflow page: its unused tail zeroed
EMPTY_TABLE = 3  # a dropped table's root: an empty table leaf
EMPTY_INDEX = 4  # a dropped index's (or WITHOUT ROWID table's) root: an empty index leaf
KEPT = 5  # a kept page: a b-tree or an overflow page, as its first byte says
_TREE_TYPES = frozenset((0x02, 0x05, 0x0A, 0x0D))  # b-tree page types (interior < 6)
#: a b-tree page's header: type, first freeblock, cells, start of the cell content
_TREE_HEAD = struct.Struct(">BHHH")
_ZEROS = memoryview(bytes(65536))

#: what :data:`zero_run_frame` reads
Buffer = bytes | bytearray | memoryview
#: ``zero_run_frame_into(data, out) -> int``
FrameInto = Callable[[Buffer, bytearray], int]

#: ``(buf, plan, unused, digests, first, start, count, page_size, usable,
#: read_overflow, seed) -> int``: see :func:`python_pass`
PagePass = Callable[
    [
        memoryview,
        bytes | bytearray,
        "array.array[int] | memoryview | bytes | bytearray | None",
        "bytearray | memoryview | None",
        int,
        int,
        int,
        int,
        int,
        bool,
        int,
    ],
    int,
]


def python_pass(
    buf: memoryview,
    plan: bytes | bytearray,
    unused: array.array[int] | memoryview | bytes | bytearray | None,
    digests: bytearray | memoryview | None,
    first: int,
    start: int,
    count: int,
    page_size: int,
    usable: int,
    read_overflow: bool,
    seed: int,
) -> int:
    """Pages ``start`` to ``count - 1`` of ``buf`` (``count`` pages of ``page_size``
    bytes, page number ``first`` at offset 0; ``usable`` bytes of each are SQLite's)
    filtered in place by ``plan`` (a byte per page number: :data:`KEPT`,
    :data:`DROP`, ...) and, unless ``digests`` is None, digested into it (16 bytes a
    page, the buffer's page *i* at ``16 * i``). ``unused``: the unused bytes at the end
    of each overflow page, by page number (4 bytes each, the machine's order: an
    ``array("I")``), or None. Returns -1, or the index of the first page whose plan
    needs them (a kept page that reads as an overflow page while ``read_overflow`` is
    false: the caller reads them, marks the plan, and calls again from there)."""
    if not (512 <= page_size <= 65536 and page_size & (page_size - 1) == 0):
        raise ValueError("page_pass: a page size of 512 to 65536 bytes, a power of two")
    if not 1 <= usable <= page_size:
        raise ValueError("page_pass: 1 to page_size usable bytes")
    if first < 1 or not 0 <= start <= count or count > len(buf) // page_size:
        raise ValueError("page_pass: the pages are not all in the buffer and the plan")
    if first + count > len(plan):
        raise ValueError("page_pass: the pages are not all in the buffer and the plan")
    if digests is not None and len(digests) < 16 * count:
        raise ValueError("page_pass: the digests' buffer is too short")
    spares = None
    if unused is not None:  # whole 4-byte entries only, as the C pass reads them
        raw = memoryview(unused).cast("B")
        spares = raw[: len(raw) - len(raw) % 4].cast("I")
    zeros = _ZEROS
    stop = -1
    # every page's b-tree header read in one call, not one per page (each page's
    # header is read before the page is changed, and a page's changes stay in it)
    heads = iter(_tree_heads(page_size, count - start).unpack_from(buf, start * page_size))
    for i, page_type, block, cells, content in zip(
        range(start, count), heads, heads, heads, heads, strict=True
    ):
        pageno = first + i
        at = i * page_size
        what = plan[pageno]
        if what in (KEPT, BTREE):
            h = at
            if pageno == 1:  # its b-tree header follows the file header
                h = at + 100
                page_type, block, cells, content = _TREE_HEAD.unpack_from(buf, h)
            if page_type in _TREE_TYPES:
                gap = h + (12 if page_type < 0x06 else 8) + 2 * cells
                end = at + (content or 65536)
                if gap < end <= at + usable:
                    buf[gap:end] = zeros[: end - gap]
                if block:
                    _clean_freeblocks(buf, at, block, usable)
                if pageno == 1:  # no free-page list (zeros), the rollback journal
                    buf[at + 18] = buf[at + 19] = 1
                    buf[at + 32 : at + 40] = zeros[:8]
                continue
            if what == BTREE:
                continue  # dbstat says a b-tree page, yet it does not read as one
            if page_type or read_overflow:
                what = DROP  # neither: not a page of a kept tree
            else:
                stop = i  # an overflow page: how much of it is used, dbstat says
                break
        if what == OVERFLOW:
            spare = spares[pageno] if spares is not None and pageno < len(spares) else 0
            end = at + usable
            if 0 < spare <= usable - 4:
                buf[end - spare : end] = zeros[:spare]
        elif what == DROP:
            buf[at : at + page_size] = zeros[:page_size]
        else:  # a dropped tree's root: an empty leaf
            buf[at : at + page_size] = zeros[:page_size]
            buf[at] = 0x0D if what == EMPTY_TABLE else 0x0A
            content = usable if usable < 65536 else 0
            buf[at + 5] = content >> 8
            buf[at + 6] = content & 0xFF
    if digests is not None:  # the pages filtered, each digested as it is now
        done = count if stop < 0 else stop
        digest = xxhash.xxh3_128_digest
        digests[16 * start : 16 * done] = b"".join(
            digest(buf[at : at + page_size], seed)
            for at in range(start * page_size, done * page_size, page_size)
        )
    return stop


@functools.lru_cache(maxsize=8)
def _tree_heads(size: int, count: int) -> struct.Struct:
    """The b-tree header (:data:`_TREE_HEAD`) at the start of each of ``count`` pages
    of ``size`` bytes: ``4 * count`` values."""
    return struct.Struct(">" + f"BHHH{size - _TREE_HEAD.size}x" * count)


def _clean_freeblocks(buf: memoryview, at: int, block: int, usable: int) -> None:
    """Zero the bodies of the freeblocks of the b-tree page at ``at`` whose list
    starts at ``block`` (https://www.sqlite.org/fileformat2.html, 1.6); the page's
    structure is left as it is."""
    while block:
        start = at + block
        if block + 4 > usable:
            break  # not a freeblock SQLite wrote: left alone
        following = (buf[start] << 8) | buf[start + 1]
        length = (buf[start + 2] << 8) | buf[start + 3]
        if length > 4 and block + length <= usable:
            buf[start + 4 : start + length] = _ZEROS[: length - 4]
        if following <= block:  # the list is in increasing order: its end
            break
        block = following


class ZeroRunFrames:
    """Chunks made zstd frames of their zero runs and raw bytes (the C pass's
    ``zero_run_frame_into``, what :data:`zero_run_frame` gives) into one buffer of its
    own, reused from chunk to chunk: a new 2 MiB buffer per chunk is faulted in page by
    page (~38,000 faults for the bench image: 0.12 against 0.047 CPU-s reused, as
    measured in docs/benchmarks.md, "backupc"). One per sealing thread: a frame is
    valid until the next :meth:`compress`."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def compress(self, data: Buffer) -> memoryview:
        need = len(data) + len(data) // 8 + 64
        if len(self._buf) < need:
            self._buf = bytearray(need)
        if _built is None:
            raise RuntimeError("the C page pass (statekeeper.backends._pagepass) is not built")
        size = _built[2](data, self._buf)
        return memoryview(self._buf)[:size]


def _load() -> tuple[PagePass, Callable[[Buffer], bytes], FrameInto] | None:
    try:
        from .. import _pagepass
    except ImportError:  # installed without a compiler: the reference, as fast as before
        return None
    return _pagepass.page_pass, _pagepass.zero_run_frame, _pagepass.zero_run_frame_into


_built = _load()
_found = _built if os.environ.get("STATEKEEPER_PURE", "") in ("", "0") else None
#: whether :data:`page_pass` is the C pass
NATIVE = _found is not None
#: the pass that runs: the C one if it was built (and ``STATEKEEPER_PURE`` is not
#: set), else :func:`python_pass`
page_pass: PagePass = _found[0] if _found is not None else python_pass
#: ``zero_run_frame(data) -> bytes``, with the C pass (else None): ``data`` as one
#: zstd frame any zstd reader reads (its content size in its header), its runs of 32
#: zeros or more as RLE blocks, every other byte in raw blocks: nothing compressed, a
#: copy's CPU. A page image with its unused bytes zeroed (:data:`page_pass`) is
#: ~18 % such runs; zstd's fast strategy takes another ~8 % off the rest for ~0.08
#: CPU-s a 188 MB image (docs/benchmarks.md, "backupc"). (In Python a frame of such
#: blocks cost more than zstd: "backupsix".)
zero_run_frame: Callable[[Buffer], bytes] | None = _found[1] if _found is not None else None
#: :class:`ZeroRunFrames` with the C pass, else None
zero_run_frames: type[ZeroRunFrames] | None = ZeroRunFrames if _found is not None else None

#: ``(db_fd, wal_fd, frames, root, page_size, usable, pages) -> (agents, heads, tags,
#: accounted) | None``: the heads table read from a snapshot's pages
#: (:meth:`.pages.PageSnapshot.heads`, ``native/headscan.c``)
HeadsScan = Callable[
    [int, int, "array.array[int] | None", int, int, int, int],
    "tuple[list[str], list[int], list[bytes], int] | None",
]


#: ``(db_fd, wal_fd, frames, root, page_size, usable, pages, plan, value) -> int |
#: None``: every page of one b-tree set to ``value`` in ``plan``
#: (:meth:`.pages.PageSnapshot.plan`, ``native/headscan.c``)
TreePages = Callable[
    [int, int, "array.array[int] | None", int, int, int, int, bytearray, int], "int | None"
]


def _load_native(name: str) -> Any:
    try:
        from .. import _pagepass
    except ImportError:
        return None
    return getattr(_pagepass, name, None)  # (a module built before it: None)


#: ``(db_fd, wal_fd, frames, root, page_size, usable, pages, plan, value) -> (int,
#: bytes) | None``: :data:`TreePages` with the tree's leaves listed, not read (where
#: they are: their page numbers as native uint32s), their cells' overflow pages not listed
TreeOutline = Callable[
    [int, int, "array.array[int] | None", int, int, int, int, bytearray, int],
    "tuple[int, bytes] | None",
]

#: the C heads scan with the C pass (else None: the heads are read with SQL)
heads_scan: HeadsScan | None = _load_native("heads_scan") if _found is not None else None
#: the C walk of a b-tree's pages with the C pass (else None: ``dbstat`` lists them)
tree_pages: TreePages | None = _load_native("tree_pages") if _found is not None else None
#: the C walk of a b-tree's interior pages (its leaves listed unread: a cold store
#: file's backup starts its pages before the file is read, docs/benchmarks.md,
#: "backup9") with the C pass (a module built before it: None, :data:`tree_pages` then)
tree_outline: TreeOutline | None = _load_native("tree_outline") if _found is not None else None

#: ``(db_fd, wal_fd, frames, root, page_size, usable, pages, before, after, prefix) ->
#: (packed, count, accounted, own) | None``: :data:`HeadsScan`'s heads as the
#: manifest's msgpack (``native/headpack.c``: no Python object per stream), ``own`` the
#: ``(agent, head)`` of the ids starting with ``prefix``
HeadsPacked = Callable[
    [int, int, "array.array[int] | None", int, int, int, int, bytes, bytes, bytes],
    "tuple[bytes, int, int, list[tuple[str, int]]] | None",
]
#: the heads packed in C with the C pass (a module built before it: None)
heads_packed: HeadsPacked | None = _load_native("heads_packed") if _found is not None else None
