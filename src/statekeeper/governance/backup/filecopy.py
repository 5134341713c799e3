"""The file path of a backup (format version 5, or 2 for a namespace's copy and
before head tags): a SQLite store, shipped as a point-in-time image of its file,
without a row becoming a Python object.

**Writing a whole store** (:func:`write_pages`): the pages of one read snapshot of the
live store (:mod:`~statekeeper.backends.sqlite.pages`: the write lock held for a
moment while the read transaction opens, then the database file's pages with the
snapshot's WAL frames laid over them, read while writers commit; only the stream
tables' pages kept, every other page and every byte SQLite no longer uses zeroed): no
table copied, no temporary file. A second connection of the same snapshot reads the
manifest's heads meanwhile (every stream's head seq and head tag: one scan of the
heads table, :mod:`.tagheads`; one more statement the totals). **A namespace**
(:func:`write_copy`) is copied first instead: its streams into a temporary file
(``$TMPDIR``) by SQLite alone (``INSERT ... SELECT`` of the stream tables over the
namespace's id range, in one read transaction: never another tenant's rows), its
heads (seq and head record checksum, version 2,
:func:`~statekeeper.backends.sqlite.export.stream_head_columns`) read from the copy.
Either way the bytes are cut into chunks, compressed (zstd's fast strategy,
:data:`LEVEL`) and encrypted with the backup key by a few threads, each chunk named
in the manifest by its GCM tag (:class:`~.sealer.ChunkSealer`). Records stay as
stored (encrypted by the store's keys), as on the row path. A hash-chained stream's
head tag (and its head checksum) commits to its whole content: the restore follows
every chain from seq 1 and checks its end against the manifest's head (the tag with
the target's keys).

**Reading.** :func:`file_entries` decrypts the chunks (each authenticated and checked
against the manifest) into a temporary file, opens it read-only and yields its streams
as the row path's entries, each checked against the manifest's heads; the restore then
verifies and writes them as it does any backup.

Streams compacted by retention are copied as stored (the base snapshot and the
events after it); the manifest lists them (``compacted``: agent, base seq, base
snapshot checksum) and a restore starts their chain at the base.

A whole store's page backup lists every page's digest (``page_digests``, computed by
the sealing threads): an incremental backup after it ships the pages changed since
(format version 4, :mod:`.pagedelta`). A PostgreSQL store takes :mod:`.pgcopy`
(format version 3); other incremental backups and every other engine the row path
(format version 1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sqlite3
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ...arguments import INTERNAL_PREFIX
from ...backends.sqlite.export import (
    compacted_streams,
    iter_streams,
    stream_head_columns,
    stream_totals,
)
from ...backends.sqlite.files import connect_read_only, require_store_file
from ...backends.sqlite.importing import stray_reason, stray_row
from ...backends.sqlite.pagepass import NATIVE, zero_run_frames
from ...errors import BackupCorrupt, BackupError, NotAStore
from .directfile import DirectFile
from .fileformat import HEAD_TAGS, FrameReader, FrameWriter
from .framepack import Ahead, ahead, packb
from .joined import copy_folder
from .pagedelta import PAGE_HASH
from .placedframe import HEAD_BYTES
from .sealer import seal_file
from .tagheads import (
    COUNTS,
    PackedHeads,
    Scanned,
    internal_streams,
    internal_streams_sorted,
    tag_heads,
)

if TYPE_CHECKING:
    from ...backends.base import Backend
    from ...backends.sqlite.pages import PageSnapshot
    from ...records import StreamRows

__all__ = [
    "GROUP_AGENTS",
    "GROUP_BYTES",
    "HeadsAhead",
    "checked_entries",
    "compacted_columns",
    "copy_of",
    "file_entries",
    "image_entries",
    "shipped",
    "write_copy",
    "write_pages",
]

#: a restore reads a file backup's streams in groups (its "chunks" for the writing
#: pass, written concurrently): at most this many agents or record bytes each
GROUP_AGENTS = 256
GROUP_BYTES = 1 << 20


async def copy_of(backend: Backend, folder: str, namespace: str = "") -> str | None:
    """The store (its ``namespace`` and below only, if given) copied into ``folder``
    (the copy's path), or None: the engine has no file copy (the row path then)."""
    path = os.path.join(folder, "copy.db")
    return path if await backend.copy_to_file(path, namespace + "/" if namespace else "") else None


def write_copy(
    writer: FrameWriter,
    copy: str,
    chunk_bytes: int,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Chunks of ``copy`` (a copy of a namespace's tables) into ``writer``; returns the
    manifest's body (heads, counts, the copy's size). Runs in a thread: nothing here is
    per record."""
    conn = connect_read_only(copy)
    try:
        conn.execute(f"PRAGMA mmap_size = {os.path.getsize(copy)}")
        return shipped(
            writer,
            conn,
            progress,
            lambda: seal_file(writer, copy, chunk_bytes, THREADS, LEVEL),
        )
    finally:
        conn.close()


@dataclasses.dataclass
class HeadsAhead:
    """What a whole page backup's heads' thread prepares for the end of the backup
    once it has read the heads, while the pages are still shipped
    (:func:`write_pages`): the manifest's heads packed (:func:`.framepack.ahead`) and
    the store's own streams among them. The heads' thread is done well before the
    pages (100,000 agents: ~0.12 against ~0.25 s); these ~15 ms were spent after the
    last page, each backup's wall (docs/benchmarks.md, "backup3")."""

    packed: Ahead | None = None
    internal: tuple[str, ...] | None = None
    #: a local backup's maker of zero-run frames (:func:`write_pages`): the packed heads
    #: made its frame's blocks too (:attr:`.framepack.Ahead.blocks`, :mod:`.placedframe`)
    frames: Callable[[], Any] | None = None


def write_pages(
    writer: FrameWriter,
    snapshot: PageSnapshot,
    chunk_bytes: int,
    progress: Callable[[int, int], None] | None = None,
    local: bool = False,
    heads_ahead: HeadsAhead | None = None,
) -> dict[str, Any]:
    """The image of a whole store's ``snapshot`` (its pages: no copy of a table, no
    temporary file) in chunks into ``writer``; returns the manifest's body, read in
    the same snapshot (its heads as head tags if ``writer``'s version says so,
    :data:`.fileformat.HEAD_TAGS`). Runs in a thread.

    ``local``: the backup goes to a local file. Its chunks' zstd frames are then made
    of the image's zero runs (RLE blocks) and its other bytes as they are (raw blocks,
    ``sqlite_pagepass.zero_run_frames``, where the C pass is built): the 100,000-agent
    bench image's 188 MB as 155 MB for a copy's CPU, against 142.8 MB for zstd's
    ~0.08 CPU-s, the largest part of a backup's CPU once the page pass is in C. A local
    disk takes the 12 MB more in a few ms; a network link (S3) pays every byte, so
    elsewhere zstd compresses (docs/benchmarks.md, "backupc"). Either is a zstd frame:
    the restore reads both the same way.

    ``heads_ahead`` is filled by the heads' thread (:class:`HeadsAhead`), which then
    closes ``snapshot.conn`` (its memory map let go off the backup's end: the plan's
    connection, open on the same snapshot until the pages are read, holds it)."""

    size = snapshot.page_size
    chunk_bytes = max(size, chunk_bytes - chunk_bytes % size)  # whole pages: each digested
    digests = bytearray()

    def ship() -> int:
        snapshot.plan()  # while the heads are read (another connection, same snapshot)
        # the pipeline: this thread reads, filters and digests the pages (one pass, in
        # C where built: backends/sqlite/pagepass.py) while the sealing threads seal the
        # chunk before and the writing thread writes the one before that
        frame = zero_run_frames if local and zero_run_frames is not None else LEVEL
        # the digests in the C pass; in Python, by the sealing threads (two threads,
        # not the reader's one)
        seed = writer.key.page_seed if NATIVE else None
        with writer.sealer(chunk_bytes, THREADS, frame, 0 if NATIVE else size) as sealer:
            for piece in snapshot.chunks(chunk_bytes, sealer.spare, seed):
                sealer.feed(piece, owned=True)
            shipped_bytes = sealer.close()
        digests.extend(snapshot.digests if NATIVE else sealer.digests)
        return shipped_bytes

    if local and zero_run_frames is not None:  # its manifest too: framed, not compressed
        writer.manifest_frames = zero_run_frames()
        if heads_ahead is not None and isinstance(writer.out, DirectFile):
            heads_ahead.frames = zero_run_frames  # its heads framed by the heads' thread
    tags = writer.header.version in HEAD_TAGS
    snapshot.will_plan()  # (the heads' scan waits for the plan's pages: see there)
    # the heads from the snapshot's pages (C, where built: else SQL, as a copy's)
    body = shipped(
        writer,
        snapshot.conn,
        progress,
        ship,
        tags,
        heads_ahead,
        snapshot.heads,
        snapshot.packed_heads,
    )
    # every page's digest: the parent of an incremental backup by pages (:mod:`.pagedelta`)
    body.update(
        page_size=size,
        pages=snapshot.pages,
        page_hash=PAGE_HASH,
        page_digests=bytes(digests),
    )
    return body


#: sealing threads (zstd and AES-GCM release the GIL)
THREADS = min(4, os.cpu_count() or 1)
#: zstd's level for a store file's pages. Callgrind, compressing 64 MiB of the
#: 100,000-agent bench image (docs/benchmarks.md, bk15): -3 846 M instructions for
#: 51.1 MB, -10 472 M / 53.6 MB, -20 351 M / 56.5 MB, -50 236 M / 58.1 MB. -20 against
#: -3: 0.5 G fewer instructions per 64 MiB (~1.3 G of a backup's ~5.9 G) for 10 % more
#: bytes; each byte more costs ~42 instructions less than compressing it away, and
#: this disk writes it in ~1-2 ns (600-1,100 MB/s fsync'd, measured there).
#: Now level -20's kind ("fast": no entropy coding of literals) with its own tables: a
#: hash table of 2**11 entries (8 KB, in the L1 cache; level -20 takes 2**13), matches of
#: 7 bytes or more, the skip of level -16: the bench image's 188 MB in 0.080 against
#: 0.092 CPU-s, 142.6 against 144.4 MB (docs/benchmarks.md, "backupsix")
LEVEL: dict[str, int] = {
    "window_log": 21,
    "hash_log": 11,
    "chain_log": 11,
    "search_log": 1,
    "min_match": 7,
    "target_length": 16,
}


def shipped(
    writer: FrameWriter,
    conn: sqlite3.Connection,
    progress: Callable[[int, int], None] | None,
    ship: Callable[[], int],
    tags: bool = False,
    heads_ahead: HeadsAhead | None = None,
    scan: Callable[[], Scanned | None] | None = None,
    packed: PackedScan | None = None,
) -> dict[str, Any]:
    """``ship()`` (it writes the chunks, returns the bytes shipped) while the heads
    are read through ``conn`` (the shipped bytes' snapshot; with ``tags``, by
    ``scan()`` first if given: a page image's heads table from its pages) in a thread
    of their own
    (SQLite releases the GIL while it steps, zstd and AES-GCM while they run: the two
    cores overlap, measured in docs/benchmarks.md, fourth pass); the manifest's body,
    its heads as head tags (``tags``: versions 5 and 6, :mod:`.tagheads`) or as the
    head records' checksums."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(_heads_ahead, conn, tags, heads_ahead, scan, packed)
        size = ship()
        events, snapshots, compacted, heads = reading.result()
    columns = heads["heads"]
    streams = columns.count if isinstance(columns, PackedHeads) else len(columns["agent"])
    if progress is not None:
        progress(streams, streams)
    return {
        "layout": "sqlite-file",
        "file_bytes": size,
        "agents": streams,
        "copied": streams,
        "events": events,
        "snapshots": snapshots,
        **heads,
        "compacted": compacted,
        "streams": {},
        "deleted": [],
    }


#: what :func:`_heads_of` reads: the totals (events, snapshots), the compacted streams'
#: columns and the manifest's heads
Heads = tuple[int, int, dict[str, list[Any]], dict[str, Any]]
#: ``(before, after, prefix) -> (before + packed columns + after, streams, sum of the
#: head seqs, own) | None``: :meth:`.sqlite_pages.PageSnapshot.packed_heads`
PackedScan = Callable[[bytes, bytes, bytes], "tuple[bytes, int, int, list[tuple[str, int]]] | None"]


def _heads_ahead(
    conn: sqlite3.Connection,
    tags: bool,
    heads_ahead: HeadsAhead | None,
    scan: Callable[[], Scanned | None] | None = None,
    packed_scan: PackedScan | None = None,
) -> Heads:
    """:func:`_heads_of`; with ``heads_ahead``, that filled and ``conn`` closed (the
    heads packed by ``packed_scan`` where it takes them: :func:`_packed_heads`)."""
    made = None
    if heads_ahead is not None and tags and packed_scan is not None:
        made = functools.partial(_packed_heads, conn, heads_ahead, packed_scan)
    found = _heads_of(conn, tags, scan, made)
    if heads_ahead is not None and heads_ahead.packed is not None:  # (by ``made``)
        conn.close()
    elif heads_ahead is not None:
        heads = found[3]
        packed = ahead(heads)
        if heads_ahead.frames is not None:  # (its zstd frame's head left out: placedframe)
            blocks = heads_ahead.frames().compress(packed.pairs)[HEAD_BYTES:]
            packed = packed._replace(blocks=blocks)
        heads_ahead.packed = packed
        agents = heads["heads"]["agent"]  # (tag_heads: in id order)
        heads_ahead.internal = (internal_streams_sorted if tags else internal_streams)(agents)
        conn.close()
    return found


def _packed_heads(
    conn: sqlite3.Connection, heads_ahead: HeadsAhead, packed: PackedScan
) -> Heads | None:
    """:func:`_heads_ahead` with the heads packed by the C scan (``packed``): the pairs
    ``{"heads": columns, "untagged": {...}}`` of the manifest made as msgpack straight
    from the pages, the manifest's ``heads`` a :class:`.tagheads.PackedHeads` (its
    splice, :func:`.framepack.packb`, is the only packing of it); or None: the scan
    does not take this table (the caller reads the heads as before). The bytes are
    those :func:`_heads_of`'s columns pack to (tests/backends/test_sqlite_headpack.py)."""
    untagged: dict[str, list[Any]] = {"agent": [], "checksum": []}
    found = packed(packb("heads"), bytes(ahead({"untagged": untagged}).pairs), _OWN)
    if found is None:
        return None
    pairs, streams, accounted, own = found
    events, snapshots = conn.execute(COUNTS).fetchone()
    compacted = compacted_streams(conn) if events != accounted else []
    columns = PackedHeads(streams, tuple(own))
    heads: dict[str, Any] = {"heads": columns, "untagged": untagged}
    made = Ahead(dict(heads), memoryview(pairs))
    if heads_ahead.frames is not None:  # (its zstd frame's head left out: placedframe)
        blocks = heads_ahead.frames().compress(made.pairs)[HEAD_BYTES:]
        made = made._replace(blocks=blocks)
    heads_ahead.packed = made
    heads_ahead.internal = tuple(agent for agent, _ in own)
    return events, snapshots, compacted_columns(compacted), heads


#: the store's own streams' ids start so (:data:`~statekeeper.arguments.INTERNAL_PREFIX`)
_OWN = INTERNAL_PREFIX.encode()


def _heads_of(
    conn: sqlite3.Connection,
    tags: bool,
    scan: Callable[[], Scanned | None] | None = None,
    packed: Callable[[], Heads | None] | None = None,
) -> Heads:
    """The totals (events, snapshots), the compacted streams and every stream's head
    (the manifest's ``heads`` columns, and with ``tags`` its ``untagged`` ones) of
    what ``conn`` reads: a statement or two each (over a memory map: measured 0.27
    against 0.41 CPU-s for 100,000 heads, no read() per page); ``packed()`` first if
    given (:func:`_packed_heads`), where it takes them."""
    made = packed() if packed is not None else None
    if made is not None:
        return made
    if tags:
        # the heads table scanned once: its heads and the events they account for
        listed = tag_heads(conn, scan() if scan is not None else None)
        events, snapshots = conn.execute(COUNTS).fetchone()
        short = events != listed.accounted
        heads = {
            "heads": {"agent": listed.agents, "head": listed.heads, "tag": listed.tags},
            "untagged": listed.untagged,
        }
    else:
        events, snapshots, short = stream_totals(conn)
        agent, head, checksums = stream_head_columns(conn)
        heads = {"heads": {"agent": agent, "head": head, "checksum": checksums}}
    found = compacted_streams(conn) if short else []
    return events, snapshots, compacted_columns(found), heads


def compacted_columns(
    found: list[tuple[str, int, int, bytes | None, int]],
) -> dict[str, list[Any]]:
    """The manifest's streams compacted by retention, as columns: agent, base seq and
    the base snapshot's checksum (it carries the chain link at the base: a restore
    starts the chain there). A stream with a gap, or without a snapshot at its base,
    is damaged: refused (``verify`` names it), nothing written."""
    out: dict[str, list[Any]] = {"agent": [], "base": [], "checksum": []}
    for agent_id, head, base, checksum, held in found:
        if held != head - base or base < 1 or checksum is None:
            lacks = "" if checksum is not None or base < 1 else " and no snapshot at its base"
            raise BackupError(
                f"agent {agent_id!r} holds {held} events from seq {base + 1} to its head"
                f" {head}{lacks}: the stream is damaged (statekeeper verify names what is"
                " wrong)"
            )
        out["agent"].append(agent_id)
        out["base"].append(base)
        out["checksum"].append(checksum)
    return out


@contextlib.contextmanager
def opened_copy(reader: FrameReader, store_file: bool = True) -> Iterator[str]:
    """The store file of a version-2 backup (``store_file``; else the sections of a
    version-3 one), decrypted into a temporary file (every chunk authenticated and
    checked against the manifest, the size too)."""
    with copy_folder() as folder:
        path = os.path.join(folder, "copy.db")
        size = 0
        with open(path, "wb") as out:
            for piece in reader.file_chunks():
                out.write(piece)
                size += len(piece)
        expected = reader.manifest.get("file_bytes")
        if size != expected:
            raise BackupCorrupt(
                reader.path, "chunks", f"they hold {size} bytes, the manifest {expected}"
            )
        try:
            if store_file:
                require_store_file(path)
        except NotAStore as exc:  # authenticated yet not a store: a writer bug, refused
            raise BackupCorrupt(reader.path, "store copy", str(exc)) from None
        yield path


def file_entries(reader: FrameReader) -> Iterator[tuple[int, Any]]:
    """``(group, entry)`` of a version-2 backup (see :func:`checked_entries`)."""
    with opened_copy(reader) as copy:
        yield from image_entries(reader, copy)


def image_entries(reader: FrameReader, image: str) -> Iterator[tuple[int, Any]]:
    """``(group, entry)`` of the store file at ``image`` (a version-2 backup's copy,
    or the image rebuilt from a chain of page backups ending in ``reader``: see
    :mod:`.pagechain`), checked against ``reader``'s manifest."""
    conn = connect_read_only(image)
    try:
        # a private, static file: read through a memory map (no read() per page: the
        # events' scan -15 % CPU, docs/benchmarks.md "restorecheck")
        conn.execute(f"PRAGMA mmap_size = {os.path.getsize(image)}")
        refuse_strays(reader, conn)
        stray = functools.partial(_stray, reader.path)
        yield from checked_entries(reader, iter_streams(conn, stray))
    except sqlite3.DatabaseError as exc:
        # an authentic backup of a store whose pages were damaged (a page backup ships
        # the pages as they are): SQLite's own refusal, typed (the restore's checking
        # pass: nothing written yet)
        if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) not in _DAMAGED:
            raise
        raise BackupCorrupt(
            reader.path, "store image", f"SQLite cannot read it ({exc}): the store was damaged"
        ) from None
    finally:
        conn.close()


