"""The change feed's methods (the feed itself: :mod:`.feed`): read, bounds, trim and wait,
store-wide or per shard."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ...errors import ConfigurationError
from ...records import FeedRecord
from ..base import Capability
from . import feed, meta
from .engine import RedisEngine

__all__ = ["RedisFeedApi"]


class RedisFeedApi(RedisEngine):
    """The change feed's methods (a part of :class:`~.backend.RedisBackend`)."""

    def _need_feed(self) -> None:
        self._check_open()
        if not self.feed:
            self.require(Capability.FEED, "this backend was opened with feed=False")
        self.require(
            Capability.FEED,
            f"the store has {self.layout.shards} shards, each with its own feed "
            "(read_shard_feed); there is no store-wide order on a sharded Redis: use "
            "store.feed_cursor_bounds() and store.trim_feed(FeedCursor) (docs/feed.md)",
        )

    async def read_feed(self, after: int = 0, limit: int = 500) -> list[FeedRecord]:
        return await self.read_shard_feed(0, after, limit, _store_wide=True)

    async def read_feed_page(
        self, after: int = 0, limit: int = 500
    ) -> tuple[list[FeedRecord], str | None]:
        """With the feed's id from the same pipeline (:func:`.feed.read_feed_page`); on
        a cluster (the meta hash in another slot) read after the page instead."""
        keys = self._shard(0, True)
        if self.cluster:
            return await super().read_feed_page(after, limit)
        meta_key = self.layout.meta

        async def op() -> tuple[list[FeedRecord], bytes | None]:
            return await feed.read_feed_page(self, keys, after, limit, meta_key)

        page, found = await self._retrying("read_feed", op)
        return page, meta.as_text(found) if found is not None else None

    async def feed_bounds(self) -> tuple[int, int]:
        return await self.shard_feed_bounds(0, _store_wide=True)

    async def trim_feed(self, through: int) -> int:
        self._need_feed()
        self._check_writable()
        keys = self.layout.shard_keys[0]
        return await self._retrying("trim_feed", lambda: feed.trim_feed(self, keys, through))

    async def feed_position(self, agent_id: str, seq: int) -> int | None:
        """In the agent's shard's feed (:meth:`feed_shard_of`)."""
        self._check_open()
        if not self.feed:
            return None
        keys = self.layout.shard_keys[self.layout.shard_of(agent_id)]
        return await self._retrying(
            "feed_position", lambda: feed.feed_position(self, keys, agent_id, seq)
        )

    async def feed_positions(self, wanted: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Per shard, one pass back from the head for all of that shard's agents."""
        self._check_open()
        if not self.feed:
            return {}
        by_shard: dict[int, list[tuple[str, int]]] = {}
        for agent_id, seq in wanted:
            by_shard.setdefault(self.layout.shard_of(agent_id), []).append((agent_id, seq))
        found: dict[tuple[str, int], int] = {}
        for shard, pairs in sorted(by_shard.items()):
            keys = self.layout.shard_keys[shard]
            op = functools.partial(feed.feed_positions, self, keys, pairs)
            found.update(await self._retrying("feed_positions", op))
        return found

    def feed_shard_of(self, agent_id: str) -> int:
        """The shard whose feed holds ``agent_id``'s events (0 unless sharded)."""
        return self.layout.shard_of(agent_id)

    async def wait_feed(self, after: int, max_wait: float) -> None:
        self._need_feed()
        max_wait = min(max_wait, self._block_limit)
        keys = self.layout.shard_keys[0]
        await self._retrying("wait_feed", lambda: feed.wait_feed(self, keys, after, max_wait))

    # per shard: the feed of a sharded store (see .feed)

    def _shard(self, shard: int, store_wide: bool) -> Any:
        if store_wide:
            self._need_feed()
        else:
            self._check_open()
            if not self.feed:
                self.require(Capability.FEED, "this backend was opened with feed=False")
        if not 0 <= shard < len(self.layout.shard_keys):
            raise ConfigurationError(
                f"shard must be in 0..{len(self.layout.shard_keys) - 1}, not {shard!r}"
            )
        return self.layout.shard_keys[shard]

    async def read_shard_feed(
        self, shard: int, after: int = 0, limit: int = 500, *, _store_wide: bool = False
    ) -> list[FeedRecord]:
        """The events of one shard after its position ``after``, in that shard's commit
        order (positions are per shard; see :mod:`.feed`)."""
        keys = self._shard(shard, _store_wide)
        return await self._retrying("read_feed", lambda: feed.read_feed(self, keys, after, limit))

    async def shard_feed_bounds(self, shard: int, *, _store_wide: bool = False) -> tuple[int, int]:
        """``(floor, head)`` of one shard's feed."""
        keys = self._shard(shard, _store_wide)
        return await self._retrying("feed_bounds", lambda: feed.feed_bounds(self, keys))

    async def trim_shard_feed(self, shard: int, through: int) -> int:
        """Forget positions ``<= through`` of one shard's feed (its floor only rises);
        returns how many entries were dropped."""
        keys = self._shard(shard, False)
        self._check_writable()
        return await self._retrying("trim_feed", lambda: feed.trim_feed(self, keys, through))

    @property
    def feed_shards(self) -> int:
        """How many feeds the store has: 1 (the store-wide feed) unless sharded."""
        return len(self.layout.shard_keys)

    async def shard_feed_bounds_all(self) -> list[tuple[int, int]]:
        """``(floor, head)`` of every shard's feed, in shard order, read in one
        pipeline (one round trip per node on a cluster): what a subscriber of a
        sharded store polls while live (see :mod:`statekeeper.store.feed`)."""
        self._shard(0, False)
        return await self._retrying("feed_bounds", lambda: feed.all_feed_bounds(self))
