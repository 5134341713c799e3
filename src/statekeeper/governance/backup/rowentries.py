"""The row path's stream entries (format version 1): each agent's records read from
the engine up to the backup's cut, as the entry :mod:`.writer` packs (see its module
documentation: the cut, incremental entries, streams compacted by retention)."""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any

from ...backends.base import Capability
from ...errors import BackupError

if TYPE_CHECKING:
    from ...backends.base import Backend
    from ...records import SnapshotRow, StreamRows

__all__ = ["add_unlisted", "copy_batch", "last_digest", "list_heads", "mark_compacted"]

_log = logging.getLogger("statekeeper.backup")

_LIST_PAGE = 1000


async def list_heads(backend: Backend, prefix: str = "") -> dict[str, int]:
    """Every stream's head, or (``prefix``: ``"ns/"``) those of one namespace and
    below (ids are listed in order, so the listing starts at the prefix and stops
    past it)."""
    heads: dict[str, int] = {}
    after: str | None = prefix or None
    while True:
        page = await backend.list_agents(after=after, limit=_LIST_PAGE)
        for info in page:
            if not info.agent_id.startswith(prefix):
                return heads
            heads[info.agent_id] = info.head_seq
        if len(page) < _LIST_PAGE:
            return heads
        after = page[-1].agent_id


async def add_unlisted(backend: Backend, prefix: str, heads: dict[str, int]) -> None:
    """Add to ``heads`` the streams (under ``prefix``) the engine stores and its listings
    do not show (``Backend.unlisted_agents``: Redis's off its agent index), so a backup
    keeps them (before, it left them out without a word and a restore lost them); a
    warning names them (``verify`` reports them too)."""
    found = [a for a in await backend.unlisted_agents() if a.startswith(prefix) and a not in heads]
    for agent_id in found:
        head = await backend.head(agent_id)
        if head:
            heads[agent_id] = head
    if found:
        shown = ", ".join(repr(a) for a in found[:5]) + (", ..." if len(found) > 5 else "")
        _log.warning(
            "backing up %d stream(s) the agent index does not list (verify names them): %s",
            len(found),
            shown,
        )


def last_digest(checksum: bytes) -> str:
    return hashlib.sha256(checksum).hexdigest()


def _entry(
    export: StreamRows,
    cut: int,
    previous: dict[str, Any] | None,
    base_snapshot: SnapshotRow | None = None,
) -> list[Any] | None:
    """One agent's stream entry, ``[agent, base, head, tag, events, snapshot, keys]``
    (and, for a stream compacted by retention copied whole, an 8th element: its base
    snapshot), from an export of ``base..cut`` (None: the export is not a gap-free
    slice ending at ``cut``, or a compacted stream's base is not ``base_snapshot``: the
    stream changed under the read). Records stay the stored bytes, as the rows came
    (tuples pack as msgpack arrays, as lists do)."""
    base = previous["head"] if previous is not None and 0 < previous["head"] <= cut else 0
    raw = export.events
    start = base
    if base:
        assert previous is not None
        if raw and raw[0][0] == base and _same_head(raw[0], previous, export, cut):
            raw = raw[1:]
        else:
            return None
    elif raw and raw[0][0] > 1:  # compacted by retention: it starts after its base
        start = raw[0][0] - 1
        if base_snapshot is None or base_snapshot[0] != start:
            return None
    if len(raw) != cut - start or (raw and (raw[0][0] != start + 1 or raw[-1][0] != cut)):
        return None
    snap = export.snapshot
    keys = export.keys
    entry = [
        export.agent_id,
        base,
        cut,
        export.head_tag if export.head_tag is not None and export.head == cut else None,
        raw,
        snap if snap is not None and snap[0] > base else None,
        # (and, of a compacted stream copied whole, the records its compaction kept:
        # also those of the appends it removed, or cut in two, starting at or below it)
        [k for k in keys if base < k[1] and k[2] <= cut] if keys else [],
    ]
    if start > base:
        entry.append(base_snapshot)
    return entry


