"""The feed-id calls of :class:`~.observed.ObservedBackend` (``feed_id``,
``renew_feed_id``: :mod:`statekeeper.store.feed_cursor`; ``read_feed_page``, a feed
page with the id read with it), each timed and counted like
every engine call: a part of the wrapper kept in its own module so that each stays
small."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..records import FeedRecord
    from .instrumentation import Instrumentation

__all__ = ["FeedIdCalls"]


class FeedIdCalls:
    """``inner`` is the wrapped engine, ``_obs`` the instrumentation the calls report
    to (both set by the wrapper)."""

    inner: Backend
    _obs: Instrumentation

    async def feed_id(self) -> str | None:
        found: str | None = await self._obs.call("feed_id", None, self.inner.feed_id)
        return found

    async def renew_feed_id(self) -> str | None:
        found: str | None = await self._obs.call("renew_feed_id", None, self.inner.renew_feed_id)
        return found

    async def read_feed_page(
        self, after: int = 0, limit: int = 500
    ) -> tuple[list[FeedRecord], str | None]:
        found: tuple[list[FeedRecord], str | None] = await self._obs.call(
            "read_feed", None, self.inner.read_feed_page, after, limit
        )
        return found
