"""The byte framing of a snapshot stored as one blob (Redis hash fields, S3 objects).

``pack_snapshot`` writes ``timestamp, len(checksum)`` then the checksum and the
payload; ``unpack_snapshot`` reads it back. A blob cut short inside the framing is
handed up with an empty checksum rather than raising here, so the store's
verification rejects it like any other damaged snapshot and falls back past it.
"""

from __future__ import annotations

import struct

from ..records import RawSnapshot

_HEAD = struct.Struct(">dH")  # ts, len(checksum); then checksum, payload


def pack_snapshot(snapshot: RawSnapshot) -> bytes:
    head = _HEAD.pack(snapshot.timestamp, len(snapshot.checksum))
    return head + snapshot.checksum + snapshot.payload


def unpack_snapshot(seq: int, blob: bytes) -> RawSnapshot:
    at = _HEAD.size
    if len(blob) < at:
        return RawSnapshot(seq, 0.0, blob, b"")
    ts, nsum = _HEAD.unpack_from(blob)
    if len(blob) < at + nsum:
        return RawSnapshot(seq, 0.0, blob, b"")
    return RawSnapshot(seq, ts, blob[at + nsum :], blob[at : at + nsum])
