"""How often :mod:`.rekey` tries a rewrite that another writer's change refused
(``ConflictError``: an append meanwhile, another rewrite's claim on an S3 stream), and
how long it waits between tries; shared by its batch and final commits. And how often
it plans a stream's rewrite again when a retention prune refused it
(:class:`~statekeeper.errors.RewriteBelowPrunedBase`: planned before the prune)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..errors import (
    ConflictError,
    IntegrityError,
    RewriteBelowPrunedBase,
    StatekeeperError,
    StreamClaimed,
)

if TYPE_CHECKING:
    from ..backends.base import Backend

#: a refused rewrite (a batch, or the stream's final one with its head tag) is tried this
#: many times in all; then the rekey of the stream gives up with the ``ConflictError``
#: naming the agent (a stream under constant writes, or one an S3 rewrite's claim holds
#: until ``rewrite_claim_timeout``: ~4 s of pauses in all, then the caller decides)
TRIES = 200

#: a stream whose rewrite a prune refused (planned before it) is walked again from a
#: fresh read, pausing as :func:`backoff` says, this many times in all; then the rekey
#: of the stream gives up with the last refusal (it names the agent and the seq): a
#: prune landing on every walk is not a race a retry wins
REPLANS = 20


async def backoff(attempt: int) -> None:
    """The pause after the rewrite refused at try ``attempt`` (from 0): 0.5 ms more
    after each, at most 20 ms."""
    await asyncio.sleep(min(0.0005 * attempt, 0.02))


async def given_up(
    backend: Backend, agent_id: str, head: int, last: ConflictError | None
) -> ConflictError:
    """What a rekey gives up with after :data:`TRIES` refusals of a rewrite of
    ``agent_id`` at ``head``: the ``last`` refusal when it was another rewrite's claim
    (:class:`StreamClaimed` names its age and the bound: a stuck rewrite is told from a
    busy writer), else a ``ConflictError`` at the stored head."""
    if isinstance(last, StreamClaimed):
        return last
    return ConflictError(agent_id, head, await backend.head(agent_id))


async def gap_or_pruned(
    backend: Backend, agent_id: str, cursor: int, restart: type[StatekeeperError]
) -> StatekeeperError:
    """What a walk of ``agent_id`` raises when the record after ``cursor`` is missing
    from its page: ``restart()`` (walk the stream again from a fresh read) when a
    retention prune compacted it under the walk (its first stored record is past the
    record missing: its base moved up, the base snapshot kept, nothing tampered with),
    else ``IntegrityError`` (a gap in the stream)."""
    first = await backend.read(agent_id, 0, None, limit=1)
    if first and first[0].seq > cursor + 1:
        return restart()
    return IntegrityError(agent_id, cursor + 1, "gap in the stream")


def walk_again(refused: RewriteBelowPrunedBase, stream: str, walks: int) -> None:
    """Return when ``stream``, whose rewrite a prune ``refused`` on walk ``walks`` (from
    1), is to be walked again; else raise ``refused``: another stream's refusal, or the
    last of :data:`REPLANS` walks (its ``walks`` set: :func:`gave_up_pruned` says it)."""
    if refused.agent_id != stream:
        raise refused
    if walks >= REPLANS:
        refused.walks = walks
        raise refused


def gave_up_pruned(refused: RewriteBelowPrunedBase) -> str:
    """What ``statekeeper rekey`` says when it gave up on a stream after :data:`REPLANS`
    walks, each refused because a retention prune landed under it (``refused``: the last
    refusal, raised by :func:`walk_again`)."""
    agent = repr(refused.agent_id)
    written = (
        # (S3's, found after some of the rewrite's writes landed: it says part-way.
        # Was: "a refused rewrite writes nothing" said beside it)
        "Some records of the last rewrite were written before it was refused; "
        if getattr(refused, "maybe_applied", False)
        else f"Nothing of {agent} was half-written: a refused rewrite writes nothing, and "
    )
    return (
        f"rekey gave up on agent {agent} after {refused.walks} walks because retention "
        f"kept pruning it (each walk's rewrite was refused; the last: {refused}). "
        f"{written}each of its records is whole under the old key or the new one. Run "
        "'statekeeper rekey' again to resume (records already under the active key "
        "are skipped)"
    )
