"""``restore``: a backup (a full one and its incrementals) into any store.

Everything is checked before anything is written: each file's key and header, every
chunk against the manifest (position, SHA-256, authentication), the chain of files
(each incremental's parent is the file before it), every stream against the manifest
(seqs, counts, digest) and then every record with the target store's keys — each
event and snapshot authenticated and decrypted, the hash chain followed from seq 1 to
the head — and the target must not hold any of the agents yet. Only then are the
streams appended (with their idempotency keys and head tags, re-made by the target's
codec). A wrong backup key raises :class:`~statekeeper.errors.BackupKeyMismatch`; a
damaged, truncated, edited or incomplete backup
:class:`~statekeeper.errors.BackupCorrupt`; either way nothing is restored.

statekeeper's own streams in a backup (the source's audit log) are restored only into a
target that has none yet: a target's audit log is never overwritten or merged into (its
hash chain is its own); the backup's copy is then left out and listed in
``RestoreResult.kept_internal``.

Agents whose data key was destroyed (``statekeeper forget``) cannot be verified or
read: they are left out and listed in ``RestoreResult.forgotten``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...codec import ZERO_LINK
from ...codec.pipeline import CHAIN_BROKEN
from ...errors import AgentForgotten, BackupCorrupt, BackupError, IntegrityError, KeyNotFound
from ...records import AppendRequest, RawEvent, RawSnapshot
from ...store.body import SNAPSHOT_KIND
from ..hooks import AuditSink, GovernanceEvent, emit, require, store_sink
from .fileformat import BackupKey, FrameReader
from .location import Location
from .writer import pack_entry, stream_digest

if TYPE_CHECKING:
    from ...store import StateStore

__all__ = ["RestoreResult", "read_backups", "restore"]


@dataclass(slots=True)
class _Stream:
    events: list[list[Any]]
    snapshot: list[Any] | None
    keys: list[list[Any]]
    tag: bytes | None


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """What :func:`restore` wrote: agents, events, snapshots restored; ``forgotten``
    agents left out (their data key is destroyed)."""

    agents: int
    events: int
    snapshots: int
    forgotten: list[str] = field(default_factory=list)
    #: agents left out because the target held them already (``skip_existing``)
    skipped: int = 0
    backup_ids: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: statekeeper's own streams of the backup (the source's audit log) left out
    #: because the target has its own: the target's audit log is never overwritten
    kept_internal: list[str] = field(default_factory=list)


def _apply(streams: dict[str, _Stream], reader: FrameReader, chunk_streams: dict[str, Any]) -> None:
    """Fold one file's chunks into ``streams``, checking each entry against the manifest."""
    path = reader.path
    seen: set[str] = set()
    for index, chunk in enumerate(reader.chunks()):
        if not isinstance(chunk, list):
            raise BackupCorrupt(path, f"chunk {index}", "malformed")
        for item in chunk:
            try:
                agent_id, base, head, tag, events, snapshot, keys = item
            except (TypeError, ValueError):
                raise BackupCorrupt(path, f"chunk {index}", "malformed entry") from None
            what = f"agent {agent_id!r}"
            entry = chunk_streams.get(agent_id)
            if entry is None or agent_id in seen or entry["chunk"] != index:
                raise BackupCorrupt(path, what, "not listed in the manifest at this chunk")
            seen.add(agent_id)
            if (
                entry["base"] != base
                or entry["head"] != head
                or entry["events"] != len(events)
                or stream_digest(pack_entry(item)) != entry["digest"]
            ):
                raise BackupCorrupt(path, what, "differs from the manifest (seqs or digest)")
            if [e[0] for e in events] != list(range(base + 1, head + 1)):
                raise BackupCorrupt(path, what, "the stream has a gap")
            if base == 0:
                streams[agent_id] = _Stream(list(events), snapshot, list(keys), tag)
                continue
            current = streams.get(agent_id)
            if current is None or not current.events or current.events[-1][0] != base:
                raise BackupCorrupt(
                    path, what, f"the incremental starts at seq {base + 1}: its parent is missing"
                )
            current.events.extend(events)
            current.keys.extend(keys)
            if snapshot is not None:
                current.snapshot = snapshot
            current.tag = tag
    missing = [a for a, e in chunk_streams.items() if e["chunk"] is not None and a not in seen]
    if missing:
        raise BackupCorrupt(
            path, f"agent {missing[0]!r}", "listed in the manifest, not in any chunk"
        )


