"""The heads of a whole SQLite store's page backup as its head tags (format versions
5 and 6, see :mod:`.fileformat`): one scan of the heads table, no probe of the events.

A stream's head tag (``sk_agents.head_tag``: ``0x01 ‖ L ‖ key id ‖ HMAC-SHA256(head
key, "sk-head/1" ‖ agent ‖ seq ‖ link)``, keyless ``0x01 ‖ 0x00 ‖ link``, where
``link`` is the head record's chain link) authenticates the stream's head with the
store's keys; the restore follows every chain with the target's keys anyway, so it
checks each tag against the link it reaches (:mod:`.restore`). The head record's
checksum (what versions 2 to 4 list) costs an index probe and a table probe of the
events per stream: 0.15-0.17 CPU-s of a 100,000-agent backup's ~0.65 (docs/benchmarks.md,
"backupcpu"); the heads table alone is one scan (~0.02).
"""

from __future__ import annotations

import sqlite3
import struct
from bisect import bisect_left
from collections.abc import Iterable
from operator import itemgetter
from typing import Any, NamedTuple, cast

import orjson

from ...arguments import INTERNAL_PREFIX

__all__ = [
    "COUNTS",
    "TAG_COLUMNS",
    "PackedHeads",
    "Scanned",
    "TagHeads",
    "internal_streams",
    "internal_streams_sorted",
    "tag_head_columns",
    "tag_heads",
]

#: every stream's agent, head seq and head tag, each column joined into one value by
#: SQLite (no Python tuple per stream); the streams whose tag is not as long as the
#: first stream's (NULL: a stream written before head tags; another length: another
#: key id) counted by a filter, not aggregated (one aggregate step per stream less than
#: a count of the tags and their shortest and longest length: the statement -25 % CPU,
#: docs/benchmarks.md "backup2"), and the first tag's length (the subquery runs once);
#: and the sum of the head seqs (the events the streams account for: a stream compacted
#: by retention holds fewer), so that the heads table is scanned once per backup, not
#: once more by the totals (:data:`COUNTS`)
TAG_COLUMNS = """
WITH first(width) AS (
  SELECT length(CAST(head_tag AS BLOB)) FROM sk_agents WHERE head_seq > 0 LIMIT 1
)
SELECT count(*), group_concat(agent_id, char(0)), group_concat(head_seq),
       CAST(group_concat(CAST(head_tag AS BLOB), '') AS BLOB),
       count(*) FILTER (WHERE length(CAST(head_tag AS BLOB)) IS NOT (SELECT width FROM first)),
       (SELECT width FROM first), coalesce(sum(head_seq), 0)
FROM sk_agents WHERE head_seq > 0
"""
#: the events stored and the streams with a snapshot: the totals
#: (:data:`~statekeeper.backends.sqlite.export.STREAM_TOTALS` without its scan of the
#: heads table, which :data:`TAG_COLUMNS` sums)
COUNTS = """
SELECT (SELECT count(*) FROM sk_events), (SELECT count(DISTINCT agent_id) FROM sk_snapshots)
"""

_ROWS = """
SELECT agent_id, head_seq, CAST(head_tag AS BLOB) FROM sk_agents
WHERE head_seq > 0 ORDER BY agent_id
"""

_first = itemgetter(0)

_HEAD_CHECKSUM = """
SELECT CAST(checksum AS BLOB) FROM sk_events WHERE agent_id = ? AND seq = ?
"""


#: the heads table scanned from a snapshot's pages: agents, head seqs, head tags (all
#: of one length) and the sum of the head seqs
Scanned = tuple[list[str], list[int], list[bytes], int]


class PackedHeads:
    """The manifest's ``heads`` columns (agent, head seq, head tag of every stream, in
    id order) as the C scan packed them from a page snapshot's pages
    (:meth:`~statekeeper.backends.sqlite.pages.PageSnapshot.packed_heads`): no Python
    object per stream. Only a map holding it is packed, by splicing the bytes packed
    ahead in (:func:`.framepack.packb`); msgpack itself refuses it (a ``TypeError``,
    never other bytes). ``own``: the store's own streams among them, ``(agent, head)``
    in id order."""

    __slots__ = ("count", "own")

    def __init__(self, count: int, own: tuple[tuple[str, int], ...]) -> None:
        self.count = count
        self.own = own


class TagHeads(NamedTuple):
    """The heads of a snapshot's streams, as the manifest lists them (see
    :func:`tag_heads`)."""

    agents: list[str]
    heads: list[int]
    tags: list[bytes | None]
    untagged: dict[str, list[Any]]
    #: the sum of the head seqs: the events the streams account for
    accounted: int


def tag_head_columns(
    conn: sqlite3.Connection,
) -> tuple[list[str], list[int], list[bytes | None], dict[str, list[Any]]]:
    """The manifest's ``heads`` columns (agent, head seq, head tag: id order) and its
    ``untagged`` ones (agent, head record checksum) for the streams without a tag, read
    through ``conn`` (the page image's snapshot)."""
    return tag_heads(conn)[:4]


