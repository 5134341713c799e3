"""The PostgreSQL backend's change-feed methods, each a call to its
:class:`~.feed.FeedReader` (the frontier and the wake-ups) or to :mod:`.feed_id`. A
mixin of :class:`~.backend.PostgresBackend`."""

from __future__ import annotations

from ...records import FeedRecord
from . import feed_id as feed_ids
from .part import PostgresPart

__all__ = ["FeedApi"]


class FeedApi(PostgresPart):
    """The change feed of :class:`~.backend.PostgresBackend` (see :mod:`.feed`)."""

    async def read_feed(self, after: int = 0, limit: int = 500) -> list[FeedRecord]:
        self._check_open()
        return await self._feed.read(after, limit)

    async def read_feed_page(
        self, after: int = 0, limit: int = 500
    ) -> tuple[list[FeedRecord], str | None]:
        self._check_open()
        return await self._feed.read_page(after, limit)

    async def feed_bounds(self) -> tuple[int, int]:
        self._check_open()
        return await self._feed.bounds()

    async def trim_feed(self, through: int) -> int:
        self._check_open()
        return await self._feed.trim(through)

    async def feed_id(self) -> str | None:
        return await feed_ids.feed_id(self)

    async def renew_feed_id(self) -> str | None:
        return await feed_ids.renew_feed_id(self)

    async def feed_position(self, agent_id: str, seq: int) -> int | None:
        self._check_open()
        return await self._feed.position(agent_id, seq)

    async def wait_feed(self, after: int, max_wait: float) -> None:
        self._check_open()
        await self._feed.wait(after, max_wait)
