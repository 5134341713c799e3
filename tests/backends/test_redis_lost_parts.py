"""A Redis store's shared keys lost on their own (evicted by an ``allkeys-*`` policy, or
deleted) while the identity marker stays: each loss is harmless (the answer is still
right) or found (:class:`~statekeeper.errors.FeedLost` naming what was lost and how to
go on), never a silent wrong answer.

* an agent's snapshot index (``s:<agent>``): a longer replay. Before, a pruned agent's
  load raised IntegrityError ("event missing") and ``latest_snapshot`` answered None;
* the feed's counter alone: repaired from the stream's last id. Before, the next append
  failed part way (its events stored, the caller told it failed) and the bounds went
  back to 0;
* the counter with the stream: appends and bounds raise ``FeedLost``. Before, positions
  started over at 1, repeating ones subscribers held;
* the stream alone: a read past lost positions raises ``FeedLost``. Before, their events
  were skipped without a word;
* the meta hash: its markers are kept in shard 0's index too (before: a lost meta read
  "not encrypted"), and a sharded store that lost it is not opened in another layout
  (before: it looked empty).

The shared server, each test under its own key prefix.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

pytest.importorskip("redis")

import redis

from statekeeper.backends.redis import RedisBackend
from statekeeper.errors import ConfigurationError, FeedLost, StoreLost
from statekeeper.testing import request

from ._services import REDIS_URL, delete_prefix, namespace, require_redis


@pytest.fixture
def prefix(tmp_path: Path) -> Iterator[str]:
    require_redis()
    name = namespace(tmp_path, "sk_lostp_") + ":"
    yield name
    delete_prefix(name)


@pytest.fixture
async def backend(prefix: str) -> AsyncIterator[RedisBackend]:
    opened = RedisBackend(REDIS_URL, prefix=prefix)
    try:
        yield opened
    finally:
        await opened.close()


def _delete(*keys: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert client.delete(*keys) == len(keys)
    finally:
        client.close()


# -- an agent's snapshot index ---------------------------------------------------------


async def test_a_pruned_agent_whose_snapshot_index_was_lost_still_loads(
    backend: RedisBackend, prefix: str
) -> None:
    await backend.append(request("a", 0, 5, snap_at=3))
    await backend.prune("a", 3)
    want = await backend.read_latest("a")
    _delete(f"{prefix}s:a")
    assert await backend.read_latest("a") == want  # main: IntegrityError, event 1 missing
    snap = await backend.latest_snapshot("a")
    assert snap is not None and snap.seq == 3  # main: None
    at = await backend.latest_snapshot("a", 4)
    assert at is not None and at.seq == 3
    assert await backend.latest_snapshot("a", 2) is None  # below the base: none, as before
    head, _, snap_state, events = await backend.read_state("a")
    assert (head, snap_state, [e.seq for e in events]) == (5, want[0], [4, 5])


async def test_an_agent_whose_snapshot_index_was_lost_replays_from_the_start(
    backend: RedisBackend, prefix: str
) -> None:
    # (harmless on main too: every event is there; this keeps it so)
    await backend.append(request("a", 0, 5, snap_at=3))
    _delete(f"{prefix}s:a")
    snap, events = await backend.read_latest("a")
    assert snap is None and [e.seq for e in events] == [1, 2, 3, 4, 5]
    await backend.append(request("a", 5, 1, snap_at=6))  # a new index from here
    snap, events = await backend.read_latest("a")
    assert snap is not None and snap.seq == 6 and events == []


# -- the change feed -------------------------------------------------------------------


async def _positions(backend: RedisBackend, after: int = 0) -> list[tuple[int, str, int]]:
    return [(r.position, r.agent_id, r.event.seq) for r in await backend.read_feed(after)]


async def test_a_lost_feed_counter_goes_on_from_the_stream(
    backend: RedisBackend, prefix: str
) -> None:
    await backend.append(request("a", 0, 3))
    _delete(f"{prefix}feed:n")
    assert await backend.feed_bounds() == (0, 3)  # main: (0, 0)
    await backend.append(request("a", 3, 1))  # main: BackendRejected, event 4 stored
    assert await backend.head("a") == 4
    assert await _positions(backend) == [(p, "a", p) for p in (1, 2, 3, 4)]
    assert await backend.feed_bounds() == (0, 4)


async def test_a_lost_feed_counter_after_a_trim_goes_on_from_the_stream(
    backend: RedisBackend, prefix: str
) -> None:
    await backend.append(request("a", 0, 3))
    assert await backend.trim_feed(3) == 3  # an empty stream, its last id kept
    _delete(f"{prefix}feed:n")
    assert await backend.feed_bounds() == (3, 3)
    await backend.append(request("b", 0, 1))
    assert await _positions(backend, 3) == [(4, "b", 1)]  # main: BackendRejected


async def test_a_feed_that_lost_its_counter_and_stream_refuses_appends(
    backend: RedisBackend, prefix: str
) -> None:
    await backend.append(request("a", 0, 3))
    _delete(f"{prefix}feed:n", f"{prefix}feed")
    with pytest.raises(FeedLost) as raised:  # main: appended at position 1 again
        await backend.append(request("b", 0, 1))
    assert raised.value.what == "counter"
    assert isinstance(raised.value, StoreLost)
    assert f"SET {prefix}feed:n" in str(raised.value)
    assert await backend.head("b") == 0  # nothing written
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert not client.exists(f"{prefix}feed:n", f"{prefix}feed")
    finally:
        client.close()
    with pytest.raises(FeedLost):  # main: (0, 0)
        await backend.feed_bounds()
    results = await backend.append_batch([request("b", 0, 1)])
    assert isinstance(results[0], FeedLost)
    # the recovery the error names: the counter set past every position handed out,
    # then the feed trimmed through it
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.set(f"{prefix}feed:n", 3)
    finally:
        client.close()
    assert await backend.trim_feed(3) == 0
    await backend.append(request("b", 0, 1))
    assert await _positions(backend, 3) == [(4, "b", 1)]


async def test_together_refuses_on_a_lost_feed_counter_and_writes_nothing(
    backend: RedisBackend, prefix: str
) -> None:
    await backend.append(request("a", 0, 1))
    _delete(f"{prefix}feed:n", f"{prefix}feed")
    with pytest.raises(FeedLost):
        await backend.append_together([request("log", 0), request("a", 1)])
    assert (await backend.head("log"), await backend.head("a")) == (0, 1)


async def test_a_feed_read_past_lost_entries_raises(backend: RedisBackend, prefix: str) -> None:
    await backend.append(request("a", 0, 3))
    _delete(f"{prefix}feed")
    with pytest.raises(FeedLost) as raised:  # main: [] (a catch-up ended at once)
        await backend.read_feed(0)
    assert (raised.value.what, raised.value.after, raised.value.through) == ("entries", 0, 3)
    await backend.append(request("a", 3, 1))
    with pytest.raises(FeedLost) as raised:  # main: [(4, ...)]: 1..3 skipped
        await backend.read_feed(1)
    assert (raised.value.after, raised.value.through) == (1, 3)
    assert await _positions(backend, 3) == [(4, "a", 4)]  # past the loss: as before
    # the recovery the error names: the loss recorded as a trim
    await backend.trim_feed(3)
    assert await _positions(backend, 0) == [(4, "a", 4)]


async def test_a_store_from_before_the_feed_proof_gets_it_when_opened(prefix: str) -> None:
    first = RedisBackend(REDIS_URL, prefix=prefix)
    try:
        await first.append(request("a", 0, 2))
    finally:
        await first.close()
    client = redis.Redis.from_url(REDIS_URL)
    try:  # as an older version leaves the index
        assert client.zrem(f"{prefix}agents", "\0f") == 1
    finally:
        client.close()
    again = RedisBackend(REDIS_URL, prefix=prefix)
    try:
        await again.open()
        _delete(f"{prefix}feed:n", f"{prefix}feed")
        with pytest.raises(FeedLost):  # main: positions from 1 again
            await again.append(request("b", 0, 1))
    finally:
        await again.close()


async def test_a_new_feed_and_a_trimmed_one_are_not_lost(backend: RedisBackend) -> None:
    assert await backend.feed_bounds() == (0, 0)
    assert await backend.read_feed(0) == []
    await backend.append(request("a", 0, 2))
    assert await backend.trim_feed(2) == 2
    assert await backend.read_feed(0) == []  # below the floor: the store's concern
    assert await backend.read_feed(2) == []
    await backend.append(request("a", 2, 1))
    assert await _positions(backend, 0) == [(3, "a", 3)]


async def test_a_sharded_feed_names_the_shard_that_lost_its_counter(prefix: str) -> None:
    backend = RedisBackend(REDIS_URL, prefix=prefix, shards=4)
    try:
        await backend.append(request("a", 0, 2))
        shard = backend.layout.agent("a").shard
        _delete(shard.feed_counter.decode(), shard.feed_stream.decode())
        with pytest.raises(FeedLost) as raised:
            await backend.append(request("a", 2, 1))
        assert raised.value.shard == backend.layout.shard_of("a")
        with pytest.raises(FeedLost):
            await backend.shard_feed_bounds_all()
    finally:
        await backend.close()


# -- the store's meta hash -------------------------------------------------------------


async def test_a_lost_meta_hash_keeps_the_encrypted_marker(
    backend: RedisBackend, prefix: str
) -> None:
    await backend.append(request("a", 0, 1))
    await backend.set_marker("encrypted")
    _delete(f"{prefix}meta")
    assert await backend.read_marker("encrypted") is True  # main: False ("in the clear")
    again = RedisBackend(REDIS_URL, prefix=prefix)
    try:
        await again.open()  # puts the meta hash's markers back
    finally:
        await again.close()
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert client.hget(f"{prefix}meta", "marker:encrypted") == b"1"
    finally:
        client.close()


async def test_a_lost_meta_hash_and_index_is_found(backend: RedisBackend, prefix: str) -> None:
    await backend.append(request("a", 0, 1))
    await backend.set_marker("encrypted")
    _delete(f"{prefix}meta", f"{prefix}agents")
    with pytest.raises(StoreLost, match="index"):  # main: False
        await backend.read_marker("encrypted")


async def test_a_store_from_before_the_copy_gets_it_when_opened(
    backend: RedisBackend, prefix: str
) -> None:
    await backend.append(request("a", 0, 1))
    await backend.set_marker("encrypted")
    client = redis.Redis.from_url(REDIS_URL)
    try:  # as an older version leaves the index
        assert client.zrem(f"{prefix}agents", "\0m:encrypted") == 1
    finally:
        client.close()
    again = RedisBackend(REDIS_URL, prefix=prefix)
    try:
        await again.open()
        _delete(f"{prefix}meta")
        assert await again.read_marker("encrypted") is True
    finally:
        await again.close()


async def test_a_store_without_markers_is_not_marked(backend: RedisBackend) -> None:
    await backend.append(request("a", 0, 1))
    assert await backend.read_marker("encrypted") is False
    await backend.set_marker("encrypted")
    assert await backend.read_marker("encrypted") is True


@pytest.mark.parametrize("shards", [None, 8, 16])
async def test_a_sharded_store_that_lost_its_meta_is_not_opened_in_another_layout(
    prefix: str, shards: int | None
) -> None:
    first = RedisBackend(REDIS_URL, prefix=prefix, shards=4)
    try:
        await first.append(request("a", 0, 1))
    finally:
        await first.close()
    _delete(f"{prefix}meta")
    other = RedisBackend(REDIS_URL, prefix=prefix, shards=shards)
    try:
        with pytest.raises(ConfigurationError, match=r"shards=4"):  # main: an empty store
            await other.open()
    finally:
        await other.close()
    same = RedisBackend(REDIS_URL, prefix=prefix, shards=4)
    try:  # the right number: opened, and recorded again
        assert [i.agent_id for i in await same.list_agents()] == ["a"]
    finally:
        await same.close()
    again = RedisBackend(REDIS_URL, prefix=prefix)
    try:
        with pytest.raises(ConfigurationError, match="sharded"):
            await again.open()
    finally:
        await again.close()


async def test_an_evictable_copy_does_not_check_its_feed(prefix: str) -> None:
    backend = RedisBackend(REDIS_URL, prefix=prefix, evictable=True)
    try:
        await backend.append(request("a", 0, 2))
        _delete(f"{prefix}feed:n", f"{prefix}feed")  # as its evictions may
        await backend.append(request("b", 0, 1))  # a copy: nobody follows its feed
        assert await backend.feed_bounds() == (0, 1)
    finally:
        await backend.close()


async def test_a_new_feed_opened_twice_before_its_first_append_is_not_lost(prefix: str) -> None:
    first = RedisBackend(REDIS_URL, prefix=prefix)
    second = RedisBackend(REDIS_URL, prefix=prefix)
    try:
        await first.open()
        await second.open()  # (its counter at 0 is not a feed that handed out positions)
        await second.append(request("a", 0, 1))
        assert await _positions(first) == [(1, "a", 1)]
    finally:
        await first.close()
        await second.close()
