"""Whether a stored snapshot was folded from the stream it is read with.

A snapshot carries the chain link of the event at its seq. The events after it are
checked against that link as they are folded onto it, and a load at the head checks
the head tag; a load at the snapshot's own seq below the head has neither. A deleted
stream's snapshot can outlive the delete — on S3 an append's snapshot object follows
its commit, and any ``save_snapshot`` in flight can land after the delete listed the
agent's objects — and once the agent is re-created it sits at a seq the new stream has
too: :func:`snapshot_in_stream` tells it apart by the event stored at that seq.
"""

from __future__ import annotations

from ..backends.base import Backend
from ..codec import Codec
from ..errors import IntegrityError, SerializationError


async def snapshot_in_stream(
    backend: Backend, codec: Codec, agent_id: str, seq: int, link: bytes | None
) -> bool:
    """Whether a snapshot at ``seq`` carrying the chain link ``link`` belongs to the
    agent's stream as stored: the event at ``seq`` has that link. A version-0
    snapshot (no link), or one whose event is gone (the base of a compacted stream:
    the only state there is), passes; so does one whose event cannot be read or does
    not verify (the snapshot verified: it is served as before, and ``verify`` names
    the damage)."""
    if link is None:
        return True
    try:
        raws = await backend.read(agent_id, seq - 1, seq, limit=1)
        if not raws or raws[0].seq != seq:
            return True
        raw = raws[0]
        _, opened = codec.decode(agent_id, seq, raw.type, raw.timestamp, raw.payload, raw.checksum)
    except (IntegrityError, SerializationError):
        return True  # (a damaged event: the verified snapshot is the state there is)
    return opened.link == link


async def check_in_stream(
    backend: Backend, codec: Codec, agent_id: str, link: bytes | None, seq: int
) -> None:
    """:func:`snapshot_in_stream`, or :class:`IntegrityError` (the fold then passes the
    snapshot over, as a damaged one)."""
    if not await snapshot_in_stream(backend, codec, agent_id, seq, link):
        raise IntegrityError(agent_id, seq, "snapshot is another stream's (its event differs)")