#: SQLite's primary result codes for a file it cannot read as a database
_DAMAGED = frozenset((sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB))


def _stray(path: str, record: str, agent_id: str, seq: int, head: int, after: str) -> None:
    """A row of the image outside every stream or out of order (its idempotency records:
    the events and snapshots are refused by :func:`refuse_strays` first), refused by
    the checking pass while the streams are read (see :data:`.sqlite_export.Stray`)."""
    raise BackupCorrupt(path, *stray_reason(record, agent_id, seq, head, after))


def refuse_strays(reader: FrameReader, conn: sqlite3.Connection) -> None:
    """:class:`~statekeeper.errors.BackupCorrupt` naming the first event or snapshot of
    the image at ``conn`` outside every stream (past its head, or of an agent without
    one): the streams read from the image (:func:`~.sqlite_export.iter_streams`) leave
    such rows out, so the restore would report success without them; a consistent
    backup holds none. The events by their count (the manifest's streams hold ``head -
    base`` each, which :func:`checked_entries` checks; a row looked up per event only
    when the counts differ), the snapshots (a few per stream) row by row."""
    bases = reader.compacted()
    try:
        listed = sum(int(head) - bases.get(agent, (0, b""))[0] for agent, head, _ in reader.heads())
    except (TypeError, ValueError):  # a malformed head: every event looked up
        listed = -1
    (held,) = conn.execute("SELECT count(*) FROM sk_events").fetchone()
    stray = stray_row(conn, "sk_events") if held != listed else None
    stray = stray or stray_row(conn, "sk_snapshots")
    if stray is not None:
        raise BackupCorrupt(reader.path, *stray)


