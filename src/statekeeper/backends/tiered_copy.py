"""Copying an agent's stream between the tiers of
:class:`~statekeeper.backends.tiered.TieredBackend` (a demotion, a rehydration, a hot
fill): its events page by page, its idempotency keys, its snapshots, and a compacted
stream with its base."""

from __future__ import annotations

import secrets

from ..errors import ConflictError, IntegrityError
from ..records import AppendRequest, RawEvent, RawSnapshot, StreamChange
from .base import Backend, Capability, KeptKeys, takes_from_base_guard
from .tiered_base import PAGE

__all__ = ["append_copy", "base_of", "copy_stream", "snapshots"]


async def copy_stream(
    src: Backend,
    dst: Backend,
    agent_id: str,
    head: int,
    *,
    all_snapshots: bool,
    wrote: list[RawEvent] | None = None,
    guard: StreamChange | None = None,
) -> None:
    """Append the agent's events 1..head from ``src`` to (empty) ``dst``, keeping the
    idempotency keys (when both tiers can list them) and the snapshots; ``wrote`` gets
    the last record of each page appended.

    Each page goes only onto this copy's page before it, never onto another copy that
    reached the same seq meanwhile (a demotion whose claim was ended under it, the agent
    deleted and another of that id demoted since: its next page landed on that one's
    finished copy — even one of the same records — whose marker names a lower head, so
    every load of that agent raised ``IntegrityError``, its data unreadable). Each page
    but the last carries a head tag of this copy's own (the last, the source's); where
    ``dst`` compares head tags a page is appended only while the head carries it, in
    the append's compare-and-set; elsewhere (S3) the head tag is read and compared just
    before each append — a window of one round trip left.
    :class:`~statekeeper.errors.ConflictError` when the head is another's.

    ``guard`` (a check of another stream of ``dst``, made with ``append_together``):
    each page lands only in one commit with it, else a
    :class:`~statekeeper.errors.ConflictError` and nothing of that page written — a
    rehydration's pages only while the marker is still the claim it copies under (a
    delete of the agent deletes the marker before the stream: a page committed under
    the claim is deleted with the stream). The first page of a compacted stream (its
    base) too, in ``append_from_base``'s own commit (``guard=``: an engine with
    ``guards_from_base``; was: appended alone, unguarded — a delete acknowledged before
    it landed was undone, the deleted agent back whole)."""
    keyed: dict[int, tuple[str, int]] = {}
    kept: list[tuple[str, int, int]] = []  # (records of the appends a prune removed or cut in two)
    why = f"copying agent {agent_id!r} between tiers keeps its idempotency keys"
    src.require(Capability.KEY_EXPORT, why)
    dst.require(Capability.KEY_EXPORT, why)
    base = await base_of(src, agent_id)
    seq = 0 if base is None else base.seq
    cut = 0  # the last seq of an append a prune cut in two (0: none)
    for name, first, last in await src.idempotency_keys(agent_id):
        if first <= seq:  # a prune removed its events (or those up to the base): its
            kept.append((name, first, last))  # record is written with the base, whole
            cut = max(cut, last if last > seq else 0)
            continue
        keyed[first] = (name, last)
    starts = sorted(keyed)
    tag_head, tag = await src.head_tag(agent_id)
    if tag_head != head:
        raise IntegrityError(agent_id, head, f"head moved to {tag_head} while copying tiers")
    chained = dst.compares_head_tag
    own = secrets.token_bytes(16)  # this copy's head tag until its last page
    after = False  # a page of this copy is below the next one
    while seq < head:
        key: str | None = None
        if seq + 1 in keyed:
            key, end = keyed[seq + 1]
            events = await src.read(agent_id, seq, end)
        elif cut > seq:  # the rest of an append a prune cut in two: in the first page
            events = await src.read(agent_id, seq, cut)
        else:
            nxt = next((s for s in starts if s > seq + 1), head + 1)
            events = await src.read(agent_id, seq, min(nxt - 1, head), limit=PAGE)
        if not events or events[0].seq != seq + 1:
            raise IntegrityError(agent_id, seq + 1, "stream has a gap while copying tiers")
        last = events[-1].seq == head
        if after and not chained:
            held = await dst.head_tag(agent_id)
            if held != (seq, own):
                raise ConflictError(agent_id, seq, held[0])
        await append_copy(
            dst,
            AppendRequest(
                agent_id,
                seq,
                tuple(events),
                None,
                key,
                head_tag=tag if last else own,
                expected_tag=own if after else None,
                check_tag=chained and after,
            ),
            base,
            kept,
            guard,
        )
        if wrote is not None:
            wrote.append(events[-1])
        after = True
        seq = events[-1].seq
    for snap in await snapshots(src, agent_id, all_snapshots=all_snapshots):
        await dst.save_snapshot(agent_id, snap)


async def base_of(src: Backend, agent_id: str) -> RawSnapshot | None:
    """The base snapshot of a compacted stream (None: a whole stream)."""
    (base_seq,) = await src.stream_bases([agent_id])
    if base_seq == 0:
        return None
    base = await src.latest_snapshot(agent_id, base_seq)
    if base is None or base.seq != base_seq:
        raise IntegrityError(agent_id, base_seq, "a compacted stream without its base snapshot")
    return base


async def append_copy(
    dst: Backend,
    request: AppendRequest,
    base: RawSnapshot | None,
    kept: KeptKeys,
    guard: StreamChange | None = None,
) -> None:
    """Append a copied page; the first one of a compacted stream with its base (and
    the idempotency records ``kept`` of the appends its prune removed); each in one
    commit with ``guard``, when given (the base page alone where ``dst`` takes no
    guard with a base: an engine written before ``guards_from_base``, or an override
    written before it: :func:`~.base.takes_from_base_guard`)."""
    if base is not None and request.expected_seq == base.seq:
        if guard is not None and takes_from_base_guard(dst):
            await dst.append_from_base(request, base, kept, guard=guard)
        elif kept:
            await dst.append_from_base(request, base, kept)
        else:  # (older engines too)
            await dst.append_from_base(request, base)
    elif guard is not None:
        await dst.append_together([request], [guard])
    else:
        await dst.append(request)


async def snapshots(
    src: Backend, agent_id: str, *, all_snapshots: bool = True
) -> list[RawSnapshot]:
    """The agent's snapshots in ``src``, oldest first (only the latest unless ``all``)."""
    snaps: list[RawSnapshot] = []
    below: int | None = None
    while True:
        snap = await src.latest_snapshot(agent_id, below)
        if snap is None:
            break
        snaps.append(snap)
        if not all_snapshots or snap.seq <= 1:
            break
        below = snap.seq - 1
    snaps.reverse()
    return snaps
