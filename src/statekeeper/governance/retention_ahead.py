"""A retention run's look-ahead: the feed positions of a page of purges and compactions
at once.

A purge raises the change feed's floor through its agent's last event before deleting
it (:mod:`statekeeper.store.feed_retention`), so it needs that event's feed position.
SQLite's and Redis' feeds have no index by agent: one lookup per agent reads the feed
back from the head to the event, and a purge of many old agents would read most of the
feed once per agent. :func:`apply_retention <statekeeper.governance.retention.apply_retention>`
takes the listing :func:`pages` at a time and, before acting on a page, looks up the
last events of the agents it will purge, and the targets of those it will compact
(``keep_last``), in ONE pass (:func:`look_ahead`). Every
position is read before any of the page's agents is removed, so the floor is still
raised through each agent's events before they go.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from ..errors import AgentLost
from ..records import AgentInfo
from ..store.feed_retention import LookedAhead
from ..store.feed_retention import look_ahead as _positions
from ..store.holds import Hold
from ..store.namespaced import stored_id
from .retention_policy import RetentionPolicy, Rule

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = ["idle", "look_ahead", "pages"]


def idle(rule: Rule, updated_at: float, now: float) -> bool:
    """Whether ``rule``'s TTL purges an agent last written at ``updated_at``."""
    return rule.ttl is not None and now - updated_at > rule.ttl


async def pages(
    listing: AsyncIterator[AgentInfo | AgentLost], size: int
) -> AsyncIterator[list[AgentInfo | AgentLost]]:
    """``listing`` ``size`` agents at a time."""
    page: list[AgentInfo | AgentLost] = []
    async for info in listing:
        page.append(info)
        if len(page) == size:
            yield page
            page = []
    if page:
        yield page


async def look_ahead(
    store: StateStore,
    policy: RetentionPolicy,
    page: Sequence[AgentInfo | AgentLost],
    holds: Sequence[Hold],
    now: float,
) -> LookedAhead | None:
    """The feed positions of the events the agents of ``page`` lose (not held), looked
    up at once before any is removed: a TTL purge's last event; a ``keep_last``
    compaction's likely target, the event ``keep_last`` before the listed head (a
    compaction planned to another target — a durable step kept, nothing left to
    remove — looks its own up, as :func:`~statekeeper.store.feed_retention.removed_through`
    does for any event not asked here)."""
    wanted: list[tuple[str, int]] = []
    for info in page:
        if isinstance(info, AgentLost) or info.head_seq < 1:
            continue
        agent_id = stored_id(store, info.agent_id)
        rule = policy.rule_for(agent_id)
        if rule is None:
            continue
        if policy.held(agent_id) or any(h.covers(agent_id) for h in holds):
            continue
        if idle(rule, info.updated_at, now):
            wanted.append((agent_id, info.head_seq))
        elif rule.keep_last is not None and info.head_seq > rule.keep_last:
            wanted.append((agent_id, info.head_seq - rule.keep_last))
    return await _positions(store, wanted)
