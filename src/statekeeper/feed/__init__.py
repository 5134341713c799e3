"""Projections: read models kept up to date from the store's change feed (see
``docs/feed.md``). The feed itself is ``StateStore.subscribe``.

``ProjectionRunner`` applies the feed to projections whose read models live in a
SQLite database, each event exactly once (the position commits with the read model);
``FeedCursor`` is the resume point of a subscription of a sharded store (and
``FeedBounds`` a feed's floor and head in cursors);
``Projection`` is the base class of a projection; the built-ins are in
:mod:`statekeeper.feed.builtins`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import lazy_attribute

if TYPE_CHECKING:
    from ..store.feed_cursor import FeedBounds, FeedCursor
    from .builtins import BUILTINS, AgentActivity, AgentStates, ToolCalls, Transitions
    from .projection import Projection
    from .runner import ProjectionRunner, ProjectionStatus

__all__ = [
    "BUILTINS",
    "AgentActivity",
    "AgentStates",
    "FeedBounds",
    "FeedCursor",
    "Projection",
    "ProjectionRunner",
    "ProjectionStatus",
    "ToolCalls",
    "Transitions",
]

_LAZY = {
    "BUILTINS": "builtins",
    "AgentActivity": "builtins",
    "AgentStates": "builtins",
    "ToolCalls": "builtins",
    "Transitions": "builtins",
    "FeedBounds": "..store.feed_cursor",
    "FeedCursor": "..store.feed_cursor",
    "Projection": "projection",
    "ProjectionRunner": "runner",
    "ProjectionStatus": "runner",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, globals(), _LAZY, name)
