"""An explicit ``settle`` racing another process that deletes the agent and makes it
again (another store on the same database), at the two places such a race can reach.

1. **The settle's row.** After settle's last look at the head (``_same_stream``) and
   before its write, the other process deletes the agent and makes it again up to or
   past the settled seq. The row settle stores is the OLD stream's state at that seq.
   On SQLite the one commit (``replace_snapshot``) checks the head's identity and
   refuses it; the other engines stored it with no head — PostgreSQL, Redis and memory
   with ``save_snapshot`` until the last session, S3, tiered and a Redis Cluster until
   this one — the old state over the new stream's own row at that seq (an upsert): its
   compacted base replaced, so every load of the new stream failed (its events chain
   from another link: IntegrityError, its history gone), or its snapshot replaced
   (verify: "snapshot does not belong to this stream's chain"). Now every engine that
   settles commits the row (with the removal of the row it replaces) at the head and
   its event's checksum — ``replace_snapshot`` on SQLite, Redis (a cluster too) and
   tiered, an ``append_together`` change on PostgreSQL and memory — and the settle
   stores nothing (None); S3, which cannot, refuses a settle.
2. **A write planned on the cached stream.** The settle reads the agent through the
   read path, which validates the cached record and puts the new stream's in its place
   (as ``get`` or ``load`` do). A :class:`~statekeeper.store.agent.DurableAgent`
   planned its write on the old stream: it carries that stream's chain link, and its
   save is refused (ConflictError, "deleted and re-created"), not applied to the new
   stream — the settle's read changes nothing of that.

The hooks make the other process act at the named point; no timing.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import CapabilityUnsupported, ConflictError
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url, namespace

#: every engine that settles (``full_snapshot_every=1`` and PRUNE): a Redis Cluster
#: started by the tests (slow: it takes seconds to form), tiered (memory -> SQLite ->
#: S3). S3 refuses a settle: test_s3_refuses_a_settle_and_writes_nothing
ENGINES = [
    "sqlite",
    "postgresql",
    "redis",
    pytest.param("redis-cluster", marks=pytest.mark.slow),
    "tiered",
]


@pytest.fixture(scope="module")
def _cluster() -> Iterator[Any]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("needs redis-server and redis-cli")
    from statekeeper.testing.redis_cluster import LocalRedisCluster

    with LocalRedisCluster(masters=3, replicas=0) as c:
        yield c


@contextlib.contextmanager
def _url(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """``fresh_url``, and a Redis Cluster's under a prefix of the test's own."""
    if engine != "redis-cluster":
        with fresh_url(engine, tmp_path) as url:
            yield url
        return
    cluster = request.getfixturevalue("_cluster")
    yield f"{cluster.url}?prefix={namespace(tmp_path)}:"


async def _remake(other: StateStore, upto: int, compact: bool) -> None:
    """``other`` deletes agent ``a`` and makes it again: ``{"new": n}`` at seq n, a
    snapshot at 16 (``other.snapshot``); ``compact``: on to ``upto`` and compacted to
    that snapshot (its base 16: the only record of the state there)."""
    assert await other.delete("a")
    for n in range(1, 17):
        await other.save("a", {"new": n})
    assert await other.snapshot("a") == 16
    for n in range(17, upto + 1):
        await other.save("a", {"new": n})
    if compact:
        await apply_retention(other, RetentionPolicy.parse(f"* keep_last={upto - 16}\n"))
        assert await other.backend.stream_bases(["a"]) == [16]


@pytest.mark.parametrize(
    ("upto", "compact"), [(16, False), (18, True)], ids=["same_head", "compacted_past"]
)
@pytest.mark.parametrize("engine", ENGINES)
async def test_a_settle_never_stores_the_old_stream_in_the_one_made_again(
    tmp_path: Path, engine: str, upto: int, compact: bool, request: pytest.FixtureRequest
) -> None:
    with _url(engine, tmp_path, request) as url:
        async with (
            StateStore(url, snapshot_every=10, settle_after=None) as store,
            StateStore(url, settle_after=None) as other,
        ):
            for n in range(1, 17):
                await store.save("a", {"old": n})
            policy = store._writes.snapshots
            prepare = policy.prepare
            ran: list[int] = []

            async def meanwhile(record: Any) -> None:
                # (after settle's last look at the head, before its write)
                ran.append(record.seq)
                await _remake(other, upto, compact)
                await prepare(record)

            policy.prepare = meanwhile  # type: ignore[method-assign]
            try:
                assert await store.settle("a") is None  # another stream: nothing stored
            finally:
                policy.prepare = prepare  # type: ignore[method-assign]
            assert ran == [16]
            # this store serves the stream stored now, not the one it settled
            assert (await store.get("a")).data == {"new": upto}  # type: ignore[union-attr]
        async with StateStore(url, cache_size=0) as fresh:
            assert (await fresh.load("a")).data == {"new": upto}
            assert (await fresh.load("a", at_seq=16)).data == {"new": 16}
            assert (await fresh.verify()).problems == []


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_stream_made_again_and_compacted_after_the_settles_row_keeps_its_base(
    tmp_path: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    """Right after settle's row is committed, the other process deletes the agent, makes
    it again past the settled seq and compacts it to a base AT that seq. Was: settle then
    found the stream's base at its seq and stored its row there again, marked as a
    compaction's base (to restore a mark its row had replaced) — with no check: the old
    stream's state over the new stream's base, the only record of its state there
    (every load: IntegrityError, "chain broken"). A checked row replaced no base (a
    base is below the head it is made at): nothing is stored again."""
    with _url(engine, tmp_path, request) as url:
        async with (
            StateStore(url, snapshot_every=10, settle_after=None) as store,
            StateStore(url, settle_after=None) as other,
        ):
            for n in range(1, 17):
                await store.save("a", {"old": n})
            backend = store.backend
            ran: list[str] = []

            def after(name: str) -> None:
                real = getattr(backend, name)

                async def then_remade(*args: Any, **kwargs: Any) -> Any:
                    out = await real(*args, **kwargs)
                    if not ran:  # (the settle's row: its first write)
                        ran.append(name)
                        await _remake(other, 18, True)
                    return out

                setattr(backend, name, then_remade)

            for name in ("replace_snapshot", "append_together", "save_snapshot"):
                after(name)
            assert await store.settle("a") == 16  # (stored while the stream was its own)
            assert len(ran) == 1
        async with StateStore(url, cache_size=0) as fresh:
            assert await fresh.backend.stream_bases(["a"]) == [16]
            assert (await fresh.load("a")).data == {"new": 18}
            assert (await fresh.load("a", at_seq=16)).data == {"new": 16}
            assert (await fresh.verify()).problems == []


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_settle_of_the_made_again_stream_never_moves_an_agents_write_onto_it(
    tmp_path: Path, engine: str
) -> None:
    """A DurableAgent loaded the stream; another process deletes the agent and makes it
    again up to the same seq; this process settles the agent explicitly (its read
    caches the new stream, which it settles: that is the stream stored) and then the
    agent saves its change: refused as re-created, the new stream left as written."""
    with fresh_url(engine, tmp_path) as url:
        async with (
            StateStore(url, snapshot_every=10, settle_after=None) as store,
            StateStore(url, settle_after=None) as other,
        ):
            for n in range(1, 13):
                await store.save("a", {"old": n})
            agent = await store.agent("a")
            assert agent.seq == 12
            assert await other.delete("a")
            for n in range(1, 13):
                await other.save("a", {"new": n})
            assert await store.settle("a") == 12  # the new stream's head, settled
            agent.data["planned"] = True  # a change planned on the old stream
            with pytest.raises(ConflictError, match="re-created") as caught:
                await agent.save()
            assert caught.value.agent_id == "a"
            assert (await store.get("a")).data == {"new": 12}  # type: ignore[union-attr]
            await agent.refresh()
            assert agent.data == {"new": 12}
        async with StateStore(url, cache_size=0) as fresh:
            assert (await fresh.load("a")).data == {"new": 12}
            assert (await fresh.verify()).problems == []


async def test_s3_refuses_a_settle_and_writes_nothing(tmp_path: Path) -> None:
    """S3 has no commit spanning the head's object and the snapshot's: the row cannot be
    stored only at the head's identity, so an explicit settle is refused (typed, naming
    the engine) and writes nothing; an idle settle is skipped. Was: the row stored with
    ``save_snapshot`` (no head) — a stream deleted and made again past the seq between
    settle's look and its write got the old stream's state over its own row (both cases
    of test_a_settle_never_stores_the_old_stream_in_the_one_made_again failed on S3)."""
    with fresh_url("s3", tmp_path) as url:
        async with StateStore(url, snapshot_every=10, settle_after=0) as store:
            for n in range(1, 13):
                await store.save("a", {"old": n})
            await store.idle_settled()
            stats = store.stats().idle_settles
            assert stats is not None and (stats.settled, stats.failed) == (0, 0)
            assert stats.skipped >= 1
            with pytest.raises(CapabilityUnsupported, match="settle") as caught:
                await store.settle("a")
            assert (caught.value.backend, caught.value.capability) == ("s3", "settle")
            assert (await store.backend.latest_snapshot("a")).seq == 10  # type: ignore[union-attr]
            assert (await store.load("a")).data == {"old": 12}


@pytest.mark.parametrize("engine", ["postgresql", "redis"])
async def test_a_settle_folded_from_a_tail_at_the_head_removes_nothing_of_a_stream_made_again(
    tmp_path: Path, engine: str
) -> None:
    """The settled record folded from a snapshot at the head (another writer's tail
    there): its event's checksum is not in the record. Was: the removal of the row the
    settle replaced went in a second commit checked at the head's seq alone — the agent
    deleted and made again up to the same seq just before it lost its own snapshot at
    that seq (14 here: loads past it replay from the start). Now the removal is in the
    row's commit, checked at the head's seq and event: no second commit to reach."""
    with fresh_url(engine, tmp_path) as url:
        async with (
            StateStore(url, snapshot_every=10, settle_after=None, cache_size=0) as store,
            StateStore(url, snapshot_every=2, full_snapshot_every=8, settle_after=None) as tails,
            StateStore(url, settle_after=None) as other,
        ):
            for n in range(1, 15):
                await tails.save("a", {"old": n})
            assert await store.settle("a") == 14
            for n in range(15, 17):
                await tails.save("a", {"old": n})  # (a tail at 16, on the row at 14)
            at16 = await store.backend.latest_snapshot("a", 16)
            assert at16 is not None and at16.seq == 16
            backend = store.backend
            removals: list[Any] = []
            prune = backend.prune

            async def remade_first(*args: Any, **kwargs: Any) -> Any:
                removals.append(args)
                assert await other.delete("a")
                for n in range(1, 15):
                    await other.save("a", {"new": n})
                assert await other.snapshot("a") == 14
                for n in range(15, 17):
                    await other.save("a", {"new": n})
                return await prune(*args, **kwargs)

            backend.prune = remade_first  # type: ignore[method-assign]
            try:
                assert await store.settle("a") == 16
            finally:
                backend.prune = prune  # type: ignore[method-assign]
            if removals:  # (made again just before a removal of its own)
                kept = await backend.latest_snapshot("a", 15)
                assert kept is not None and kept.seq == 14, "the new stream's row at 14 removed"
            assert removals == []  # (the removal went in the row's commit)
        async with StateStore(url, cache_size=0) as fresh:
            assert (await fresh.load("a", at_seq=15)).data == {"old": 15}
            assert (await fresh.verify()).problems == []
