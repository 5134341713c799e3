"""A prune during a demotion, on a durable tier whose demotions are not fenced (no
``append_together``: a Redis cluster, S3) — :class:`~statekeeper.backends.tiered.TieredBackend`.

There a demotion's last step is a delete of the stream conditional on its head record
alone, and a prune keeps that record. Was: a prune made while a demotion was held before
that step was undone — the cold copy, made before the prune, became the agent (the
pruned history back at the next load, no error). Now:

* the demotion, its copy whole, makes its last step only while the stream's base is its
  copy's (:func:`same_base`): a prune committed before that look ends the demotion
  (False, the pruned stream kept);
* the prune, once committed, looks at the agent's marker: a demotion's, its cold copy
  whole — the stream's head record — is pruned the same way (:func:`prune_copy`),
  so a demotion whose look came before the prune demotes the pruned stream.

Either the demotion's look sees the prune, or the prune's look comes after the copy was
whole and prunes it. That look failing (the cold tier down) is told as a prune that
may stand (:func:`copy_not_pruned`). Left open: a key rename or a rewrite during such a
demotion (no equivalent on the cold copy here), and a prune whose cold tier cannot
prune (``docs/backends.md``)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from ..errors import BackendError, ConflictError
from .base import Backend, Capability
from .tiered_cold import record_digest

__all__ = ["copy_not_pruned", "prune_copy", "same_base"]


async def same_base(durable: Backend, cold: Backend, agent_id: str) -> bool:
    """Is the durable stream's base (:meth:`~.base.Backend.stream_bases`) its cold
    copy's?"""
    (held,) = await durable.stream_bases([agent_id])
    (copied,) = await cold.stream_bases([agent_id])
    return held == copied


async def prune_copy(
    durable: Backend,
    cold: Backend,
    agent_id: str,
    marker_head: int,
    base_seq: int,
    drop_snapshots: Sequence[int],
) -> None:
    """After a prune of ``agent_id`` to ``base_seq`` in ``durable``: its cold copy
    (a demotion's, its marker at ``marker_head``) pruned the same way while it is whole
    and its head record the durable stream's, or the stream gone (deleted by that
    demotion's last step since); the base snapshot copied there first if the copy
    lacks it. Nothing where ``cold`` cannot prune, or the copy is another's or not
    whole (a demotion still copying: its look at the base then ends it)."""
    if not cold.supports(Capability.PRUNE) or base_seq <= 0:
        return
    copied = await cold.read(agent_id, marker_head - 1, marker_head)
    if not copied or copied[0].seq != marker_head:
        return
    held = await durable.read(agent_id, marker_head - 1, marker_head)
    if held and (held[0].seq != marker_head or record_digest(held[0]) != record_digest(copied[0])):
        return
    (copy_base,) = await cold.stream_bases([agent_id])
    if copy_base >= base_seq:
        return
    there = await cold.latest_snapshot(agent_id, base_seq)
    if there is None or there.seq != base_seq:
        base = await durable.latest_snapshot(agent_id, base_seq)
        if base is None or base.seq != base_seq:
            return
        await cold.save_snapshot(agent_id, base)
    kept = [s for s in drop_snapshots if s > copy_base]
    with contextlib.suppress(ConflictError):  # (the copy changed meanwhile: not ours)
        await cold.prune(agent_id, base_seq, kept, marker_head, copied[0].checksum)


def copy_not_pruned(agent_id: str, exc: Exception) -> BackendError:
    """The error of a prune of ``agent_id`` committed in the durable tier whose look at a
    demotion's cold copy (:func:`prune_copy`) then failed with ``exc``: ``maybe_applied``
    (the caller drops the hot copy; retention tells the prune failed, and prunes again).
    Was: ``exc`` itself — maybe_applied False, "nothing was written" — so the hot copy
    was kept and served the pruned history on (its head and head tag unchanged)."""
    return BackendError(
        f"agent {agent_id!r} was pruned in the durable tier (committed), but the cold copy"
        " of a demotion under way could not be pruned too"
        f" ({type(exc).__name__}: {exc}): if that demotion finishes, its copy (the"
        " history before the prune) is the agent; prune again to finish",
        maybe_applied=True,
    )
