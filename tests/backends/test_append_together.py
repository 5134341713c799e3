"""``Backend.append_together``: several streams' appends in one commit, all or none
(what the audit log's entries are committed with)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from statekeeper.backends.base import Backend
from statekeeper.backends.url import open_backend
from statekeeper.errors import CapabilityUnsupported, ConflictError
from statekeeper.records import AppendRequest, RawEvent

from ._services import fresh_url


def _request(agent_id: str, expected: int, key: str | None = None) -> AppendRequest:
    seq = expected + 1
    event = RawEvent(seq, "e", 1.0 + seq, b"payload-%d" % seq, b"sum-%d" % seq)
    return AppendRequest(agent_id, expected, [event], idempotency_key=key)


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    with fresh_url(request.param, tmp_path) as url:
        engine = open_backend(url)
        try:
            yield engine
        finally:
            await engine.close()


async def test_all_commit_together(backend: Backend) -> None:
    assert backend.appends_together
    results = await backend.append_together([_request("a", 0), _request("b", 0)])
    assert [(r.agent_id, r.last_seq) for r in results if r is not None] == [("a", 1), ("b", 1)]
    assert await backend.head("a") == 1 and await backend.head("b") == 1


async def test_a_conflict_writes_nothing(backend: Backend) -> None:
    await backend.append(_request("b", 0))
    with pytest.raises(ConflictError) as caught:
        # "a" alone would succeed; "b" expects a head it does not have
        await backend.append_together([_request("a", 0), _request("b", 0)])
    assert caught.value.agent_id == "b"
    assert await backend.head("a") == 0
    assert await backend.head("b") == 1


async def test_a_duplicate_writes_nothing(backend: Backend) -> None:
    await backend.append(_request("a", 0, key="k"))
    results = await backend.append_together([_request("a", 1, key="k"), _request("b", 0)])
    first, second = results
    assert first is not None and first.duplicate and first.last_seq == 1
    assert second is None
    assert await backend.head("a") == 1 and await backend.head("b") == 0


async def test_a_delete_and_a_snapshot_commit_with_the_appends(backend: Backend) -> None:
    from statekeeper.records import RawSnapshot, StreamChange

    await backend.append(_request("gone", 0))
    await backend.append(_request("gone", 1))
    await backend.append(_request("kept", 0))
    snap = RawSnapshot(1, 2.0, b"state", b"snap-sum")
    await backend.append_together(
        [_request("log", 0)],
        [StreamChange("gone", delete_at=2), StreamChange("kept", snapshot=snap)],
    )
    assert await backend.head("log") == 1
    assert await backend.head("gone") == 0 and await backend.read("gone", 0) == []
    assert await backend.latest_snapshot("kept") == snap


async def test_a_change_whose_stream_moved_writes_nothing(backend: Backend) -> None:
    from statekeeper.records import RawSnapshot, StreamChange

    await backend.append(_request("a", 0))
    await backend.append(_request("a", 1))
    for change in (
        StreamChange("a", delete_at=1),  # its head is 2 now: another writer appended
        StreamChange("a", snapshot=RawSnapshot(3, 2.0, b"s", b"c")),  # no event 3
        StreamChange("missing", delete_at=1),
    ):
        with pytest.raises(ConflictError) as caught:
            await backend.append_together([_request("log", 0)], [change])
        assert caught.value.agent_id == change.agent_id
    assert await backend.head("log") == 0  # nor the append it went with
    assert await backend.head("a") == 2 and await backend.latest_snapshot("a") is None


async def test_a_malformed_change_is_refused_before_anything(backend: Backend) -> None:
    from statekeeper.errors import ConfigurationError, InvalidAgentId
    from statekeeper.records import RawSnapshot, StreamChange

    snap = RawSnapshot(1, 2.0, b"s", b"c")
    for change, error in (
        (StreamChange("a"), ConfigurationError),  # neither a delete nor a snapshot
        (StreamChange("a", delete_at=1, snapshot=snap), ConfigurationError),  # both
        (StreamChange("a", delete_at=0), ConfigurationError),
        (StreamChange("log", delete_at=1), ConfigurationError),  # a stream appended to
        (StreamChange("", delete_at=1), InvalidAgentId),
    ):
        with pytest.raises(error):
            await backend.append_together([_request("log", 0)], [change])
    assert await backend.head("log") == 0


async def test_a_prune_and_its_base_snapshot_commit_with_the_appends(backend: Backend) -> None:
    from statekeeper.records import RawSnapshot, StreamChange

    for expected in range(5):
        await backend.append(_request("a", expected))
    for seq in (1, 2, 4):
        await backend.save_snapshot("a", RawSnapshot(seq, 2.0, b"s%d" % seq, b"c%d" % seq))
    base = RawSnapshot(3, 2.0, b"base", b"base-sum")
    await backend.append_together(
        [_request("log", 0)],
        [StreamChange("a", snapshot=base, prune_to=3, drop_snapshots=(4,))],
    )
    assert await backend.head("log") == 1
    assert [e.seq for e in await backend.read("a", 0)] == [4, 5]  # history to 3 gone
    assert await backend.latest_snapshot("a") == base  # 4 thinned, 1 and 2 below the base
    assert await backend.latest_snapshot("a", at_or_below=2) is None


async def test_a_prune_whose_preconditions_fail_writes_nothing(backend: Backend) -> None:
    from statekeeper.errors import ConfigurationError
    from statekeeper.records import RawSnapshot, StreamChange

    for expected in range(3):
        await backend.append(_request("a", expected))
    await backend.save_snapshot("a", RawSnapshot(1, 2.0, b"s", b"c"))
    for change in (
        StreamChange("a", prune_to=2),  # no snapshot at 2 to become the base
        StreamChange("a", prune_to=3, snapshot=RawSnapshot(3, 2.0, b"s", b"c")),  # the head
        StreamChange("a", prune_to=1, drop_snapshots=(1,)),  # the base itself
    ):
        with pytest.raises(ConfigurationError):
            await backend.append_together([_request("log", 0)], [change])
    assert await backend.head("log") == 0
    assert [e.seq for e in await backend.read("a", 0)] == [1, 2, 3]
    assert (await backend.latest_snapshot("a") or RawSnapshot(0, 0, b"", b"")).seq == 1
    with pytest.raises(ConfigurationError, match="give prune_to"):
        await backend.append_together(
            [_request("log", 0)], [StreamChange("a", drop_snapshots=(1,))]
        )
    with pytest.raises(ConfigurationError, match="one of the two"):
        await backend.append_together(
            [_request("log", 0)], [StreamChange("a", delete_at=3, prune_to=1)]
        )


async def test_redis_commits_them_in_one_script_a_fence_and_a_tag_included(tmp_path: Path) -> None:
    """On Redis the checks of every stream run before any write of the one script: a
    stale fence or head tag on the LAST request leaves the first one and a delete
    unwritten, and the feed gets the events of a committed call in order."""
    import dataclasses

    from statekeeper.errors import LeaseLost
    from statekeeper.records import StreamChange

    with fresh_url("redis", tmp_path) as url:
        engine = open_backend(url)
        try:
            await engine.append(_request("gone", 0))
            lease = await engine.acquire_lease("b", "me", 30)
            fenced = dataclasses.replace(_request("b", 0), fence=("me", lease.token + 1))
            with pytest.raises(LeaseLost):
                await engine.append_together(
                    [_request("a", 0), fenced], [StreamChange("gone", delete_at=1)]
                )
            await engine.append(dataclasses.replace(_request("b", 0), head_tag=b"other"))
            tagged = dataclasses.replace(_request("b", 1), check_tag=True, expected_tag=b"t")
            with pytest.raises(ConflictError):
                await engine.append_together([_request("a", 0), tagged])
            assert await engine.head("a") == 0 and await engine.head("gone") == 1
            before = (await engine.feed_bounds())[1]
            fenced = dataclasses.replace(_request("b", 1), fence=("me", lease.token))
            await engine.append_together(
                [_request("a", 0), fenced], [StreamChange("gone", delete_at=1)]
            )
            fed = [(r.agent_id, r.event.seq) for r in await engine.read_feed(before)]
            assert fed == [("a", 1), ("b", 2)]
            assert await engine.head("gone") == 0
            assert [a.agent_id for a in await engine.list_agents()] == ["a", "b"]
        finally:
            await engine.close()


async def test_engines_without_it_refuse(tmp_path: Path) -> None:
    from statekeeper.backends.tiered import TieredBackend

    durable = open_backend(f"sqlite:///{tmp_path / 'durable.db'}")
    engine = TieredBackend(durable, hot=open_backend("memory://"))
    try:
        assert not engine.appends_together
        with pytest.raises(CapabilityUnsupported, match="append_together"):
            await engine.append_together([_request("a", 0)])
        assert await engine.head("a") == 0
    finally:
        await engine.close()


async def test_redis_sharded_on_one_server_commits_across_shards(tmp_path: Path) -> None:
    """The sharded key layout on one server (agents under different hash tags): one
    script still writes them all, each event in its own shard's feed."""
    from statekeeper.backends.redis import RedisBackend

    with fresh_url("redis", tmp_path) as url:
        engine = open_backend(f"{url}&shards=4")
        try:
            assert isinstance(engine, RedisBackend) and engine.appends_together
            agents = ["a", "b", "c", "d", "e"]
            shards = {engine.layout.shard_of(a) for a in agents}
            assert len(shards) > 1, "the agents live in different shards"
            await engine.append_together([_request(a, 0) for a in agents])
            with pytest.raises(ConflictError):
                await engine.append_together([_request("f", 0), _request("a", 0)])
            assert [await engine.head(a) for a in [*agents, "f"]] == [1, 1, 1, 1, 1, 0]
            for shard in shards:  # each event in the feed of its agent's shard
                fed = [(r.agent_id, r.event.seq) for r in await engine.read_shard_feed(shard)]
                assert fed == [(a, 1) for a in agents if engine.layout.shard_of(a) == shard]
        finally:
            await engine.close()


