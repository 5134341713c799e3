"""The PostgreSQL path of a backup (format version 3): a whole PostgreSQL store (or
the namespaces a principal may read), streamed out by the server's ``COPY ... TO
STDOUT (FORMAT binary)`` under one ``REPEATABLE READ`` snapshot, without a row
becoming a Python object.

**Writing.** :meth:`~statekeeper.backends.base.Backend.copy_out` streams four
sections (heads, events, snapshots, idempotency keys; see
:mod:`statekeeper.backends.postgres.export`) as the server sends them into a
:class:`~.sealer.ChunkSealer`: cut into chunks, compressed, encrypted and named
by threads while the next pieces arrive. The manifest gets each section's size and,
read in the same snapshot, every stream's head (seq, head checksum), the totals and
the streams compacted by retention, as a version-2 backup's.

**Reading.** :func:`copy_entries` decrypts the chunks into a temporary file (each
authenticated and checked against the manifest, the size too), parses the sections
(PostgreSQL's binary ``COPY`` format: a signature, then per row a field count and
each field's length and bytes) and yields the streams as the row path's entries,
each checked against the manifest's heads as a version-2 backup's are
(:func:`~.filecopy.checked_entries`); an event or a snapshot outside every stream
(past its head, or of an agent without one) is refused, naming it (:func:`_refuse`),
as a version-2 image's is (:func:`~.filecopy.refuse_strays`): a restore into any
engine then verifies and writes them as it does any backup. Nothing here needs PostgreSQL.
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

from ...backends.sqlite.export import merge_streams
from ...backends.sqlite.importing import stray_reason
from ...errors import BackupCorrupt
from .filecopy import checked_entries, compacted_columns, opened_copy
from .fileformat import FrameReader, FrameWriter
from .joined import run_joined

if TYPE_CHECKING:
    from ...backends.base import Backend

__all__ = ["SECTIONS", "copy_entries", "write_copy_out"]

#: the sections, in order, and their columns' types (t text, i int8, f float8, b bytea)
SECTIONS = (
    ("sk_agents", "tib"),
    ("sk_events", "titfbb"),
    ("sk_snapshots", "tifbb"),
    ("sk_idempotency", "ttii"),
)
SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_i64 = struct.Struct(">q")
_f64 = struct.Struct(">d")


async def write_copy_out(
    backend: Backend,
    writer: FrameWriter,
    prefix: str,
    chunk_bytes: int,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any] | None:
    """The sections of ``backend``'s copy (ids starting with ``prefix``) sealed into
    ``writer``; the manifest's body, or None (the engine has no such copy: nothing
    written)."""
    sealer = writer.sealer(chunk_bytes, threads=min(4, os.cpu_count() or 1))
    try:
        got = await backend.copy_out(prefix, sealer.feed)
    except BaseException:
        # its threads joined, nothing more written (cancelled again meanwhile: still)
        await run_joined(writer.stop, sealer.abort)
        raise
    size = await run_joined(writer.stop, sealer.close)
    if got is None:
        return None
    names = [name for name, _ in SECTIONS]
    if [t for t, _ in got["tables"]] != names or sum(n for _, n in got["tables"]) != size:
        raise AssertionError(f"the engine's copy is not the sections {names}: {got['tables']}")
    rows = got["heads"]
    if progress is not None:
        progress(len(rows), len(rows))
    agent, heads, checksums = (
        ([], [], []) if not rows else (list(c) for c in zip(*rows, strict=True))
    )
    return {
        "layout": "postgres-copy",
        "file_bytes": size,
        "sections": got["tables"],
        "agents": len(agent),
        "copied": len(agent),
        "events": got["events"],
        "snapshots": got["snapshots"],
        "heads": {"agent": agent, "head": heads, "checksum": checksums},
        "compacted": compacted_columns(got["compacted"]),
        "streams": {},
        "deleted": [],
    }


def _rows(data: memoryview, start: int, end: int, types: str) -> Iterator[tuple[Any, ...]]:
    """The rows of one binary ``COPY`` section ``data[start:end]``; malformed bytes
    raise ``ValueError``."""
    if data[start : start + len(SIGNATURE)] != SIGNATURE:
        raise ValueError("no COPY signature")
    pos = start + len(SIGNATURE) + 4
    (extension,) = _i32.unpack_from(data, pos)
    pos += 4 + extension
    width = len(types)
    while True:
        (fields,) = _i16.unpack_from(data, pos)
        pos += 2
        if fields == -1:
            break
        if fields != width:
            raise ValueError(f"a row of {fields} fields, not {width}")
        row: list[Any] = []
        for kind in types:
            (length,) = _i32.unpack_from(data, pos)
            pos += 4
            if length == -1:
                row.append(None)
                continue
            if length < 0 or pos + length > end:
                raise ValueError("a field runs past its section")
            if kind == "b":
                row.append(bytes(data[pos : pos + length]))
            elif kind == "t":
                row.append(str(data[pos : pos + length], "utf-8"))
            elif kind == "i":
                row.append(_i64.unpack_from(data, pos)[0])
            else:
                row.append(_f64.unpack_from(data, pos)[0])
            pos += length
        yield tuple(row)
    if pos != end:
        raise ValueError("bytes after the end of a section")


def _checked(path: str, rows: Iterator[tuple[Any, ...]]) -> Generator[tuple[Any, ...]]:
    try:
        yield from rows
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        # authenticated yet unreadable: a writer bug, still refused
        raise BackupCorrupt(path, "copy sections", f"unreadable: {exc}") from None


def _refuse(path: str, record: str, agent_id: str, seq: int, head: int, after: str) -> None:
    """A row of the sections outside every stream (an event, a snapshot or an
    idempotency record past its head, or of an agent without one: no consistent copy
    holds one) or out of order refused, naming it (``after``: what it came after, its
    place being before that): the streams leave it out
    (:func:`~.sqlite_export.merge_streams`), so the restore would report success
    without it. Raised by the checking pass, before anything is written."""
    raise BackupCorrupt(path, *stray_reason(record, agent_id, seq, head, after))


def copy_entries(reader: FrameReader) -> Iterator[tuple[int, Any]]:
    """``(group, entry)`` of a version-3 backup, each checked against the manifest
    (see :func:`~.filecopy.checked_entries`)."""
    sections = reader.manifest.get("sections")
    names = [name for name, _ in SECTIONS]
    try:
        listed = list(sections) if isinstance(sections, list) else []
        sizes = [int(n) for _, n in listed]
        ok = [str(t) for t, _ in listed] == names and all(n >= 0 for n in sizes)
    except (TypeError, ValueError):
        ok, sizes = False, []
    if not ok or sum(sizes) != reader.manifest.get("file_bytes"):
        raise BackupCorrupt(reader.path, "manifest", "its list of copy sections is malformed")
    with opened_copy(reader, store_file=False) as copy, open(copy, "rb") as fh:
        if os.path.getsize(copy) == 0:
            raise BackupCorrupt(reader.path, "copy sections", "empty")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            data = memoryview(mapped)
            starts = [sum(sizes[:i]) for i in range(len(sizes))]
            parts = [
                _checked(reader.path, _rows(data, at, at + n, types))
                for at, n, (_, types) in zip(starts, sizes, SECTIONS, strict=True)
            ]
            try:
                streams = merge_streams(*parts, stray=functools.partial(_refuse, reader.path))
                yield from checked_entries(reader, streams)
            finally:
                for part in parts:  # their views of the map go before the map
                    part.close()
                del parts
                data.release()