def read_backups(paths: Sequence[str], key: BackupKey) -> tuple[dict[str, _Stream], list[str]]:
    """Read and check a full backup and its incrementals (local paths, in order)."""
    streams: dict[str, _Stream] = {}
    ids: list[str] = []
    for number, path in enumerate(paths):
        reader = FrameReader(path, key)
        try:
            header, manifest = reader.header, reader.manifest
            expected_parent = ids[-1] if ids else None
            if header.parent != expected_parent:
                if number == 0:
                    raise BackupError(
                        f"backup {path} is incremental (parent {header.parent}): give its full"
                        " backup and every incremental before it, in order"
                    )
                raise BackupError(
                    f"backup {path} does not follow {paths[number - 1]} (its parent is"
                    f" {header.parent}, not {expected_parent})"
                )
            listed: dict[str, Any] = manifest["streams"]
            _apply(streams, reader, listed)
            for agent_id in manifest.get("deleted", []):
                streams.pop(agent_id, None)
            for agent_id, entry in listed.items():
                if agent_id not in streams:
                    raise BackupCorrupt(path, f"agent {agent_id!r}", "has no records in the chain")
                if streams[agent_id].events[-1][0] != entry["head"]:
                    raise BackupCorrupt(
                        path, f"agent {agent_id!r}", "head differs from the manifest"
                    )
            extra = set(streams) - set(listed)
            if extra:
                raise BackupCorrupt(path, f"agent {min(extra)!r}", "not in the manifest")
            ids.append(header.backup_id)
        finally:
            reader.close()
    return streams, ids


def _verify(store: StateStore, agent_id: str, stream: _Stream) -> bytes:
    """Open every record of the stream with the target's keys, follow the chain;
    return the head tag to store. Raises IntegrityError / AgentForgotten / KeyNotFound."""
    codec = store.codec
    link = ZERO_LINK
    links: dict[int, bytes] = {}
    snap_seq = stream.snapshot[0] if stream.snapshot is not None else None
    for seq, kind, ts, payload, checksum in stream.events:
        opened = codec.open(agent_id, seq, kind, ts, payload, checksum)
        if opened.prev is not None and opened.prev != link:
            raise IntegrityError(agent_id, seq, CHAIN_BROKEN)
        link = opened.link
        if seq == snap_seq:
            links[seq] = link
    if stream.snapshot is not None:
        seq, ts, payload, checksum = stream.snapshot
        opened = codec.open(agent_id, seq, SNAPSHOT_KIND, ts, payload, checksum)
        if seq not in links or (opened.prev is not None and opened.prev != links[seq]):
            raise IntegrityError(agent_id, seq, "the snapshot does not belong to the stream")
    head = stream.events[-1][0]
    return codec.head_tag(agent_id, head, link)


async def _write(store: StateStore, agent_id: str, stream: _Stream, tag: bytes) -> None:
    backend = store.backend
    events = [RawEvent(s, k, t, p, c) for s, k, t, p, c in stream.events]
    head = events[-1].seq
    keyed = {first: (name, last) for name, first, last in stream.keys}
    snap = stream.snapshot
    seq = 0
    while seq < head:
        key: str | None = None
        if seq + 1 in keyed:
            key, end = keyed[seq + 1]
        else:
            end = min([s - 1 for s in keyed if s > seq + 1] + [head])
        part = events[seq:end]
        snapshot = None
        if snap is not None and seq < snap[0] <= end:
            snapshot = RawSnapshot(snap[0], snap[1], snap[2], snap[3])
        await backend.append(
            AppendRequest(agent_id, seq, part, snapshot, key, head_tag=tag if end == head else None)
        )
        seq = end