def _same_head(record: Any, previous: dict[str, Any], export: StreamRows, cut: int) -> bool:
    """Whether ``record`` (at the parent's head) is the parent's: by its checksum's
    digest (``last``), or for a parent that names its head by tag (versions 5, 6) by
    the stream's unchanged head and tag."""
    if previous["last"]:
        return bool(last_digest(record[4]) == previous["last"])
    tag = previous.get("tag")
    same = cut == previous["head"] == export.head and export.head_tag == tag
    return tag is not None and bool(same)


async def _base_snapshot(backend: Backend, agent_id: str, export: StreamRows) -> SnapshotRow | None:
    """The base snapshot of a stream compacted by retention (its first event's seq
    minus one), or None (not compacted, or the snapshot is not there any more)."""
    events = export.events
    if not events or events[0][0] <= 1:
        return None
    raw = await backend.latest_snapshot(agent_id, events[0][0] - 1)
    if raw is None:
        return None
    return (raw.seq, raw.timestamp, bytes(raw.payload), bytes(raw.checksum))


async def copy_batch(
    backend: Backend, batch: list[tuple[str, int]], previous: dict[str, Any]
) -> list[list[Any] | None]:
    """Entries for ``(agent, cut)`` pairs; an agent whose stream changed under the
    read (deleted, re-created, compacted) is read again at its current head, or is
    None (gone). An incremental entry of a stream whose compaction base moved since
    the parent (retention ran in between) is a whole copy from its new base: the
    restore then rebuilds it as the source holds it, history before the base gone."""
    ranges = []
    prevs: list[dict[str, Any] | None] = []
    if previous and backend.supports(Capability.PRUNE):
        bases = await backend.stream_bases([a for a, _ in batch])
    else:
        bases = [0] * len(batch)
    for (agent_id, cut), now in zip(batch, bases, strict=True):
        prev = previous.get(agent_id)
        if prev is not None and prev.get("compacted", 0) != now:
            prev = None  # the base moved: copied whole, from the new base
        elif prev is not None and not prev.get("last") and prev["head"] != cut:
            # the parent names its head by tag (versions 5, 6), not by the record there:
            # an unchanged stream is known by its tag, a changed one copied whole
            prev = None
        prevs.append(prev)
        base = prev["head"] if prev is not None and 0 < prev["head"] <= cut else 0
        ranges.append((agent_id, base, cut))
    exports = await backend.export_rows(ranges)
    out: list[list[Any] | None] = []
    for (agent_id, cut), export, prev in zip(batch, exports, prevs, strict=True):
        compacted = prev is None and export.events and export.events[0][0] > 1
        based = await _base_snapshot(backend, agent_id, export) if compacted else None
        entry = _entry(export, cut, prev, based)
        attempts = 0
        while entry is None:  # deleted, re-created or compacted under the read
            attempts += 1
            if attempts > 3:
                raise BackupError(
                    f"agent {agent_id!r} kept changing under the backup (deleted and"
                    " re-created, or compacted)"
                )
            cut = await backend.head(agent_id)
            if cut == 0:
                break  # gone: counted as vanished
            (export,) = await backend.export_rows([(agent_id, 0, cut)])
            based = await _base_snapshot(backend, agent_id, export)
            entry = _entry(export, cut, None, based)  # copied whole
        out.append(entry)
    return out


def mark_compacted(stream: dict[str, Any], entry: list[Any], previous: Any) -> None:
    """The manifest's record of a stream compacted by retention: ``compacted`` (its
    base seq) and ``base_digest`` (SHA-256 of the base snapshot's checksum, which
    carries the chain link there), from the entry's base snapshot, or carried over
    from the parent (an incremental entry continuing the same compacted stream)."""
    if len(entry) > 7:
        base = entry[7]
        stream["compacted"] = base[0]
        stream["base_digest"] = last_digest(base[3])
    elif entry[1] and previous is not None and previous.get("compacted"):
        stream["compacted"] = previous["compacted"]
        stream["base_digest"] = previous["base_digest"]
