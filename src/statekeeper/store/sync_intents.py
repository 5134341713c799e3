"""The feed-intent and idle-settle calls of :class:`~statekeeper.store.sync.SyncStateStore` (kept
here: that module is at its size limit)."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .feed_intent_repair import FeedIntent, SettledIntent
    from .portal import Portal
    from .store import StateStore

__all__ = ["SyncIntents"]


class SyncIntents:
    """:meth:`StateStore.feed_intents`, :meth:`StateStore.settle_feed_intents` and
    :meth:`StateStore.idle_settled`, blocking."""

    store: StateStore
    _portal: Portal

    def feed_intents(self) -> list[FeedIntent]:
        """See :meth:`StateStore.feed_intents`."""
        return self._portal.call(self.store.feed_intents())

    def settle_feed_intents(
        self,
        agent_ids: Collection[str] | None = None,
        *,
        older_than: float | None = None,
        force: bool = False,
    ) -> list[SettledIntent]:
        """See :meth:`StateStore.settle_feed_intents`."""
        call = self.store.settle_feed_intents(agent_ids, older_than=older_than, force=force)
        return self._portal.call(call)

    def idle_settled(self) -> None:
        """See :meth:`StateStore.idle_settled`."""
        self._portal.call(self.store.idle_settled())
