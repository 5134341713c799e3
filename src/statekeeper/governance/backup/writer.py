"""``backup``: a point-in-time copy of a live store in one encrypted file.

**The cut.** The backup first lists every agent's head seq (one pass over the agent
index); that listing is the backup's point in time. Each agent is then copied up to its
listed head — events, the latest snapshot at or below it, idempotency keys — while
writers keep appending after it; an agent deleted (or deleted and re-created) while the
backup runs is copied as it is found on a re-read, or counted ``vanished``. Records are
copied as stored (still encrypted with the store's keys, or per-agent data keys), then
packed into chunks, compressed (zstd) and encrypted with the *backup* key.

**A SQLite store** (a full backup: no ``since``) is not read row by row: the pages of
one read snapshot of its file are shipped in chunks (on a store opened in a namespace,
a copy of that namespace's streams made by SQLite; format version 5, or 2 for a
namespace's copy, see
:mod:`.filecopy`), nor is a PostgreSQL store (its tables streamed out by ``COPY``
under one snapshot, format version 3, see :mod:`.pgcopy`); what follows describes the
row path, which every other backup takes.

**Incremental.** With ``since=`` (the previous backup of the chain), an agent whose
record at the previous head is unchanged is copied from there on; one that was
re-created is copied whole; one deleted is listed as deleted. Restore applies a full
backup and its incrementals in order.

**Compacted streams** (retention's ``keep_last``) are copied as stored: their events
after the base and their base snapshot (an 8th element of the entry; the manifest's
``compacted`` base seq and ``base_digest``). An incremental backup of a stream whose
base moved since the parent (retention ran in between; one read of each agent's first
stored seq on an engine that prunes) copies it whole from its new base, so a restore
rebuilds it as the source holds it, never with the history the source removed.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack  # type: ignore[import-untyped]

from ...arguments import INTERNAL_PREFIX
from ...backends.sqlite.base import translated
from ...errors import BackupError, StatekeeperError
from ...store.namespaced import NamespacedStateStore
from ..hooks import AuditSink, require_namespace
from .audited import audit_backup
from .filecopy import HeadsAhead, copy_of, write_copy, write_pages
from .fileformat import (
    FILE_IMAGES,
    HEAD_TAGS,
    PAGE_DELTAS,
    VERSION_COPY,
    VERSION_FILE,
    VERSION_FILE_TAGS,
    VERSION_PAGES,
    VERSION_PAGES_TAGS,
    BackupKey,
    FrameReader,
    FrameWriter,
    Header,
)
from .joined import copy_folder, released_after, run_joined
from .leasetokens import sealed_leases, sealing_leases
from .location import Location, named_as_given
from .nsholds import namespace_holds, sealed_holds, sealing_holds
from .pagedelta import page_layout, since_parent, write_page_delta
from .pgcopy import write_copy_out
from .placedframe import finish_manifest
from .rowentries import add_unlisted, copy_batch, last_digest, list_heads, mark_compacted
from .storekey import sealing_keys
from .tagheads import PackedHeads
from .tagheads import internal_streams as _internal

if TYPE_CHECKING:
    from ...backends.base import Backend
    from ...backends.sqlite.pages import PageSnapshot
    from ...store import StateStore

__all__ = ["BackupResult", "backup", "stream_digest"]

_BATCH = 1000
#: the plain bytes of one chunk (``backup``'s ``chunk_bytes``): 2 MiB. The page
#: pipeline holds ``threads + 2`` chunks in flight plus their ciphertexts and zstd's
#: output, each buffer faulted in on first use; at 8 MiB (before) a 100,000-agent
#: backup took ~44,000 page faults and 0.50-0.72 CPU-s, at 2 MiB ~28,000 and
#: 0.47-0.49 (docs/benchmarks.md, "backupmb")
CHUNK_BYTES = 2 << 20
#: the format of a whole SQLite store's full page backup: its heads as the heads
#: table's tags (version 5, no probe of the events per stream: docs/benchmarks.md,
#: "backuphead"); version 2 (the heads' checksums) is what an incremental by pages
#: after a version-2 parent keeps writing (as version 4)
FULL_PAGES = VERSION_FILE_TAGS


@dataclass(frozen=True, slots=True)
class BackupResult:
    """What :func:`backup` wrote."""

    location: str
    backup_id: str
    parent: str | None
    agents: int
    #: agents with records in this file (all of them in a full backup), and their
    #: events and snapshots: the user's agents only (the store's own streams are
    #: ``internal`` / ``internal_streams``; the manifest's totals count every stream)
    copied: int
    events: int
    snapshots: int
    deleted: int  # incremental: agents gone since the parent
    vanished: int  # deleted while the backup ran
    bytes_written: int
    #: stream entries copied (records as stored + seqs, types, times); a file backup
    #: (format version 2): the size of the store file's copy
    record_bytes: int
    seconds: float
    #: the store's own streams copied besides the agents (its audit log, its legal
    #: holds): not counted in ``agents`` (the manifest's ``agents`` counts every stream)
    internal: int = 0
    #: their stored ids (:data:`~statekeeper.arguments.AUDIT_STREAM`,
    #: :data:`~statekeeper.arguments.HOLDS_STREAM`), sorted
    internal_streams: tuple[str, ...] = ()


def pack_entry(item: list[Any]) -> bytes:
    """One stream entry of a chunk, ``[agent, base, head, tag, events, snapshot, keys]``,
    as msgpack: the chunk is the concatenation of these, and the manifest signs the
    SHA-256 of each (:func:`stream_digest`)."""
    packed: bytes = msgpack.packb(item, use_bin_type=True)
    return packed


def stream_digest(packed: bytes) -> str:
    """The digest the manifest holds for a packed stream entry."""
    return hashlib.sha256(packed).hexdigest()


async def backup(
    store: StateStore,
    to: str | os.PathLike[str],
    key: BackupKey,
    *,
    since: str | os.PathLike[str] | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    progress: Callable[[int, int], None] | None = None,
    audit: AuditSink | None = None,
    overwrite: bool = False,
) -> BackupResult:
    """Write a backup of ``store`` to ``to`` (a file path or ``s3://bucket/key``).

    ``key`` encrypts and signs it and must not be a key of the store. ``since``: the
    previous backup (of the same store, same key) for an incremental one. ``progress``
    is called with ``(agents done, agents in the cut)``. The file appears only when
    complete (written beside the target and renamed, or uploaded when done).

    A file or S3 object already at ``to`` (an earlier backup: perhaps the parent of
    incrementals) is not replaced unless ``overwrite``:
    :class:`~statekeeper.errors.BackupError` before anything is read or written (and
    again if one appeared while the backup ran). An incremental backup is never written
    over its own parent, ``overwrite`` or not.

    On a store opened in a namespace (``StateStore(url, namespace="acme")``) only the
    streams of that namespace and below are copied, under their stored (full) ids; the
    manifest records the namespace, and ``since`` must be a backup of the same one.

    On a store opened as a principal the backup needs ``admin`` on everything it
    copies: on a store opened in a namespace, ``admin`` on that namespace and every
    namespace below it (``tenant-a/**``); on the whole store, ``admin`` on every
    namespace (``**``: it copies every stream, the audit log included, which only a
    store admin may read). Otherwise :class:`~statekeeper.errors.AccessDenied`
    (audited) before anything is read or written. ``audit`` defaults to the store's
    own audit log there.

    A tiered store's demoted agents are read from its cold tier, where they stay.
    """
    # (reading them is not using them); a namespace's backup lists the holds on it in
    # its manifest (.nsholds)
    # and every manifest lists the agents' newest fencing tokens (.leasetokens)
    with (
        store.backend.in_place(),
        sealing_holds(await namespace_holds(store)),
        sealing_leases(store),
    ):
        return await _backup(store, to, key, since, chunk_bytes, progress, audit, overwrite)


async def _backup(
    store: StateStore,
    to: str | os.PathLike[str],
    key: BackupKey,
    since: str | os.PathLike[str] | None,
    chunk_bytes: int,
    progress: Callable[[int, int], None] | None,
    audit: AuditSink | None,
    overwrite: bool,
) -> BackupResult:
    location = Location(to, overwrite=overwrite)
    if since is not None and location.replaces(Location(since)):
        # the new incremental would take its parent's place: the chain's only copy of
        # the parent gone, the backup written unrestorable (was: done, and reported so)
        raise BackupError(
            f"cannot write the incremental backup over its parent {Location(since).display}:"
            " give a new file for it (restoring it needs the parent)"
        )
    await require_namespace(store, "admin", "backup")
    # a store opened in a namespace backs up that namespace (and below) only, under
    # the stored (full) ids; the manifest names the namespace
    namespace = store.namespace if isinstance(store, NamespacedStateStore) else ""
    key.check_not_store_key(store.codec.keyring, await sealing_keys(store))
    location.check_free()
    started = time.perf_counter()
    created = time.time()
    parent_id: str | None = None
    previous: dict[str, Any] = {}
    #: the parent's page layout (size, count, digests) when it is a page backup
    parent_pages: tuple[int, int, bytes, str] | None = None
    parent: FrameReader | None = None  # closed: its header and manifest only
    #: an incremental by pages lists its heads as its parent does (tags or checksums)
    delta = VERSION_PAGES
    if since is not None:
        given: dict[str, str] = {}
        with named_as_given(given), Location(since).local_copy() as path:
            if path != Location(since).display:
                given[path] = Location(since).display
            reader = FrameReader(path, key)
            try:
                parent_id = reader.header.backup_id
                parent = reader
                if reader.header.version in FILE_IMAGES | PAGE_DELTAS:
                    parent_pages = page_layout(reader)
                if reader.header.version in HEAD_TAGS:
                    delta = VERSION_PAGES_TAGS
                if reader.manifest.get("namespace", "") != namespace:
                    raise BackupError(
                        f"--since {Location(since).display}: it is a backup of namespace"
                        f" {reader.manifest.get('namespace', '')!r}, this one of"
                        f" {namespace!r}: an incremental backup needs a parent of the"
                        " same namespace"
                    )
            finally:
                reader.close()
    await store.flush()
    backend = store.backend
    backup_id = secrets.token_hex(16)
    if since is None or parent_pages is not None:
        # a whole SQLite store: its pages (an incremental: those changed since the parent)
        pages = await backend.page_snapshot(namespace + "/" if namespace else "")
        if pages is not None and parent_pages is not None and pages.page_size != parent_pages[0]:
            pages.close()  # the page size changed (VACUUM): the row path below
            pages = None
        if pages is not None:
            version = FULL_PAGES if parent_pages is None else delta
            header = Header.new(backup_id, parent_id, key, created, version)
            result = await _write_pages(
                backend.name,
                namespace,
                pages,
                location,
                header,
                key,
                chunk_bytes,
                progress,
                started,
                None if parent is None or parent_pages is None else (parent, parent_pages),
            )
            await audit_backup(store, audit, result)
            return result
    if parent is not None:
        previous = parent.streams
    if since is None:
        with copy_folder() as folder:
            copy = await copy_of(backend, folder, namespace)
            if copy is not None:
                header = Header.new(backup_id, None, key, created, VERSION_FILE)
                result = await _write_file(
                    backend.name,
                    namespace,
                    copy,
                    location,
                    header,
                    key,
                    chunk_bytes,
                    progress,
                    started,
                )
                await audit_backup(store, audit, result)
                return result
        if backend.copies_out:  # else no target opened: the row path below
            header = Header.new(backup_id, None, key, created, VERSION_COPY)
            copied = await _write_copy_out(
                backend, namespace, location, header, key, chunk_bytes, progress, started
            )
            if copied is not None:
                await audit_backup(store, audit, copied)
                return copied
    heads = await list_heads(backend, namespace + "/" if namespace else "")
    await add_unlisted(backend, namespace + "/" if namespace else "", heads)
    header = Header.new(backup_id, parent_id, key, created)
    streams: dict[str, Any] = {}
    totals = {"events": 0, "snapshots": 0, "copied": 0, "vanished": 0, "record_bytes": 0}
    own = {"events": 0, "snapshots": 0, "copied": 0}  # of them, the store's own streams

    with location.writing() as out:
        writer = FrameWriter(out, header, key)
        holds = _holds(location)
        pending: list[bytes] = []
        pending_bytes = 0
        pending_ids: list[str] = []
        # one chunk compressed, encrypted and written in a thread while the next is read
        sealing: tuple[asyncio.Future[int], list[str]] | None = None

        async def settle() -> None:
            nonlocal sealing
            if sealing is not None:
                task, ids = sealing
                sealing = None
                index = await task
                for agent_id in ids:
                    streams[agent_id]["chunk"] = index

        async def flush() -> None:
            nonlocal pending, pending_bytes, pending_ids, sealing
            if not pending:
                return
            chunk, ids = pending, pending_ids
            pending, pending_bytes, pending_ids = [], 0, []
            await settle()
            sealed = run_joined(writer.stop, writer.chunk_packed, chunk, holds=holds)
            sealing = (asyncio.ensure_future(sealed), ids)

        ids = sorted(heads)
        done = 0
        packb = msgpack.Packer(use_bin_type=True, autoreset=True).pack
        sha256 = hashlib.sha256
        try:
            for start in range(0, len(ids), _BATCH):
                batch = ids[start : start + _BATCH]
                entries = await copy_batch(backend, [(a, heads[a]) for a in batch], previous)
                for agent_id, entry in zip(batch, entries, strict=True):
                    if entry is None:
                        totals["vanished"] += 1
                        continue
                    packed: bytes = packb(entry)
                    events, snapshot = entry[4], entry[5]
                    last = events[-1][4] if events else None
                    stream = streams[agent_id] = {
                        "base": entry[1],
                        "head": entry[2],
                        "events": len(events),
                        "snapshot": snapshot[0] if snapshot else None,
                        "keys": len(entry[6]),
                        "digest": sha256(packed).hexdigest(),
                        "last": last_digest(last)
                        if last is not None
                        else previous.get(agent_id, {}).get("last", ""),
                        "chunk": None,
                    }
                    if not events and "tag" in previous.get(agent_id, {}):
                        stream["tag"] = previous[agent_id]["tag"]  # unchanged, by its tag
                    mark_compacted(stream, entry, previous.get(agent_id))
                    if not events and snapshot is None:
                        continue  # unchanged since the parent: nothing to store
                    size = len(packed)
                    totals["events"] += len(events)
                    totals["snapshots"] += snapshot is not None
                    totals["copied"] += 1
                    if agent_id[:1] == "\x01" and agent_id.startswith(INTERNAL_PREFIX):
                        own["events"] += len(events)
                        own["snapshots"] += snapshot is not None
                        own["copied"] += 1
                    totals["record_bytes"] += size
                    pending.append(packed)
                    pending_ids.append(agent_id)
                    pending_bytes += size
                    if pending_bytes >= chunk_bytes:
                        await flush()
                done += len(batch)
                if progress is not None:
                    progress(done, len(ids))
            await flush()
        finally:
            await settle()
        deleted = sorted(set(previous) - set(streams))
        manifest = {
            "backup_id": backup_id,
            "parent": parent_id,
            "created_at": created,
            "source": backend.name,
            "namespace": namespace,
            "agents": len(streams),
            "copied": totals["copied"],
            "events": totals["events"],
            "snapshots": totals["snapshots"],
            "streams": streams,
            "deleted": deleted,
            **sealed_holds(),
            **(await sealed_leases()),
        }
        await run_joined(writer.stop, writer.finish, manifest, holds=holds)
        written = writer.offset
    inner = _internal(streams)
    result = BackupResult(
        location.display,
        backup_id,
        parent_id,
        len(streams) - len(inner),
        totals["copied"] - own["copied"],
        totals["events"] - own["events"],
        totals["snapshots"] - own["snapshots"],
        len(deleted),
        totals["vanished"],
        written,
        totals["record_bytes"],
        time.perf_counter() - started,
        len(inner),
        inner,
    )
    await audit_backup(store, audit, result)
    return result


class _NoCopy(StatekeeperError):
    """The engine has no bulk copy (:meth:`~..base.Backend.copy_out`): the row path."""


async def _write_copy_out(
    backend: Backend,
    namespace: str,
    location: Location,
    header: Header,
    key: BackupKey,
    chunk_bytes: int,
    progress: Callable[[int, int], None] | None,
    started: float,
) -> BackupResult | None:
    """A version-3 backup from the engine's bulk copy (PostgreSQL, see
    :mod:`.pgcopy`), or None: the engine has none (nothing written)."""
    try:
        with location.writing() as out:
            writer = FrameWriter(out, header, key)
            prefix = namespace + "/" if namespace else ""
            body = await write_copy_out(backend, writer, prefix, chunk_bytes, progress)
            if body is None:
                raise _NoCopy
            await _finish_whole(writer, header, backend.name, namespace, body)
    except _NoCopy:
        return None
    return _whole_result(location, header, body, writer.offset, started)


async def _write_file(
    source: str,
    namespace: str,
    copy: str,
    location: Location,
    header: Header,
    key: BackupKey,
    chunk_bytes: int,
    progress: Callable[[int, int], None] | None,
    started: float,
) -> BackupResult:
    """A version-2 backup of the store file copied at ``copy`` (see :mod:`.filecopy`)."""
    with location.writing() as out:
        writer = FrameWriter(out, header, key)
        # (cancelled: the thread stopped and ended before the file and the copy go)
        holds = _holds(location, f"reading the copy {copy}")
        args = (writer, copy, chunk_bytes, progress)
        body = await run_joined(writer.stop, write_copy, *args, holds=holds)
        await _finish_whole(writer, header, source, namespace, body, holds=holds)
    return _whole_result(location, header, body, writer.offset, started)


async def _write_pages(
    source: str,
    namespace: str,
    snapshot: PageSnapshot,
    location: Location,
    header: Header,
    key: BackupKey,
    chunk_bytes: int,
    progress: Callable[[int, int], None] | None,
    started: float,
    parent: tuple[FrameReader, tuple[int, int, bytes, str]] | None = None,
) -> BackupResult:
    """A version-5 (or 2) backup of a whole SQLite store's page image (see
    :mod:`.filecopy`), or with ``parent`` (the parent backup, its page layout) a
    version-6 (or 4) one of the pages changed since (:mod:`.pagedelta`); ``snapshot``
    is closed."""
    own: tuple[int, int] | None = None  # (an incremental's: the store's own streams' part)
    # (a whole image's: the manifest's heads packed, its own streams found meanwhile)
    ahead = HeadsAhead()
    # the snapshot closed once no thread reads it (by the thread a second cancel walked
    # away from); SQLite's refusals of a damaged file, and the plan's: typed, naming it
    with released_after(snapshot.close), translated(snapshot.path), location.writing() as out:
        writer = FrameWriter(out, header, key)
        holds = _holds(location, f"reading the page snapshot of {snapshot.path}")
        if parent is None:
            local = location.s3 is None  # zero runs left out, nothing compressed
            # (cancelled: the thread stopped and ended before the snapshot closes)
            args = (writer, snapshot, chunk_bytes, progress, local, ahead)
            body = await run_joined(snapshot.cancel, write_pages, *args, holds=holds)
        else:
            body = await run_joined(
                snapshot.cancel,
                write_page_delta,
                writer,
                snapshot,
                parent[1][2],
                chunk_bytes,
                progress,
                parent[1][3],
                holds=holds,
            )
            own = since_parent(body, parent[0].head_marks())
        await _finish_whole(writer, header, source, namespace, body, ahead, holds)
    return _whole_result(location, header, body, writer.offset, started, own, ahead.internal)


async def _finish_whole(
    writer: FrameWriter,
    header: Header,
    source: str,
    namespace: str,
    body: dict[str, Any],
    ahead: HeadsAhead | None = None,
    holds: str = "",
) -> None:
    """Seal a whole copy's manifest (or a page incremental's: ``header.parent``): its
    body plus who and when."""
    manifest = {
        "backup_id": header.backup_id,
        "parent": header.parent,
        "created_at": header.created_at,
        "source": source,
        "namespace": namespace,
        **body,
        **sealed_holds(),
        **(await sealed_leases()),
    }
    # (a local page backup's: sealed into its place, its heads framed ahead)
    packed = ahead.packed if ahead else None
    await run_joined(writer.stop, finish_manifest, writer, manifest, packed, holds=holds)


def _holds(location: Location, also: str = "") -> str:  # (for ThreadStillRunning)
    return f"backup {location.display} (writing its temporary file{', ' + also if also else ''})"


def _whole_result(
    location: Location,
    header: Header,
    body: dict[str, Any],
    written: int,
    started: float,
    own: tuple[int, int] | None = None,
    inner: tuple[str, ...] | None = None,
) -> BackupResult:
    """What a whole copy (file or bulk-copy layout, or a page incremental) holds, once
    its file is closed. ``own``: a page incremental's (streams, events) of the store's
    own streams since its parent (:func:`~.pagedelta.since_parent`); a whole copy
    holds every one of them, from seq 1 (never compacted). ``inner``: those streams,
    found already (:class:`~.filecopy.HeadsAhead`)."""
    heads = body.get("heads")
    if isinstance(heads, PackedHeads):  # (packed by the C scan: its own streams found too)
        inner = tuple(agent for agent, _ in heads.own)
        own = own or (len(inner), sum(head for _, head in heads.own))
    columns = heads if isinstance(heads, dict) else {}
    listed = columns.get("agent")
    if inner is None:
        inner = _internal(listed if isinstance(listed, list) else body.get("streams") or ())
    if own is None:  # (their heads looked up alone: a dict of 100,000 heads cost 0.023 CPU-s)
        own = (len(inner), sum(_head_of(columns, a) for a in inner))
    return BackupResult(
        location.display,
        header.backup_id,
        header.parent,
        body["agents"] - len(inner),
        body["copied"] - own[0],
        body["events"] - own[1],
        body["snapshots"],
        len(body["deleted"]),
        0,
        written,
        body["file_bytes"],
        time.perf_counter() - started,
        len(inner),
        inner,
    )


def _head_of(columns: dict[str, Any], agent: str) -> int:
    """The head seq the manifest's ``heads`` columns list for ``agent``, or 0."""
    agents, heads = columns.get("agent"), columns.get("head")
    if not isinstance(agents, list) or not isinstance(heads, list) or agent not in agents:
        return 0
    at = agents.index(agent)
    return int(heads[at] or 0) if at < len(heads) else 0
