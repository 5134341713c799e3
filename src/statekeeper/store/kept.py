"""``kept_history``: an agent's events, or those retention kept."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import HistoryCompacted

if TYPE_CHECKING:
    from ..records import Event
    from .store import StateStore

__all__ = ["kept_history"]


async def kept_history(
    store: StateStore, agent_id: str, after_seq: int = 0, to_seq: int | None = None
) -> list[Event]:
    """The agent's events after ``after_seq`` (up to ``to_seq``); where retention
    compacted the history before its base (``store.history`` raises
    :class:`HistoryCompacted`), the events after the base: what tools that show "the
    newest events" list."""
    try:
        return [ev async for ev in store.history(agent_id, after_seq=after_seq, to_seq=to_seq)]
    except HistoryCompacted as exc:
        base = exc.base_seq
        return [ev async for ev in store.history(agent_id, after_seq=base, to_seq=to_seq)]
