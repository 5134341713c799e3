"""The change feed's bounds per shard, the checks a cursor meets against them, and
trimming (split out of :mod:`.feed`, whose subscription uses them)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..backends.base import Backend
from ..errors import InvalidArgument
from .feed_cursor import FeedBounds, FeedCursor, as_cursor, check_feed

if TYPE_CHECKING:
    from .store import StateStore

__all__ = [
    "check_within",
    "feed_bounds_per_shard",
    "feed_shards",
    "lags_commits",
    "store_feed_bounds",
    "store_feed_cursor_bounds",
    "trim_feed_through",
]


def feed_shards(backend: Backend) -> int:
    """How many feeds ``backend`` keeps: 1 (the store-wide feed) unless it is sharded
    (a Redis backend with ``shards=N``, whose ``feed_shards`` is N)."""
    n = getattr(backend, "feed_shards", 1)
    return n if isinstance(n, int) and n >= 1 else 1


async def feed_bounds_per_shard(backend: Backend) -> list[tuple[int, int]]:
    """``(floor, head)`` of each of the backend's feeds (one item unless sharded)."""
    if feed_shards(backend) == 1:
        return [await backend.feed_bounds()]
    return list(await _sharded(backend).shard_feed_bounds_all())


async def store_feed_bounds(store: StateStore) -> list[tuple[int, int]]:
    """``(floor, head)`` of each of the store's feeds (one item unless sharded)."""
    await store._ready()
    return await feed_bounds_per_shard(store.backend)


async def store_feed_cursor_bounds(store: StateStore) -> FeedBounds:
    """The floor and head of every shard's feed as two cursors (any store with a feed;
    one position each unless sharded)."""
    bounds = await store_feed_bounds(store)
    return FeedBounds(
        FeedCursor(tuple(floor for floor, _ in bounds)),
        FeedCursor(tuple(head for _, head in bounds)),
    )


async def _committed(backend: Backend, bounds: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``bounds`` with the head raised to the newest position committed where the head
    lags commits (:func:`lags_commits`; elsewhere ``bounds`` as they are). On
    PostgreSQL the head is the safe frontier, which lags while appends are in flight —
    for a reader that has not read yet, by everything (a safe head of 0). A resume
    point is refused only beyond the raised head (another reader's cursor may be past
    the frontier and still be this store's), and a ``stop_at_head`` catch-up ends
    there (at the frontier it ended at once, without the events already committed —
    even the caller's own)."""
    newest = getattr(backend, "feed_committed_head", None)
    if newest is None or not lags_commits(backend):
        return bounds
    floor, head = bounds[0]
    return [(floor, max(head, await newest()))]


async def _handed_out(backend: Backend, bounds: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``bounds`` with the head raised to the last position the feed handed out, where
    the newest committed one can go back (PostgreSQL: it is the largest position still
    stored, lower once the agent holding it is deleted): what a resume point of this
    store may reach. A consumer's own cursor, taken before such a delete, was refused
    as another store's after a restart until the next append; not a bound for a
    ``stop_at_head`` catch-up (no position up to it may ever commit again)."""
    handed_out = getattr(backend, "feed_handed_out_head", None)
    if handed_out is None or feed_shards(backend) != 1:
        return bounds
    floor, head = bounds[0]
    return [(floor, max(head, await handed_out()))]


def lags_commits(backend: Backend) -> bool:
    """True when the backend's feed head is a safe frontier that lags what is committed
    (PostgreSQL, while appends are in flight: ``feed_committed_head``); elsewhere every
    committed position is readable at once (SQLite, memory, Redis: positions commit in
    the order they are taken)."""
    return feed_shards(backend) == 1 and getattr(backend, "feed_committed_head", None) is not None


def check_within(
    bounds: list[tuple[int, int]], positions: Sequence[int], argument: str, outcome: str
) -> None:
    """Refuse positions beyond their shard's head: not a cursor of this store."""
    for k, ((_, head), p) in enumerate(zip(bounds, positions, strict=True)):
        if p > head:
            where = f" of shard {k}" if len(bounds) > 1 else ""
            raise InvalidArgument(
                argument,
                f"position {p}{where} is beyond the feed's head {head}: not a cursor of"
                f" this store ({outcome})",
            )


async def trim_feed_through(store: StateStore, through: int | FeedCursor | str) -> int:
    """Trim each shard's feed through its position in ``through`` (a shard whose
    position is at or below its floor is left alone); returns how many records were
    dropped. A position beyond its shard's head, or a cursor of another feed
    (``FeedChanged``), is refused before anything is trimmed (the cursor is not one of
    this store's: trimming there would hide events still to be delivered)."""
    await store._ready()
    backend = store.backend
    shards = feed_shards(backend)
    cursor = as_cursor(through, shards, "through")
    check_feed(cursor, await backend.feed_id())  # another feed's: trimming other events
    bounds = await feed_bounds_per_shard(backend)
    check_within(bounds, cursor.positions, "through", "nothing was trimmed")
    pairs = enumerate(zip(bounds, cursor.positions, strict=True))
    todo = [(k, p) for k, ((floor, _), p) in pairs if p > floor]
    if shards == 1:
        return sum([await backend.trim_feed(p) for _, p in todo])
    sharded = _sharded(backend)
    dropped = await asyncio.gather(*(sharded.trim_shard_feed(k, p) for k, p in todo))
    return sum(dropped)


def _sharded(backend: Backend) -> Any:
    # a backend with feed_shards > 1: read_shard_feed, shard_feed_bounds_all, trim_shard_feed
    return backend