def tag_heads(conn: sqlite3.Connection, scanned: Scanned | None = None) -> TagHeads:
    """:func:`tag_head_columns` and the sum of the head seqs, from one scan of the
    heads table; ``scanned``: that scan made already, from the snapshot's pages (a
    page backup's, :meth:`~statekeeper.backends.sqlite.pages.PageSnapshot.heads`:
    what the statement's fast path below gives, without SQLite's VM or a split)."""
    if scanned is not None:
        return _from_scan(scanned)
    streams, ids, seqs, tags, other_width, width, accounted = conn.execute(TAG_COLUMNS).fetchone()
    untagged: dict[str, list[Any]] = {"agent": [], "checksum": []}
    if streams == 0:
        return TagHeads([], [], [], untagged, 0)
    agents: list[str] = ids.split("\0")
    width = width or 0
    if other_width == 0 and streams == len(agents) and width > 0 and len(tags) == streams * width:
        # the seqs parsed as one JSON array, the tags cut by struct: in C, no Python
        # step per stream (0.008 -> 0.002 and 0.011 -> 0.008 CPU-s for 100,000 heads,
        # docs/benchmarks.md "backupsix")
        heads: list[int] = orjson.loads("[" + seqs + "]")
        found: list[bytes | None]
        found = _cut(tags, width)
        if sorted(agents) == agents:  # the heads table's key order, checked in one pass
            return TagHeads(agents, heads, found, untagged, accounted)
    # tags of several lengths (key ids), a stream without one, or not in id order
    agents, heads, found = [], [], []
    for agent_id, head, tag in conn.execute(_ROWS):
        agents.append(agent_id)
        heads.append(head)
        found.append(tag)
        if tag is None:
            row = conn.execute(_HEAD_CHECKSUM, (agent_id, head)).fetchone()
            untagged["agent"].append(agent_id)
            untagged["checksum"].append(row[0] if row is not None and row[0] else b"")
    return TagHeads(agents, heads, found, untagged, accounted)


def _from_scan(scanned: Scanned) -> TagHeads:
    """The heads ``scanned`` (every tag a bytes: the list taken as it is, no copy)."""
    agents, heads, tags, accounted = scanned
    untagged: dict[str, list[Any]] = {"agent": [], "checksum": []}
    return TagHeads(agents, heads, cast("list[bytes | None]", tags), untagged, accounted)


#: tags cut by one struct unpack per this many: one tuple per group, not per tag
_GROUP = 512


def _cut(tags: bytes, width: int) -> list[bytes | None]:
    """``tags`` (``width`` bytes each) as a list: :data:`_GROUP` tags per unpack (a
    1-tuple per tag, made, indexed and freed, was 0.2 of the split's 1.2 k
    instructions a stream, docs/benchmarks.md "backup2"), the rest one by one."""
    found: list[bytes | None] = []
    whole = len(tags) - len(tags) % (width * _GROUP)
    view = memoryview(tags)
    for group in struct.Struct(f"{width}s" * _GROUP).iter_unpack(view[:whole]):
        found.extend(group)
    found.extend(map(_first, struct.Struct(f"{width}s").iter_unpack(view[whole:])))
    return found


def internal_streams(stream_ids: Iterable[object]) -> tuple[str, ...]:
    """The store's own streams (not agents) among ``stream_ids``, sorted. The ids joined
    by NUL and the prefix found in the joined text (a ``startswith`` per id parsed its
    arguments: 26 M instructions for 100,000 ids, docs/benchmarks.md "backup2")."""
    ids = list(stream_ids)
    try:
        joined = "\0" + "\0".join(ids) + "\0"  # type: ignore[arg-type]
    except TypeError:  # an id that is not a string
        joined = ""
    if not joined or joined.count("\0") != len(ids) + 1:  # (or an id holding a NUL)
        return tuple(sorted(a for a in ids if isinstance(a, str) and a.startswith(INTERNAL_PREFIX)))
    own, at = [], joined.find(_MARK)
    while at >= 0:
        end = joined.index("\0", at + 1)
        own.append(joined[at + 1 : end])
        at = joined.find(_MARK, end)
    return tuple(sorted(own))


_MARK = "\0" + INTERNAL_PREFIX


def internal_streams_sorted(stream_ids: list[str]) -> tuple[str, ...]:
    """:func:`internal_streams` of ids in code-point order (what :func:`tag_heads`
    returns: checked, or SQLite's ``ORDER BY`` of a BINARY column, the same order
    for UTF-8): those ids are one run, found by two bisections (the join and the
    search over 100,000 ids cost 5-8 ms, docs/benchmarks.md "backup3")."""
    first = bisect_left(stream_ids, INTERNAL_PREFIX)
    return tuple(stream_ids[first : bisect_left(stream_ids, _PAST, first)])


#: the least string after every string starting with the prefix
_PAST = INTERNAL_PREFIX[:-1] + chr(ord(INTERNAL_PREFIX[-1]) + 1)