async def test_a_rewrite_commits_with_the_appends_or_not_at_all(backend: Backend) -> None:
    # (new: key rotation and schema migration commit an agent's rewrite with its entry)
    from statekeeper.errors import ConfigurationError
    from statekeeper.records import RewriteRequest, StreamChange

    for expected in range(2):
        await backend.append(_request("a", expected))
    new = RawEvent(1, "e", 2.0, b"rewritten-1", b"sum-r1")
    change = StreamChange("a", rewrite=RewriteRequest("a", 2, None, (new,)))
    if not backend.changes_leases_and_rewrites:  # (Redis) refused, never ignored
        with pytest.raises(CapabilityUnsupported):
            await backend.append_together([_request("log", 0)], [change])
        assert await backend.head("log") == 0
        assert [e.payload for e in await backend.read("a", 0)] == [b"payload-1", b"payload-2"]
        return
    await backend.append_together([_request("log", 0)], [change])
    assert [e.payload for e in await backend.read("a", 0)] == [b"rewritten-1", b"payload-2"]
    assert (await backend.read("a", 0))[0].type == "e"  # type and time kept
    assert await backend.head("log") == 1
    # a stale head: ConflictError naming the agent, nothing written (the append neither)
    stale = StreamChange("a", rewrite=RewriteRequest("a", 1, None, (new,)))
    with pytest.raises(ConflictError) as caught:
        await backend.append_together([_request("log", 1)], [stale])
    assert caught.value.agent_id == "a"
    assert await backend.head("log") == 1
    # a conflicting append: the rewrite is not made either
    other = RawEvent(2, "e", 3.0, b"rewritten-2", b"sum-r2")
    change = StreamChange("a", rewrite=RewriteRequest("a", 2, None, (other,)))
    with pytest.raises(ConflictError):
        await backend.append_together([_request("log", 0)], [change])
    assert [e.payload for e in await backend.read("a", 0)] == [b"rewritten-1", b"payload-2"]
    # malformed: refused before anything is written
    for bad in (
        StreamChange("b", rewrite=RewriteRequest("a", 2, None, (other,))),  # not its stream
        StreamChange("a", delete_at=2, rewrite=RewriteRequest("a", 2, None, (other,))),
        StreamChange("a", rewrite=RewriteRequest("a", 2, None, (RawEvent(3, "e", 1, b"x", b"y"),))),
    ):
        with pytest.raises(ConfigurationError):
            await backend.append_together([_request("log", 1)], [bad])
    assert await backend.head("log") == 1
