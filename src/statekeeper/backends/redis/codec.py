"""How one event is framed in the agent's hash (``e:<seq>``): ``>dHH`` (timestamp,
length of the kind, length of the checksum), then the kind, the checksum and the
payload. The Lua scripts read the same framing (``rewrite.lua``, ``seq_at.lua``)."""

from __future__ import annotations

import struct

from ...records import RawEvent

__all__ = ["pack_event", "unpack_event"]

_EVENT_HEAD = struct.Struct(">dHH")  # ts, len(kind), len(checksum); then kind, checksum, payload


def pack_event(e: RawEvent) -> bytes:
    event_type = e.type.encode()
    return (
        _EVENT_HEAD.pack(e.timestamp, len(event_type), len(e.checksum))
        + event_type
        + e.checksum
        + e.payload
    )


def unpack_event(seq: int, blob: bytes) -> RawEvent:
    at = _EVENT_HEAD.size
    try:
        ts, nkind, nsum = _EVENT_HEAD.unpack_from(blob)
        event_type = blob[at : at + nkind].decode()
        if len(blob) < at + nkind + nsum:
            raise ValueError("cut short")
    except (struct.error, ValueError):
        # Damaged framing: no checksum, so the store's verification names agent and seq.
        return RawEvent(seq, "", 0.0, blob, b"")
    at += nkind
    checksum = blob[at : at + nsum]
    return RawEvent(seq, event_type, ts, blob[at + nsum :], checksum)