async def restore(
    store: StateStore,
    backups: Sequence[str | os.PathLike[str]],
    key: BackupKey,
    *,
    concurrency: int = 16,
    skip_existing: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    audit: AuditSink | None = None,
) -> RestoreResult:
    """Restore ``backups`` (a full backup, then its incrementals in order; paths or
    ``s3://`` URLs) into ``store`` (see the module documentation). ``skip_existing``
    leaves out agents the target already holds instead of refusing.

    On a target opened as a principal, the restore needs ``admin`` on the namespace of
    every agent in the backups (it writes history as others wrote it: their actors,
    their times), and ``admin`` on ``**`` when they hold the store's own streams (the
    audit log); the first one missing raises
    :class:`~statekeeper.errors.AccessDenied` (audited) before anything is verified
    or written. ``audit`` defaults to the target's own audit log there."""
    started = time.perf_counter()
    if not backups:
        raise BackupError("restore needs at least one backup")
    audit = store_sink(store, audit)
    with contextlib.ExitStack() as stack:
        paths = [stack.enter_context(Location(b).local_copy()) for b in backups]
        streams, ids = await asyncio.to_thread(read_backups, paths, key)
    for agent_id in sorted(streams):
        internal = agent_id[:1] == "\x01"  # the store's own streams: store admin only
        await require(store, None if internal else agent_id, "admin", "restore")
    forgotten: list[str] = []
    tags: dict[str, bytes] = {}
    for done, agent_id in enumerate(sorted(streams), start=1):
        try:
            tags[agent_id] = _verify(store, agent_id, streams[agent_id])
        except AgentForgotten:
            forgotten.append(agent_id)
        except KeyNotFound:
            raise
        except IntegrityError as exc:
            raise BackupCorrupt(
                os.fspath(backups[-1]), f"agent {agent_id!r}", f"record does not verify: {exc}"
            ) from None
        if progress is not None and done % 256 == 0:
            progress("verify", done, len(streams))
    if progress is not None:
        progress("verify", len(streams), len(streams))
    gate = asyncio.Semaphore(max(1, concurrency))
    heads = await asyncio.gather(*(store.backend.head(a) for a in tags))
    present = [a for a, h in zip(tags, heads, strict=True) if h]
    # the target's own streams (its audit log) are kept: the backup's copy is left out
    kept = [a for a in present if a[:1] == "\x01"]
    for agent_id in kept:
        del tags[agent_id]
    present = [a for a in present if a[:1] != "\x01"]
    if present and skip_existing:
        for agent_id in present:
            del tags[agent_id]
    elif present:
        raise BackupError(
            f"the target store already holds {len(present)} of the agents (e.g."
            f" {present[0]!r}): restore into an empty store, or delete them first"
        )
    written = 0

    async def one(agent_id: str) -> None:
        nonlocal written
        async with gate:
            await _write(store, agent_id, streams[agent_id], tags[agent_id])
        written += 1
        if progress is not None and written % 256 == 0:
            progress("write", written, len(tags))

    await asyncio.gather(*(one(a) for a in tags))
    if progress is not None:
        progress("write", len(tags), len(tags))
    result = RestoreResult(
        len(tags),
        sum(len(streams[a].events) for a in tags),
        sum(streams[a].snapshot is not None for a in tags),
        forgotten,
        len(present) if skip_existing else 0,
        ids,
        time.perf_counter() - started,
        kept,
    )
    details: dict[str, Any] = {
        "backups": ids,
        "agents": result.agents,
        "forgotten": len(forgotten),
    }
    if kept:
        details["kept_target_streams"] = len(kept)
    await emit(audit, GovernanceEvent("restore", None, "ok", details=details))
    return result
