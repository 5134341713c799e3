"""The entries of a backup file, one at a time, each checked against its manifest.

Shared by :func:`~.restore.restore` (both of its passes read the files through
:func:`read_entries`) and by anyone inspecting a backup (:func:`iter_entries`). Every
layout yields the same entry, ``[agent_id, base, head, tag, events, snapshot, keys]``
(a stream compacted by retention: an 8th element, its base snapshot), records as
stored (encrypted): a version-1 file's chunks checked here, a store copy's
(:mod:`.filecopy`, :mod:`.pgcopy`) and a rebuilt page image's by their modules.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any

from ...errors import BackupCorrupt, BackupError
from .filecopy import file_entries, image_entries
from .fileformat import FILE_IMAGES, PAGE_DELTAS, VERSION_COPY, BackupKey, FrameReader
from .pgcopy import copy_entries
from .writer import pack_entry, stream_digest

__all__ = ["check_base", "iter_entries", "read_entries"]


def read_entries(
    reader: FrameReader, chunk_streams: dict[str, Any], image: str | None = None
) -> Iterator[tuple[int, Any]]:
    """``(chunk index, entry)`` of one file, each checked against the manifest (a
    version-2 file: its store copy's streams, grouped, see :mod:`.filecopy`; the last
    file of a run of page backups: the ``image`` rebuilt from the run, :mod:`.pagechain`)."""
    if image is not None:
        yield from image_entries(reader, image)
        return
    if reader.header.version in PAGE_DELTAS:
        raise BackupError(
            f"backup {reader.path} is an incremental backup by pages: restore it with its"
            " full backup and every incremental before it, in order"
        )
    if reader.header.version in FILE_IMAGES:
        yield from file_entries(reader)
        return
    if reader.header.version == VERSION_COPY:
        yield from copy_entries(reader)
        return
    path = reader.path
    seen: set[str] = set()
    for index, chunk in enumerate(reader.chunks()):
        if not isinstance(chunk, list):
            raise BackupCorrupt(path, f"chunk {index}", "malformed")
        for item in chunk:
            try:
                agent_id, base, head, _tag, events, _snapshot, _keys = item[:7]
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
            start = check_base(path, agent_id, item, entry)
            if [e[0] for e in events] != list(range(start + 1, head + 1)):
                raise BackupCorrupt(path, what, "the stream has a gap")
            yield index, item
    missing = [a for a, e in chunk_streams.items() if e["chunk"] is not None and a not in seen]
    if missing:
        raise BackupCorrupt(
            path, f"agent {missing[0]!r}", "listed in the manifest, not in any chunk"
        )


def check_base(path: str, agent_id: str, item: list[Any], listed: dict[str, Any]) -> int:
    """Where the entry's events start after (its base, or for a stream compacted by
    retention copied whole, its compaction base), checked against the manifest: a
    compacted stream's base seq and base snapshot digest must be the manifest's, and
    an entry the manifest calls compacted must carry its base snapshot."""
    what = f"agent {agent_id!r}"
    compacted = listed.get("compacted", 0)
    if len(item) == 7:
        if compacted and not item[1]:
            raise BackupCorrupt(path, what, "its base snapshot (compacted stream) is missing")
        return int(item[1])
    base = item[7]
    if len(item) != 8 or item[1] or not isinstance(base, list | tuple) or len(base) != 4:
        raise BackupCorrupt(path, what, "malformed entry (base snapshot)")
    if base[0] != compacted or _digest(base[3]) != listed.get("base_digest"):
        raise BackupCorrupt(
            path, what, "its base snapshot (compacted stream) differs from the manifest's"
        )
    if not 0 < base[0] < item[2]:
        raise BackupCorrupt(path, what, f"base seq {base[0]} is not below its head {item[2]}")
    return int(base[0])


def _digest(checksum: Any) -> str:
    return hashlib.sha256(checksum).hexdigest() if isinstance(checksum, bytes) else ""


def iter_entries(path: str | os.PathLike[str], key: BackupKey) -> Iterator[Any]:
    """The entries of one backup file, one at a time, each checked against its manifest
    (for inspecting a backup: ``[agent_id, base, head, tag, events, snapshot, keys]``,
    records as stored — encrypted)."""
    reader = FrameReader(path, key)
    try:
        for _, item in read_entries(reader, reader.streams):
            yield item
    finally:
        reader.close()
