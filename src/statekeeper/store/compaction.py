"""The base of a compacted stream, told apart from history removed by hand.

A compacted stream (retention's ``keep_last``, an import of one) starts after a
snapshot, its *base*: no event at or below it is stored. That shape alone proves
nothing — anyone who can write the database can delete an agent's oldest events up to
any snapshot — so the base snapshot a compaction writes carries :data:`COMPACTED` in
its body, which is authenticated like the rest of it (with a key, nobody without it can
make one; a restore or a tier copy moves the record as stored). A stream that starts
after a snapshot without it lost its history: reads that reach there raise
``IntegrityError`` instead of ``HistoryCompacted``, and ``verify`` reports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import (
    AgentNotFound,
    HistoryCompacted,
    IntegrityError,
    SerializationError,
    StatekeeperError,
)

if TYPE_CHECKING:
    from .reads import ReadPath
    from .state import AgentRecord

__all__ = ["ADOPT_COMMAND", "COMPACTED", "base_error", "before_stored", "marked"]

#: the snapshot body key of a compaction's base (value ``True``)
COMPACTED = "compacted"

#: what marks the compactions of a version before the mark (governance/adoption.py)
ADOPT_COMMAND = "statekeeper retention adopt-compactions"


def marked(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (a whole snapshot's) as the base of a compacted stream."""
    body[COMPACTED] = True
    return body


def removed(agent_id: str, base: int) -> IntegrityError:
    return IntegrityError(
        agent_id,
        1,
        f"events 1..{base} are gone and no compaction removed them (the snapshot at seq"
        f" {base} is not a compaction's base): the stream's history was deleted, or"
        " compacted by a version before compactions were marked: if so, run"
        f" `{ADOPT_COMMAND}` with the store key to adopt it",
    )


async def base_error(reads: ReadPath, agent_id: str, base: int) -> StatekeeperError:
    """What a read of ``agent_id``'s events raises when its stream starts after seq
    ``base``: :class:`HistoryCompacted` when the snapshot at ``base`` is a
    compaction's base, else an :class:`IntegrityError` (the history was deleted, or
    the base snapshot is damaged)."""
    raw = await reads.backend.latest_snapshot(agent_id, base)
    if raw is None or raw.seq != base:
        return removed(agent_id, base)
    try:
        body, _ = reads.open_snapshot(agent_id, raw)
    except IntegrityError as exc:
        return exc
    except SerializationError as exc:
        return IntegrityError(agent_id, base, str(exc))
    if body.get(COMPACTED) is True:
        return HistoryCompacted(agent_id, base)
    return removed(agent_id, base)


async def before_stored(
    reads: ReadPath, agent_id: str, head: int, at_time: float, tag: bytes | None
) -> AgentRecord:
    """The state at ``at_time``, earlier than every stored event: the retention
    base's state when the stream was compacted and ``at_time`` is at or after the
    base's last write; :class:`HistoryCompacted` when the agent existed then but
    its history was compacted away (``IntegrityError`` when deleted by hand); else it
    did not exist yet (AgentNotFound)."""
    first = await reads.backend.read(agent_id, 0, None, limit=1)
    if not first or first[0].seq == 1:
        raise AgentNotFound(agent_id)
    base = await reads.fold(agent_id, head, first[0].seq - 1, tag, at_head=False)
    if at_time >= base.updated_at:
        return base
    if at_time >= base.created_at:
        raise await base_error(reads, agent_id, base.seq)
    raise AgentNotFound(agent_id)