#: an event row's seq and payload (``(seq, kind, ts, payload, checksum)``), taken in C
_seq = itemgetter(0)
_payload = itemgetter(3)


def _after_the_rest(streams: Iterator[StreamRows]) -> None:
    """The rest of ``streams`` read (nothing checked) before a stream that is not what
    the manifest says is refused: a row of it out of order further on (an event
    among another agent's) is then refused by the reader's ``stray`` callback, which
    names the row and what it came after, rather than the stream only by its count.
    On the refusing path only (it reads the rest of the copy)."""
    for _ in streams:
        pass


def _misplaced(seqs: list[int], start: int) -> str:
    """Why the event seqs ``seqs`` of a stream (its events after ``start``, as many as
    its head says) are not ``start + 1`` onward: the first seq out of place and the
    one expected there."""
    at, expected = next((i, start + 1 + i) for i, s in enumerate(seqs) if s != start + 1 + i)
    if sorted(seqs) == list(range(start + 1, start + 1 + len(seqs))):
        how = "its events are out of order"
    else:
        how = "the stream has a gap"
    return f"{how}: seq {seqs[at]} where seq {expected} was expected; nothing was restored"


def checked_entries(
    reader: FrameReader, streams: Iterator[StreamRows]
) -> Iterator[tuple[int, Any]]:
    """``(group, entry)`` of a file backup's ``streams`` (version 2: its store copy;
    version 3: its PostgreSQL sections), entries as the row path's
    (``[agent, 0, head, tag, events, snapshot, keys]``), each checked against the
    manifest's head (seq, checksum of the head record; every event from seq 1, or for
    a stream compacted by retention from its base, whose base snapshot must be the
    manifest's: the entry then carries it as an 8th element); every stream the
    manifest lists must be there, and nothing else."""
    path = reader.path
    listed = {agent: (head, checksum) for agent, head, checksum in reader.heads()}
    # versions 5 and 6: the heads are the heads table's tags (the image's must be the
    # manifest's; the restore checks each against its chain with the target's keys),
    # the checksums of the streams without one in ``untagged``
    untagged = reader.untagged() if reader.header.version in HEAD_TAGS else None
    bases = reader.compacted()
    seen = 0
    group = group_bytes = group_agents = 0
    for rows in streams:
        agent_id = rows.agent_id
        what = f"agent {agent_id!r}"
        expected = listed.get(agent_id)
        if expected is None:
            raise BackupCorrupt(path, what, "not in the manifest")
        seen += 1
        head, checksum = expected
        events = rows.events
        start, base_checksum = bases.get(agent_id, (0, None))
        if start and (rows.base is None or rows.base[0] != start):
            raise BackupCorrupt(path, what, "its base snapshot (compacted) is missing")
        if start and rows.base is not None and rows.base[3] != base_checksum:
            raise BackupCorrupt(
                path, what, "its base snapshot (compacted) differs from the manifest's"
            )
        if rows.head != head or len(events) != head - start:
            _after_the_rest(streams)  # (a row of it out of order, later: named there)
            raise BackupCorrupt(path, what, "differs from the manifest (seqs or counts)")
        seqs = list(map(_seq, events))
        if seqs != list(range(start + 1, head + 1)):
            _after_the_rest(streams)
            raise BackupCorrupt(path, what, _misplaced(seqs, start))
        if untagged is not None:
            if rows.head_tag != checksum:
                raise BackupCorrupt(path, what, "its head tag differs from the manifest's")
            if checksum is None and agent_id not in untagged:
                raise BackupCorrupt(path, what, "the manifest lists its head by neither")
            checksum = untagged.get(agent_id) if checksum is None else None
        last = events[-1][4] if events else rows.snapshot[3] if rows.snapshot else b""
        if checksum is not None and last != checksum:
            raise BackupCorrupt(path, what, "its head differs from the manifest's")
        size = sum(map(len, map(_payload, events)))
        if group_agents and (group_agents >= GROUP_AGENTS or group_bytes + size > GROUP_BYTES):
            group, group_bytes, group_agents = group + 1, 0, 0
        group_agents += 1
        group_bytes += size
        entry: list[Any] = [
            agent_id,
            0,
            head,
            rows.head_tag,
            events,
            rows.snapshot,
            # (of a compacted stream: the records after its base and those its
            # compaction kept, also of an append it cut in two)
            rows.keys,
        ]
        if start:
            entry.append(rows.base)
        yield group, entry
    if seen != len(listed):
        raise BackupCorrupt(path, "store copy", f"holds {seen} of the {len(listed)} streams listed")
