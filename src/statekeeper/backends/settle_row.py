"""A settle's row (:mod:`statekeeper.store.settle`) stored only at the head's identity,
with the removal of the snapshot it replaces in the same commit, on every engine that
can check the head in the commit: :meth:`~.base.Backend.replace_snapshot` where the
engine overrides it (SQLite, Redis — a cluster too: one agent's keys, one hash slot —
and a tiered store over such a durable tier), else one ``append_together`` of a change
checked at the head (PostgreSQL, memory). An engine that can do neither (S3: no
commit spans the head's object and the snapshot's) stores no settle's row at all."""

from __future__ import annotations

from ..errors import ConfigurationError
from ..records import RawSnapshot, StreamChange
from .base import Backend

__all__ = ["settles_at_head", "store_at_head"]


def settles_at_head(backend: Backend) -> bool:
    """``backend`` commits a settle's row only while the head is the one settled (its
    seq and its event's stored checksum): :func:`store_at_head` can be called."""
    return backend.replaces_snapshots or (
        backend.appends_together
        and backend.changes_alone_together
        and backend.prunes_together_at_head
    )


async def store_at_head(
    backend: Backend,
    agent_id: str,
    raw: RawSnapshot,
    drop: int | None,
    head: int,
    checksum: bytes | None,
) -> bool:
    """Store ``raw`` (the head's whole row: at ``head``) and remove the snapshot at
    ``drop`` (None: none) in one commit, only while the head is ``head`` and its
    event's stored checksum ``checksum`` (given): else
    :class:`~statekeeper.errors.ConflictError`, nothing written. The removal is left
    out, the row still stored, when ``drop`` is the stream's base (another process
    compacted the stream to it since the caller looked: the only record of the state
    there) — through ``append_together`` a second commit, the row alone at the same
    identity, since the engine refuses that commit whole. True when ``drop`` was
    removed (or, sent again after a lost reply, may have been)."""
    if backend.replaces_snapshots:
        return await backend.replace_snapshot(agent_id, raw, drop, head, checksum)
    try:
        await backend.append_together((), [_at_head(agent_id, raw, head, checksum, drop)])
        return drop is not None
    except ConfigurationError:
        # (the prune's precondition: a drop naming the stream's base is refused, the
        # commit rolled back whole — the row too). No look at the base before the row
        # alone: its commit is checked at the head itself, and the stream may have moved
        # on since this refusal (deleted, made again, compacted further). Was: the row
        # stored only while the base read was still ``drop``, else this refusal raised
        # out of the settle — a drop the caller never asked for, for a stream moved
        # meanwhile (tests/store/test_settle_base_fallback_race.py). A refusal with
        # another cause refuses the row alone too.
        if drop is None:
            raise
    await backend.append_together((), [_at_head(agent_id, raw, head, checksum, None)])
    return False


def _at_head(
    agent_id: str, raw: RawSnapshot, head: int, checksum: bytes | None, drop: int | None
) -> StreamChange:
    """``raw`` stored (and the snapshot at ``drop`` removed) only while the head is
    still ``head`` and its event's stored checksum ``checksum``: a prune to 0, at that
    identity."""
    return StreamChange(
        agent_id,
        snapshot=raw,
        prune_to=0,
        drop_snapshots=() if drop is None else (drop,),
        prune_head=head,
        prune_checksum=checksum,
    )
