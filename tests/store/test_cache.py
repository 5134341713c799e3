"""The LRU cache of folded states: bounds, counters, and staying correct across processes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.store.cache import LRUCache

from .conftest import CountingBackend


def test_lru_cache_evicts_least_recently_used() -> None:
    cache: LRUCache[str, int] = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3)  # evicts b
    assert "b" not in cache
    assert cache.get("b") is None
    assert cache.peek("a") == 1 and cache.peek("c") == 3
    stats = cache.stats()
    assert (stats.size, stats.max_size, stats.hits, stats.misses, stats.evictions) == (
        2,
        2,
        1,
        1,
        1,
    )
    assert stats.hit_rate == 0.5
    cache.put("a", 10)  # replacing is not an eviction
    assert cache.stats().evictions == 1 and len(cache) == 2


def test_lru_cache_size_zero_keeps_nothing() -> None:
    cache: LRUCache[str, int] = LRUCache(0)
    cache.put("a", 1)
    assert len(cache) == 0 and cache.get("a") is None
    assert cache.stats().hit_rate == 0.0
    with pytest.raises(ValueError):
        LRUCache(-1)


async def test_store_cache_is_bounded_and_counts(open_store: Callable[..., StateStore]) -> None:
    backend = CountingBackend(MemoryBackend())
    writer = open_store(backend)
    for name in "abcde":
        await writer.save(name, {"name": name})
    store = open_store(backend, cache_size=3)
    for name in "abcd":  # d evicts a
        await store.load(name)
    stats = store.stats().cache
    assert (stats.size, stats.max_size, stats.misses, stats.hits, stats.evictions) == (
        3,
        3,
        4,
        0,
        1,
    )
    folds = store.stats().loads_from_backend
    assert (await store.load("d")).data == {"name": "d"}  # hit
    assert (await store.load("b")).data == {"name": "b"}  # hit, b becomes most recent
    assert store.stats().loads_from_backend == folds
    assert (await store.load("a")).data == {"name": "a"}  # miss: evicts c, the LRU
    assert store.stats().loads_from_backend == folds + 1
    await store.load("c")  # miss again
    stats = store.stats().cache
    assert (stats.size, stats.hits, stats.misses, stats.evictions) == (3, 2, 6, 3)
    assert stats.hit_rate == pytest.approx(2 / 8)


async def test_cache_disabled(open_store: Callable[..., StateStore]) -> None:
    store = open_store("memory://", cache_size=0)
    await store.save("a1", {"n": 1})
    await store.save("a1", {"n": 2})
    assert (await store.load("a1")).data == {"n": 2}
    assert store.stats().cache.size == 0
    assert store.stats().loads_from_backend >= 2


async def test_validate_cache_catches_up_with_another_store(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    mine = open_store(db_url, snapshot_every=1000)
    theirs = open_store(db_url)
    await mine.save("a1", {"messages": ["m0"]})
    assert (await mine.load("a1")).seq == 1  # cached now
    for i in range(1, 4):
        await theirs.save("a1", {"messages": [f"m{j}" for j in range(i + 1)]})
    folds = mine.stats().loads_from_backend
    snap = await mine.load("a1")
    assert (snap.seq, snap.data) == (4, {"messages": ["m0", "m1", "m2", "m3"]})
    # caught up incrementally from the cached state, not rebuilt from scratch
    assert mine.stats().loads_from_backend == folds
    # and a write continues from the caught-up head
    assert (await mine.save("a1", {"messages": []})).last_seq == 5
    assert (await theirs.load("a1")).data == {"messages": []}


async def test_cache_sees_a_delete_and_recreate_elsewhere(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    mine = open_store(db_url)
    theirs = open_store(db_url)
    for i in range(3):
        await mine.save("a1", {"gen": 1, "i": i})
    await theirs.delete("a1")
    assert await mine.get("a1") is None
    await theirs.save("a1", {"gen": 2})
    snap = await mine.load("a1")
    assert (snap.seq, snap.data) == (1, {"gen": 2})


async def test_concurrent_readers_catching_up_do_not_trip_over_each_other(
    open_store: Callable[..., StateStore],
) -> None:
    # With an engine whose reads suspend (any networked one), several readers may
    # catch the same cached state up at the same time.
    backend = CountingBackend(MemoryBackend(), yield_every_call=True)
    reader = open_store(backend, snapshot_every=1000)
    writer = open_store(backend)
    await writer.save("a1", {"n": 0})
    await reader.load("a1")
    for i in range(1, 6):
        await writer.save("a1", {"n": i})
    snaps = await asyncio.gather(*(reader.load("a1") for _ in range(8)))
    assert {(s.seq, s.data["n"]) for s in snaps} == {(6, 5)}
    assert (await reader.load("a1")).seq == 6


async def test_cache_sees_a_recreated_stream_at_the_same_seq(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    # The re-created stream reaches the seq this store has cached: the head alone
    # looks unchanged, yet the cached state is from a stream that no longer exists.
    mine = open_store(db_url)
    theirs = open_store(db_url)
    await mine.save("a1", {"old": True, "drop": 1})
    await mine.save("a1", {"old": True})
    await theirs.delete("a1")
    await theirs.save("a1", {"new": True})
    await theirs.save("a1", {"new": True, "n": 2})
    assert (await mine.load("a1")).data == {"new": True, "n": 2}
    # and a write from the stale side is a diff against the new stream, not the old one
    await mine.save("a1", {"new": True, "n": 3})
    async with StateStore(db_url) as fresh:
        assert (await fresh.load("a1")).data == {"new": True, "n": 3}
        assert (await fresh.verify()).ok
