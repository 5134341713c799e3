"""The thread page's *Apply retention*: it acts on the checkpoints the page showed. The
form carries the newest checkpoint id the page listed (``up_to``); ``keep_last`` counts
among the checkpoints up to it, and any written since (a graph still running) are kept
— counted from the newest at POST time, a burst of new checkpoints would have pushed
ones the user saw out, and removed new ones the user never saw (keep_last below their
number). A form without ``up_to`` (a page of an older inspector) is refused."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..arguments import check_agent_id, check_seq
from ..errors import ConfigurationError, InvalidArgument
from ..store.governed import governance_of
from .threads import EXTRA, missing_extra, saver

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = ["Applied", "apply_retention"]


@dataclass(frozen=True)
class Applied:
    thread_id: str
    keep_last: int
    checkpoints_deleted: int
    writes_deleted: int


async def apply_retention(store: StateStore, prefix: str, form: dict[str, str]) -> Applied:
    """Apply the form's retention to its thread, as its page showed it."""
    keep = form.get("keep_last", "").strip()
    try:
        keep_last = int(keep)
    except ValueError:
        raise InvalidArgument("keep_last", "keep_last must be a whole number") from None
    check_seq(keep_last, "keep_last", minimum=1)
    thread_id = form.get("thread", "")
    if not thread_id:
        raise InvalidArgument("thread", "which thread?")
    if missing_extra() is not None:
        raise ConfigurationError(f"LangGraph threads need the langgraph extra: {EXTRA}")
    gov = governance_of(store)
    if gov is not None:  # retention is admin of the namespace, as on the CLI
        agent_id = check_agent_id(prefix + thread_id, "thread")
        await gov.require(agent_id, "admin", "retention")
    up_to = form.get("up_to", "").strip()
    if not up_to:
        raise InvalidArgument(
            "up_to",
            "this retention form does not say which checkpoints its page showed (a page"
            " from an older inspector?): nothing was removed; open the thread's page again"
            " and apply retention from there",
        )
    report = await saver(store, prefix).aprune_retention(
        [thread_id], keep_last=keep_last, up_to=up_to
    )
    return Applied(thread_id, keep_last, report.checkpoints_deleted, report.writes_deleted)
