"""Delete an agent as it was shown: ``statekeeper delete`` (after its question) and the
inspector's *Delete* form (after its page) delete only the stream whose head they
showed — never a write made since (the head moved on), nor another stream under the
same id (deleted and made again since, even up to the same head).

What was shown is the head event's identity: its seq, time and stored checksum
(:func:`head_identity`, read raw: a damaged agent can still be deleted), carried as
the seq and a short digest of the three (:func:`identity_mark`: what a page holds,
never the checksum itself). :func:`delete_shown` reads the head's identity again
just before the delete and compares; the delete itself is then conditional on the
head event (:func:`~statekeeper.store.conditional.delete_only_at`: its seq and stored
checksum, compared by the engine in the delete's own commit), so neither a write
landing after that read nor a stream deleted and made again to the same seq since is
deleted.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConflictError
from ..records import RawEvent
from .conditional import delete_only_at
from .namespaced import stored_id

if TYPE_CHECKING:
    from . import StateStore

__all__ = ["Identity", "Moved", "delete_shown", "head_identity", "identity_at", "identity_mark"]

#: what tells one stream's head from another's at the same seq: its event's seq, time
#: and checksum (None: no stream)
Identity = tuple[int, float, bytes] | None


def _of(event: RawEvent | None) -> Identity:
    return None if event is None else (event.seq, event.timestamp, event.checksum)


async def head_identity(store: StateStore, agent_id: str) -> Identity:
    """The identity of ``agent_id``'s head event as stored (read raw)."""
    heads = await store.backend.read_heads([stored_id(store, agent_id)])
    return _of(heads[0] if heads else None)


async def identity_at(store: StateStore, agent_id: str, seq: int) -> Identity:
    """The identity of ``agent_id``'s stored event at ``seq`` (None: there is none):
    what a page showing the agent at head ``seq`` shows."""
    if seq < 1:
        return None
    raw = await store.backend.read(stored_id(store, agent_id), after_seq=seq - 1, to_seq=seq)
    return _of(raw[0] if raw and raw[0].seq == seq else None)


def identity_mark(identity: Identity) -> str:
    """A short digest (16 hex digits) of ``identity``; "" for None."""
    if identity is None:
        return ""
    seq, timestamp, checksum = identity
    return hashlib.sha256(f"{seq}:{timestamp!r}:".encode() + checksum).hexdigest()[:16]


@dataclass(frozen=True)
class Moved:
    """Nothing deleted: the agent is no longer as it was shown."""

    #: its head seq now
    head: int
    #: deleted and made again since it was shown, up to the head shown (a new stream)
    remade: bool


async def delete_shown(store: StateStore, agent_id: str, head: int, mark: str) -> bool | Moved:
    """Delete ``agent_id`` only if its head is still the event shown: seq ``head``
    (>= 1) with :func:`identity_mark` ``mark``. True: deleted; False: it has no
    stream any more (nothing to delete); :class:`Moved`: nothing deleted, it was
    written (or deleted and made again) since it was shown."""
    now = await head_identity(store, agent_id)
    if now is not None and (now[0] != head or identity_mark(now) != mark):
        return Moved(now[0], remade=now[0] == head)
    # the delete itself conditional on that head event (its seq and stored checksum): a
    # stream deleted and made again to the same seq after the read above has another
    # checksum (it covers the time and every record before; an encrypted record's tag
    # a random nonce) and is not deleted either
    try:
        with delete_only_at(head, None if now is None else now[2]):  # (gone: False)
            return await store.delete(agent_id)
    except ConflictError as exc:  # written, or deleted and made again, after the read
        if exc.agent_id != agent_id:  # (another stream's: that failure, not a move)
            raise
        return Moved(exc.current_seq, remade=now is not None and exc.current_seq == head)
