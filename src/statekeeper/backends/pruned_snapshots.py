"""A rewrite's snapshots below the stream's pruned base (see :meth:`Backend.rewrite
<statekeeper.backends.base.Backend.rewrite>`).

A prune to base ``b`` removes the events up to ``b`` and the snapshots below ``b``; it
keeps the snapshot AT ``b`` (the only record of the state there), which a rewrite
replaces like any stored one. A rewrite planned before the prune (a key rotation, a
migration, a redaction) may still carry a snapshot below ``b``: every engine refuses it,
inside the step that compares the head, before writing any of the rewrite — written
back, it would bring pruned state (maybe personal data retention removed) back, and no
error would say so."""

from __future__ import annotations

from statekeeper.errors import RewriteBelowPrunedBase
from statekeeper.records import RewriteRequest

from .base import unstored_rewrite

__all__ = ["lowest_pruned_snapshot", "pruned_snapshot_rewrite", "unstored_record"]


def lowest_pruned_snapshot(request: RewriteRequest, base: int) -> int | None:
    """The lowest seq of ``request``'s snapshots below ``base`` (the stream's, read in
    the rewrite's atomic step), None when there is none."""
    below = [snap.seq for snap in request.snapshots if snap.seq < base]
    return min(below) if below else None


def pruned_snapshot_rewrite(agent_id: str, seq: int, base: int) -> RewriteBelowPrunedBase:
    """The error of a rewrite carrying a snapshot of ``agent_id`` at ``seq``, below the
    stream's base ``base`` (pruned: the prune removed it)."""
    return RewriteBelowPrunedBase(agent_id, seq, base, "snapshot")


def unstored_record(
    agent_id: str, seq: bytes | int, base: bytes | int, what: bytes | str
) -> RewriteBelowPrunedBase:
    """The refusal a script replied as ``(seq, base, what)`` (Redis' rewrite_write.lua):
    ``what`` ``s`` a snapshot below the base, else an event not stored."""
    if what in (b"s", "s"):
        return pruned_snapshot_rewrite(agent_id, int(seq), int(base))
    return unstored_rewrite(agent_id, int(seq), int(base))
