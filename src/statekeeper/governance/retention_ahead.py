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

Only a run that may trim the feed every tenant shares raises it (:func:`floor_through`):
one on a plain store, or opened as an admin of every namespace (``trim_feed``'s rule;
PostgreSQL row security enforces the same). A tenant's administrator's run would
otherwise make every other tenant's subscriber behind it rebuild its read model: its
actions say the floor was not raised, and it looks up no position.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING

from ..errors import AgentLost
from ..records import AgentInfo
from ..store.feed_cursor import FeedCursor
from ..store.feed_retention import LookedAhead, has_feed, removed_through
from ..store.feed_retention import look_ahead as _positions
from ..store.holds import Hold
from ..store.namespaced import stored_id
from .hooks import is_store_admin
from .retention_policy import RetentionPolicy, Rule

if TYPE_CHECKING:
    from ..store import StateStore
    from .retention import RetentionAction

__all__ = ["NOT_SHARED", "floor_note", "floor_through", "idle", "look_ahead", "pages"]

NOT_SHARED = (
    "the change feed's floor not raised (only an admin of every namespace may trim the feed,"
    " shared by every tenant): a subscriber behind passes over the events removed"
)


async def floor_through(
    store: StateStore, agent_id: str, seq: int, ahead: LookedAhead | None
) -> tuple[FeedCursor | None, str]:
    """``(cursor, "")``: where the feed is trimmed before ``agent_id``'s events up to
    ``seq`` go (:func:`~statekeeper.store.feed_retention.removed_through`), for a run
    that may trim the feed every tenant shares; ``(None, why)`` for any other
    principal's run (``""`` on a store without a feed)."""
    if not is_store_admin(store):
        return None, NOT_SHARED if has_feed(store.backend) else ""
    return await removed_through(store, agent_id, seq, ahead), ""


def floor_note(actions: Iterable[RetentionAction], dry_run: bool) -> str | None:
    """What ``retention apply`` prints once for a run that removed events without
    raising the feed's floor (a tenant admin's, or a tenant's database role under row
    security: the actions' reasons say so, a compaction's line does not show its
    reason); None when no action did."""
    if not any(
        a.outcome in ("done", "dry-run") and "floor not raised" in a.reason for a in actions
    ):
        return None
    return (
        f"the change feed's floor {'would not rise' if dry_run else 'was not raised'} over"
        " the events removed (only an admin of every namespace may trim the feed every"
        " tenant shares): a subscriber that has not read that far passes over them, and"
        " the feed keeps its entries for them until an admin of every namespace trims it"
        " past them (trim_feed, or a retention run of theirs that removes a later event)"
    )


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
    does for any event not asked here). None for a run that may not trim the feed."""
    if not is_store_admin(store):
        return None
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
