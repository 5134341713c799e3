"""The tiered (hybrid) backend: the shared contract in several tier combinations, the
hot tier dying and coming back mid-run, and demotion to / rehydration from cold."""

from __future__ import annotations

import asyncio
import os
import random
import signal
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends import MemoryBackend, SQLiteBackend, open_backend, tiered_url
from statekeeper.backends.base import Backend, Capability
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.errors import CapabilityUnsupported, ConfigurationError, ReadOnlyStore
from statekeeper.records import AppendRequest, AppendResult, RawSnapshot
from statekeeper.store import StateStore
from statekeeper.testing import BackendConformance, request

from ..store.test_stale_snapshot import leftover_at_head, leftover_served
from ._services import (
    POSTGRES_DSN,
    REDIS_URL,
    delete_prefix,
    drop_schema,
    moto_endpoint,
    namespace,
    private_redis,
    require_postgres,
    require_redis,
    s3_credentials,
)


def _sqlite(tmp_path: Path) -> SQLiteBackend:
    return SQLiteBackend(tmp_path / "durable.db")


def _postgres(tmp_path: Path, *, readonly: bool = False) -> Backend:
    from statekeeper.backends.postgres import PostgresBackend

    return PostgresBackend(POSTGRES_DSN, schema=namespace(tmp_path), max_size=4, readonly=readonly)


def _redis(tmp_path: Path, url: str = REDIS_URL) -> Backend:
    from statekeeper.backends.redis import RedisBackend

    return RedisBackend(url, prefix=namespace(tmp_path) + ":", retry_timeout=0)


def _s3(tmp_path: Path, *, readonly: bool = False) -> Backend:
    from statekeeper.backends.s3 import S3Backend

    return S3Backend(
        namespace(tmp_path, "sk-t-"),
        "cold",
        endpoint_url=moto_endpoint(),
        create_bucket=True,
        readonly=readonly,
        **s3_credentials(),
    )


def _drop_bucket(tmp_path: Path) -> None:
    from .test_s3 import _drop_bucket as drop

    drop(namespace(tmp_path, "sk-t-"))


@pytest.fixture
def servers(tmp_path: Path) -> Any:
    """PostgreSQL + Redis + S3 (moto), each namespaced to the test, cleaned afterwards."""
    pytest.importorskip("psycopg")
    pytest.importorskip("redis")
    pytest.importorskip("boto3")
    require_postgres()
    require_redis()
    moto_endpoint()
    drop_schema(namespace(tmp_path))
    yield
    drop_schema(namespace(tmp_path))
    delete_prefix(namespace(tmp_path) + ":")
    _drop_bucket(tmp_path)


# -- the contract -------------------------------------------------------------------------


class TestTieredMemorySQLiteConformance(BackendConformance):
    """memory (hot) → SQLite (durable)."""

    async def make_backend(self, tmp_path: Path) -> TieredBackend:
        return TieredBackend(_sqlite(tmp_path), hot=MemoryBackend())

    async def open_peer(self, tmp_path: Path) -> TieredBackend:
        return TieredBackend(_sqlite(tmp_path), hot=MemoryBackend())

    async def open_readonly(self, tmp_path: Path) -> Backend:
        # through the URL, as the CLI opens it
        url = tiered_url(hot="memory://", durable=f"sqlite:///{tmp_path / 'durable.db'}")
        return open_backend(url, readonly=True)


@pytest.mark.slow  # the cold tier is S3 through a moto server
class TestTieredRedisPostgresS3Conformance(BackendConformance):
    """Redis (hot) → PostgreSQL (durable) → S3 (cold): the production setup."""

    @pytest.fixture(autouse=True)
    def _servers(self, servers: None) -> None:
        """Require the three servers; namespace them to the test."""

    async def make_backend(self, tmp_path: Path) -> TieredBackend:
        return TieredBackend(
            _postgres(tmp_path), hot=_redis(tmp_path), cold=_s3(tmp_path), idle_after=3600
        )

    async def open_peer(self, tmp_path: Path) -> TieredBackend:
        return await self.make_backend(tmp_path)

    async def open_readonly(self, tmp_path: Path) -> TieredBackend:
        return TieredBackend(
            _postgres(tmp_path, readonly=True),
            hot=_redis(tmp_path),
            cold=_s3(tmp_path, readonly=True),
            idle_after=3600,
            readonly=True,
        )


class _AlwaysCold(TieredBackend):
    """Demotes every agent it writes right after the write: every later call has to
    rehydrate it, so the contract is checked through the cold path."""

    async def append(self, request: AppendRequest) -> AppendResult:
        result = await super().append(request)
        await self.demote(request.agent_id)
        return result

    async def append_batch(self, requests: Any) -> list[AppendResult | BaseException]:
        results = await super().append_batch(requests)
        for agent_id in sorted({r.agent_id for r in requests}):
            await self.demote(agent_id)
        return results

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        await super().save_snapshot(agent_id, snapshot)
        await self.demote(agent_id)


@pytest.mark.slow  # the cold tier is S3 through a moto server
class TestTieredThroughColdConformance(BackendConformance):
    """memory → PostgreSQL → S3 with every agent demoted after every write.

    No peer: demotion must not race with another instance's writes (documented).
    """

    @pytest.fixture(autouse=True)
    def _servers(self, servers: None) -> None:
        """Require the servers; namespace them to the test."""

    async def make_backend(self, tmp_path: Path) -> TieredBackend:
        return _AlwaysCold(
            _postgres(tmp_path), hot=MemoryBackend(), cold=_s3(tmp_path), idle_after=3600
        )

    async def open_readonly(self, tmp_path: Path) -> TieredBackend:
        """Every agent is demoted: the reader answers from the cold tier."""
        return TieredBackend(
            _postgres(tmp_path, readonly=True),
            hot=MemoryBackend(),
            cold=_s3(tmp_path, readonly=True),
            idle_after=3600,
            readonly=True,
        )


class TestTieredThroughSQLiteColdConformance(BackendConformance):
    """memory → SQLite → SQLite (another file) with every agent demoted after every
    write: idempotency keys, snapshots and head tags must survive each round trip."""

    async def make_backend(self, tmp_path: Path) -> TieredBackend:
        cold = SQLiteBackend(tmp_path / "cold.db")
        return _AlwaysCold(_sqlite(tmp_path), hot=MemoryBackend(), cold=cold, idle_after=3600)

    async def open_readonly(self, tmp_path: Path) -> Backend:
        """Every agent is demoted: the reader answers from the cold tier (opened
        through the URL, as the CLI does; demote_interval must start no demoter)."""
        url = tiered_url(
            hot="memory://",
            durable=f"sqlite:///{tmp_path / 'durable.db'}",
            cold=f"sqlite:///{tmp_path / 'cold.db'}",
            idle_after=0.001,
            demote_interval=0.001,
        )
        return open_backend(url, readonly=True)


class TestTieredThroughMemoryColdConformance(BackendConformance):
    """memory → memory → memory, every agent demoted after every write."""

    async def make_backend(self, tmp_path: Path) -> TieredBackend:
        return _AlwaysCold(MemoryBackend(), hot=MemoryBackend(), cold=MemoryBackend(), idle_after=1)


# -- idempotency keys through the cold tier (issue 9, item 2) ------------------------------


def _tier(kind: str, tmp_path: Path, name: str) -> Backend:
    if kind == "memory":
        return MemoryBackend()
    if kind == "sqlite":
        return SQLiteBackend(tmp_path / f"{name}.db")
    if kind == "postgres":
        pytest.importorskip("psycopg")
        require_postgres()
        return _postgres(tmp_path)
    assert kind == "s3"
    pytest.importorskip("boto3")
    return _s3(tmp_path)


@pytest.mark.parametrize(
    ("durable_kind", "cold_kind"),
    [
        ("sqlite", "memory"),
        ("sqlite", "sqlite"),
        ("memory", "sqlite"),
        ("memory", "memory"),
        ("sqlite", "s3"),
        ("postgres", "sqlite"),
    ],
)
async def test_a_retried_step_after_a_cold_round_trip_is_not_stored_twice(
    tmp_path: Path, durable_kind: str, cold_kind: str
) -> None:
    """A save retried with an idempotency key already used before the agent was
    demoted and rehydrated is a duplicate — not a second, doubled step."""
    durable = _tier(durable_kind, tmp_path, "durable")
    cold = _tier(cold_kind, tmp_path, "cold")
    backend = TieredBackend(durable, hot=MemoryBackend(), cold=cold, idle_after=3600)
    try:
        async with StateStore(backend) as store:
            await store.save("a", {"step": 1}, idempotency_key="step-1")
            await store.save("a", {"step": 2}, idempotency_key="step-2")
            await store.save("a", {"step": 3})
            assert await backend.demote("a")
            assert await durable.head("a") == 0 and await cold.head("a") == 3
            # the retry of step 2 (its reply was lost, say): recognised, not re-applied
            again = await store.save("a", {"step": 2}, idempotency_key="step-2")
            assert again.duplicate and (again.first_seq, again.last_seq) == (2, 2)
            assert await backend.head("a") == 3
            # and again after a second round trip, from a store with no cache
            assert await backend.demote("a")
            async with StateStore(backend) as fresh:
                retry = await fresh.save("a", {"step": 1}, idempotency_key="step-1")
                assert retry.duplicate and retry.last_seq == 1
                assert (await fresh.load("a")).data == {"step": 3}
                assert [e.seq async for e in fresh.history("a")] == [1, 2, 3]
                keys = await backend.idempotency_keys("a")
                assert keys == [("step-1", 1, 1), ("step-2", 2, 2)]
    finally:
        await backend.close()
        if cold_kind == "s3":
            _drop_bucket(tmp_path)
        if durable_kind == "postgres":
            drop_schema(namespace(tmp_path))


class _NoKeyExport(MemoryBackend):
    """An engine that cannot list idempotency keys, and says so."""

    capabilities = MemoryBackend.capabilities - {Capability.KEY_EXPORT}
    idempotency_keys = Backend.idempotency_keys


def test_a_tier_that_cannot_export_keys_is_refused_as_cold_or_durable(tmp_path: Path) -> None:
    with pytest.raises(CapabilityUnsupported) as info:
        TieredBackend(_sqlite(tmp_path), cold=_NoKeyExport(), idle_after=60)
    assert info.value.capability == Capability.KEY_EXPORT.value
    assert "cold tier" in str(info.value)
    with pytest.raises(CapabilityUnsupported, match="durable tier"):
        TieredBackend(_NoKeyExport(), cold=MemoryBackend(), idle_after=60)
    # without a cold tier nothing needs it: the tiered backend just does not offer it
    backend = TieredBackend(_NoKeyExport(), hot=MemoryBackend())
    assert not backend.supports(Capability.KEY_EXPORT)
    with pytest.raises(CapabilityUnsupported):
        asyncio.run(backend.idempotency_keys("a"))
    asyncio.run(backend.close())


async def test_a_tier_of_record_that_expires_agents_is_refused(tmp_path: Path) -> None:
    """A Redis durable or cold tier with a TTL would delete agents silently."""
    require_redis()
    from statekeeper.backends.redis import RedisBackend

    prefix = namespace(tmp_path) + ":"
    expiring = RedisBackend(REDIS_URL, prefix=prefix, ttl=60)
    keeping = RedisBackend(REDIS_URL, prefix=prefix + "k:")
    try:
        assert expiring.expires_agents and not keeping.expires_agents
        with pytest.raises(ConfigurationError, match="cold tier deletes agents after a TTL"):
            TieredBackend(_sqlite(tmp_path), cold=expiring, idle_after=60)
        with pytest.raises(ConfigurationError, match="durable tier deletes agents"):
            TieredBackend(expiring)
        url = tiered_url(
            durable=f"sqlite:///{tmp_path / 'd.db'}", cold=f"{REDIS_URL}?ttl=60", idle_after=60
        )
        with pytest.raises(ConfigurationError, match="cold tier"):
            open_backend(url)
        # a TTL on the hot tier is fine: the hot tier is only a copy
        hot = TieredBackend(_sqlite(tmp_path), hot=expiring, cold=keeping, idle_after=60)
        await hot.close()
    finally:
        await expiring.close()
        await keeping.close()
        delete_prefix(prefix)


async def test_verify_on_an_engine_without_key_export(tmp_path: Path) -> None:
    """``verify`` checks idempotency records where the engine can list them and, on an
    engine that declares it cannot, checks everything else instead of failing."""
    async with StateStore(_NoKeyExport()) as store:
        await store.save("a", {"n": 1}, idempotency_key="k1")
        await store.save("a", {"n": 2})
        report = await store.verify()
        assert report.ok and report.keys == 0
    async with StateStore(MemoryBackend()) as store:
        await store.save("a", {"n": 1}, idempotency_key="k1")
        report = await store.verify()
        assert report.ok and report.keys == 1


# -- hot tier -----------------------------------------------------------------------------


_SPIED = (
    "append",
    "append_batch",
    "head",
    "head_tag",
    "read",
    "seq_at",
    "latest_snapshot",
    "lookup_key",
    "save_snapshot",
    "list_agents",
    "delete_agent",
)


class _Spy(Backend):
    """Counts the calls that reach a backend."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: dict[str, int] = {}

    def __getattribute__(self, name: str) -> Any:
        if name in _SPIED:
            calls = object.__getattribute__(self, "calls")
            calls[name] = calls.get(name, 0) + 1
            return getattr(object.__getattribute__(self, "inner"), name)
        return object.__getattribute__(self, name)

    async def append(self, request: AppendRequest) -> AppendResult:
        raise AssertionError  # pragma: no cover - routed by __getattribute__

    lookup_key = head = head_tag = read = seq_at = save_snapshot = latest_snapshot = append  # type: ignore[assignment]
    list_agents = delete_agent = health = append  # type: ignore[assignment]

    async def close(self) -> None:
        await self.inner.close()


async def test_reads_are_served_by_the_hot_tier(tmp_path: Path) -> None:
    """Events and snapshots come from the hot tier; the durable tier, the authority,
    answers only the head (and the head check before each hot read)."""
    durable = _Spy(_sqlite(tmp_path))
    backend = TieredBackend(durable, hot=MemoryBackend())
    try:
        await backend.append(request("a", 0, 5, snap_at=3))
        durable.calls.clear()
        for _ in range(10):
            assert await backend.head("a") == 5
            assert len(await backend.read("a", 2)) == 3
            assert (await backend.latest_snapshot("a")) is not None
        assert durable.calls == {"head": 10, "head_tag": 20}
        assert backend.stats["hot_hits"] == 20
        assert await backend.seq_at("a", 4.5) == 4  # always the durable tier's answer
        assert durable.calls["seq_at"] == 1
    finally:
        await backend.close()


async def test_a_cold_hot_tier_is_filled_on_read(tmp_path: Path) -> None:
    first = TieredBackend(_sqlite(tmp_path))  # no hot tier: writes only durable
    await first.append(request("a", 0, 1500, snap_at=1400))
    await first.append(request("a", 1500, 3, key="k"))
    await first.close()
    hot = MemoryBackend()
    backend = TieredBackend(_sqlite(tmp_path), hot=hot)
    try:
        assert await hot.head("a") == 0
        assert await backend.head("a") == 1503  # the durable tier's answer
        assert len(await backend.read("a", 1500)) == 3  # miss: durable answers, hot is filled
        assert await hot.head("a") == 1503
        assert await hot.read("a") == await backend.durable.read("a")
        assert (await hot.latest_snapshot("a")) == await backend.durable.latest_snapshot("a")
        assert backend.stats["fills"] == 1
        # keys stay with the durable tier, which decides duplicates
        assert await backend.append(request("a", 0, 3, key="k")) == AppendResult(
            "a", 1501, 1503, True
        )
        # snapshots older than the hot copy's come from the durable tier
        assert (await backend.latest_snapshot("a", 1399)) is None
        assert (await backend.latest_snapshot("a", 1450)).seq == 1400  # type: ignore[union-attr]
    finally:
        await backend.close()


async def test_a_stale_hot_copy_is_dropped_when_the_durable_tier_disagrees(
    tmp_path: Path,
) -> None:
    """Another process (sharing the hot tier) moved the agent without updating it."""
    hot = MemoryBackend()
    mine = TieredBackend(_sqlite(tmp_path), hot=hot)
    theirs = _sqlite(tmp_path)  # writes the durable tier only (as if its hot update failed)
    try:
        await mine.append(request("a", 0, 2))
        await theirs.append(request("a", 2))
        with pytest.raises(Exception) as info:
            await mine.append(request("a", 2))
        assert type(info.value).__name__ == "ConflictError"
        assert await hot.head("a") == 0  # dropped
        assert await mine.head("a") == 3
        assert [e.seq for e in await mine.read("a")] == [1, 2, 3]  # durable answers, refills
        assert await hot.head("a") == 3
    finally:
        await mine.close()
        await theirs.close()


async def test_a_private_hot_tier_never_hides_another_process_writes(tmp_path: Path) -> None:
    """memory:// hot tiers are per process: each checks its copy against the durable
    head and head tag before answering."""
    from statekeeper.records import RewriteRequest

    mine = TieredBackend(_sqlite(tmp_path), hot=MemoryBackend())
    theirs = TieredBackend(_sqlite(tmp_path), hot=MemoryBackend())
    try:
        await mine.append(request("a", 0, 2))
        assert len(await mine.read("a")) == 2  # served by mine's hot copy
        await theirs.append(request("a", 2))
        assert await mine.head("a") == 3
        assert [e.seq for e in await mine.read("a")] == [1, 2, 3]
        assert mine.hot is not None and await mine.hot.head("a") == 3  # refilled
        new = (await mine.read("a"))[0].__class__(1, "patch", 1.0, b"rewritten", b"s")
        await theirs.rewrite(RewriteRequest("a", 3, None, (new,), head_tag=b"t"))
        assert (await mine.read("a"))[0].payload == b"rewritten"
        assert await mine.head_tag("a") == (3, b"t")
    finally:
        await mine.close()
        await theirs.close()


class _Flaky(MemoryBackend):
    """A hot tier that can be switched off (every call raises) and on again."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def __getattribute__(self, name: str) -> Any:
        if name in (
            "append",
            "append_batch",
            "head",
            "read",
            "seq_at",
            "latest_snapshot",
            "save_snapshot",
            "delete_agent",
        ) and object.__getattribute__(self, "down"):
            raise ConnectionError("hot tier is down")
        return object.__getattribute__(self, name)


class _SharedHot(_Spy):
    """A hot tier shared by several tiered backends, as a Redis server is (not a
    MemoryBackend, so nothing treats it as private to one process). ``down`` makes
    every call fail, as a frozen or unreachable server does."""

    def __init__(self) -> None:
        super().__init__(MemoryBackend())
        self.down = False

    def __getattribute__(self, name: str) -> Any:
        if name in _SPIED and object.__getattribute__(self, "down"):
            raise ConnectionError("hot tier is down")
        return super().__getattribute__(name)


async def test_a_hot_copy_left_stale_by_a_writer_that_died_is_never_served(
    tmp_path: Path,
) -> None:
    """Issue 9 item 1, in one process: a writer acknowledges seqs 4 and 5 while the
    shared hot tier is unreachable, then dies (its memory of the stale copy with it).
    The hot tier comes back holding seq 3: neither a long-running reader nor a new
    process may load seq 3 again."""
    shared = _SharedHot()
    writer = StateStore(TieredBackend(_sqlite(tmp_path), hot=shared, hot_retry_after=0))
    reader = StateStore(TieredBackend(_sqlite(tmp_path), hot=shared, hot_retry_after=0))
    try:
        for n in (1, 2, 3):
            await writer.save("a", {"n": n})
        assert (await reader.load("a")).seq == 3
        assert await shared.inner.head("a") == 3
        shared.down = True
        for n in (4, 5):
            assert (await writer.save("a", {"n": n})).last_seq == n  # acknowledged
        # the writer "dies": it is never used again, nothing of it is flushed or closed
        shared.down = False
        assert await shared.inner.head("a") == 3  # the stale copy is still there
        assert (await reader.load("a")).data == {"n": 5}
        async with StateStore(TieredBackend(_sqlite(tmp_path), hot=shared)) as fresh:
            assert (await fresh.load("a")).data == {"n": 5}
            assert await shared.inner.head("a") == 5  # dropped and refilled
            assert (await fresh.load("a")).data == {"n": 5}
    finally:
        await reader.close()


async def test_a_hot_tier_that_returns_with_old_data_never_serves_it(tmp_path: Path) -> None:
    hot = _Flaky()
    backend = TieredBackend(_sqlite(tmp_path), hot=hot, hot_retry_after=0)
    try:
        await backend.append(request("a", 0, 2))
        assert await hot.head("a") == 2
        hot.down = True
        await backend.append(request("a", 2, 3))  # durable only; "a" is now dirty
        assert await backend.head("a") == 5
        hot.down = False  # back, still holding the old copy (head 2)
        assert await hot.head("a") == 2
        assert await backend.head("a") == 5  # the old copy was deleted, then refilled
        assert [e.seq for e in await backend.read("a")] == [1, 2, 3, 4, 5]
        assert await hot.head("a") == 5
    finally:
        await backend.close()


async def _hybrid_run(
    store: StateStore, agents: int, steps: int, midway: Any, failures: list[BaseException]
) -> dict[str, int]:
    """``agents`` concurrent agents saving ``steps`` states; ``midway`` runs halfway."""
    done: dict[str, int] = {}
    half = asyncio.Event()
    counter = 0

    async def agent(n: int) -> None:
        nonlocal counter
        agent_id = f"agent-{n}"
        for step in range(steps):
            try:
                await store.save(agent_id, {"step": step, "n": n}, idempotency_key=f"{n}-{step}")
                done[agent_id] = step
            except Exception as exc:  # counted: the test expects none
                failures.append(exc)
            counter += 1
            if counter == agents * steps // 2:
                half.set()
            if step % 5 == 0:
                loaded = await store.load(agent_id)
                assert loaded.data["step"] == done.get(agent_id)
            await asyncio.sleep(random.random() * 0.003)

    async def inject() -> None:
        await half.wait()
        await midway()

    await asyncio.gather(inject(), *(agent(n) for n in range(agents)))
    return done


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_redis_killed_during_a_hybrid_run(tmp_path: Path, durability: str) -> None:
    """SIGKILL the hot tier's redis-server mid-run, start it again: 0 failed operations,
    0 lost writes, and the hot tier is refilled after it returns."""
    pytest.importorskip("redis")
    with private_redis() as server:
        hot = _redis(tmp_path, server.url)
        backend = TieredBackend(_sqlite(tmp_path), hot=hot, hot_retry_after=0.2)
        failures: list[BaseException] = []

        async def kill_and_restart() -> None:
            server.kill()
            await asyncio.sleep(0.5)  # keep working with no hot tier
            server.start()

        async with StateStore(backend, durability=durability, snapshot_every=7) as store:
            done = await _hybrid_run(
                store, agents=12, steps=40, midway=kill_and_restart, failures=failures
            )
            assert failures == []
            assert backend.stats["hot_failures"] > 0, "the fault was not injected"
            for n in range(12):
                assert done[f"agent-{n}"] == 39
                assert (await store.load(f"agent-{n}")).data == {"step": 39, "n": n}
            assert (await store.verify()).ok
            # the restarted (empty) redis is refilled lazily by reads: read every agent
            # again once the backend uses the hot tier again, until each is back in redis
            # (a condition: how long the backend leaves a failed tier alone, or a slow
            # call marking it down again on a loaded machine, only changes the rounds)
            check = _redis(tmp_path, server.url)
            try:
                await _until(lambda: _all_refilled(store, backend, check, 12))
            finally:
                await check.close()
            assert backend.stats["fills"] > 0
        # every acknowledged write is in the durable tier
        durable = _sqlite(tmp_path)
        try:
            for n in range(12):
                assert await durable.head(f"agent-{n}") == 40
        finally:
            await durable.close()


async def _all_refilled(
    store: StateStore, backend: TieredBackend, hot: Backend, agents: int
) -> bool:
    if not backend.hot_available():
        return False
    for n in range(agents):
        assert (await store.load(f"agent-{n}")).data == {"step": 39, "n": n}
    return all([await hot.head(f"agent-{n}") == 40 for n in range(agents)])


async def _until(condition: Any, limit: float = 120.0) -> None:
    """Wait until ``condition()`` (a coroutine function) is true; ``limit`` only stops a
    test whose condition can never come true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not await condition():
        assert loop.time() < deadline, "the condition never came true"
        await asyncio.sleep(0.02)


@pytest.mark.slow
async def test_redis_frozen_and_thawed_with_stale_data(tmp_path: Path) -> None:
    """SIGSTOP the hot tier (calls time out), write on, SIGCONT: it still holds the old
    copies; none of them is ever served, nothing fails, nothing is lost."""
    pytest.importorskip("redis")
    with private_redis() as server:
        assert server.proc is not None
        backend = TieredBackend(
            _sqlite(tmp_path),
            hot=_redis(tmp_path, server.url),
            hot_timeout=0.2,
            hot_retry_after=0.1,
        )
        failures: list[BaseException] = []

        async def freeze() -> None:
            assert server.proc is not None
            os.kill(server.proc.pid, signal.SIGSTOP)
            await asyncio.sleep(0.8)
            os.kill(server.proc.pid, signal.SIGCONT)

        async with StateStore(backend, snapshot_every=5) as store:
            await _hybrid_run(store, agents=8, steps=30, midway=freeze, failures=failures)
            assert failures == []
            assert backend.stats["hot_failures"] > 0
            for n in range(8):
                assert (await store.load(f"agent-{n}")).data == {"step": 29, "n": n}
                assert await backend.head(f"agent-{n}") == 30
            assert (await store.verify()).ok


async def test_postgres_and_redis_hybrid_store(tmp_path: Path, servers: None) -> None:
    url = tiered_url(
        hot=f"{REDIS_URL}?prefix={namespace(tmp_path)}:",
        durable=f"{POSTGRES_DSN}?schema={namespace(tmp_path)}",
    )
    async with StateStore(url, durability="group") as store:
        assert isinstance(store.backend, TieredBackend)
        await asyncio.gather(*(store.save(f"a{i}", {"i": i}) for i in range(20)))
        for i in range(20):
            assert (await store.load(f"a{i}")).data == {"i": i}
        assert await store.count_agents() == 20


# -- cold tier ----------------------------------------------------------------------------


async def test_idle_agents_are_demoted_and_rehydrated_transparently(
    tmp_path: Path, servers: None
) -> None:
    now = [1_000_000.0]
    backend = TieredBackend(
        _postgres(tmp_path),
        hot=MemoryBackend(),
        cold=_s3(tmp_path),
        idle_after=60,
        clock=lambda: now[0],
    )
    async with StateStore(backend, snapshot_every=4, clock=lambda: now[0]) as store:
        for i in range(10):
            await store.save("sleepy", {"i": i}, idempotency_key=f"s{i}")
        await store.save("busy", {"x": 1})
        now[0] += 30
        await store.save("busy", {"x": 2})
        now[0] += 45  # sleepy: idle 75 s; busy: 45 s
        assert await backend.demote_idle() == ["sleepy"]
        durable = backend.durable
        assert await durable.head("sleepy") == 0
        assert await durable.head(COLD_MARKER + "sleepy") == 2  # (its claim, and the demotion done)
        assert backend.cold is not None and await backend.cold.head("sleepy") == 10
        # still listed and counted, with its head and times
        infos = {i.agent_id: i for i in await backend.list_agents()}
        assert sorted(infos) == ["busy", "sleepy"]
        assert infos["sleepy"].head_seq == 10 and infos["sleepy"].created_at == 1_000_000.0
        assert await store.count_agents() == 2
        # a fresh store (no cache) loads it: rehydrated on the way
        async with StateStore(backend, snapshot_every=4) as fresh:
            assert (await fresh.load("sleepy")).data == {"i": 9}
            assert (await fresh.load("sleepy", at_seq=3)).data == {"i": 2}
            assert await durable.head("sleepy") == 10
            assert await durable.head(COLD_MARKER + "sleepy") == 0
            assert await backend.cold.head("sleepy") == 0
            # its idempotency keys came back too: a late retry is not doubled
            again = await fresh.save("sleepy", {"i": 3}, idempotency_key="s3", expected_seq=3)
            assert again.duplicate and again.last_seq == 4
            assert (await fresh.verify(["sleepy"])).ok
        assert backend.stats["demotions"] == 1 and backend.stats["rehydrations"] == 1


async def test_an_append_to_a_demoted_agent_rehydrates_it_first(
    tmp_path: Path, servers: None
) -> None:
    backend = TieredBackend(_postgres(tmp_path), cold=_s3(tmp_path), idle_after=1)
    try:
        await backend.append(request("a", 0, 3, snap_at=2))
        assert await backend.demote("a")
        # a writer that knows the head appends directly: no fork, no conflict
        assert await backend.append(request("a", 3)) == AppendResult("a", 4, 4)
        # a writer that thinks the agent is new gets the real head
        with pytest.raises(Exception) as info:
            await backend.demote("a") and await backend.append(request("a", 0))
        assert getattr(info.value, "current_seq", None) == 4
        assert [e.seq for e in await backend.read("a")] == [1, 2, 3, 4]
        assert (await backend.latest_snapshot("a")).seq == 2  # type: ignore[union-attr]
        assert await backend.delete_agent("a")
        assert await backend.head("a") == 0 and await backend.list_agents() == []
    finally:
        await backend.close()


async def test_background_demotion(tmp_path: Path, servers: None) -> None:
    now = [2_000_000.0]
    backend = TieredBackend(
        _postgres(tmp_path),
        cold=_s3(tmp_path),
        idle_after=10,
        demote_interval=0.05,
        clock=lambda: now[0],
    )
    try:
        await backend.append(request("a", 0, 2, timestamp=now[0]))
        now[0] += 20

        async def demoted() -> bool:
            return backend.stats["demotions"] > 0

        await _until(demoted)  # the background task runs every 0.05 s
        assert backend.stats["demotions"] == 1
        assert await backend.durable.head("a") == 0
        assert await backend.head("a") == 2
    finally:
        await backend.close()


# -- configuration --------------------------------------------------------------------------


def test_tiered_url(tmp_path: Path) -> None:
    url = tiered_url(
        hot="memory://",
        durable=f"sqlite:///{tmp_path}/t.db?synchronous=NORMAL",
        hot_timeout=0.25,
        fill_limit=500,
    )
    backend = open_backend(url)
    try:
        assert isinstance(backend, TieredBackend)
        assert isinstance(backend.hot, MemoryBackend)
        assert isinstance(backend.durable, SQLiteBackend)
        assert backend.durable.synchronous == "NORMAL"
        assert backend.hot_timeout == 0.25 and backend.fill_limit == 500
        assert backend.cold is None
    finally:
        asyncio.run(backend.close())
    with pytest.raises(ConfigurationError):
        open_backend("tiered://?hot=memory://")
    with pytest.raises(ConfigurationError):
        open_backend(tiered_url(durable="memory://", colour="blue"))
    with pytest.raises(ConfigurationError):
        TieredBackend(MemoryBackend(), idle_after=5)  # no cold tier to demote to


# -- read-only (issue 10, item 2) -----------------------------------------------------------


async def test_readonly_fills_rehydrates_and_demotes_nothing(tmp_path: Path) -> None:
    """A read-only tiered backend answers from the durable tier and, for a demoted
    agent, from the cold tier: its hot tier stays empty, the demoted agent stays
    demoted, no demoter starts, and every write (demotion too) is refused."""
    durable, cold = tmp_path / "durable.db", tmp_path / "cold.db"
    writer = TieredBackend(
        SQLiteBackend(durable), hot=MemoryBackend(), cold=SQLiteBackend(cold), idle_after=3600
    )
    try:
        await writer.append(request("live", 0, 3, snap_at=2))
        await writer.append(request("old", 0, 2, key="k"))
        assert await writer.demote("old")
    finally:
        await writer.close()
    hot = MemoryBackend()
    ro = TieredBackend(
        SQLiteBackend(durable, readonly=True),
        hot=hot,
        cold=SQLiteBackend(cold, readonly=True),
        idle_after=0.001,
        demote_interval=0.001,
        readonly=True,
    )
    try:
        assert [e.seq for e in await ro.read("live")] == [1, 2, 3]
        assert [e.seq for e in await ro.read("old")] == [1, 2]
        assert await ro.head("old") == 2
        assert await ro.lookup_key("old", "k") is not None
        snap = await ro.latest_snapshot("live")
        assert snap is not None and snap.seq == 2
        assert [i.agent_id for i in await ro.list_agents()] == ["live", "old"]
        assert await hot.list_agents() == []  # nothing filled
        assert ro._maintenance is None  # no background demoter
        with pytest.raises(ReadOnlyStore):
            await ro.demote("live")
        with pytest.raises(ReadOnlyStore):
            await ro.demote_idle()
    finally:
        await ro.close()
    durable_only = SQLiteBackend(durable)
    try:  # still demoted: the marker is there, the stream is not
        assert await durable_only.head("old") == 0
        assert (
            await durable_only.head(COLD_MARKER + "old") == 2
        )  # (its claim, and the demotion done)
        assert await durable_only.head("live") == 3
    finally:
        await durable_only.close()


@pytest.mark.parametrize("cold", ["sqlite", pytest.param("s3", marks=pytest.mark.slow)])
async def test_a_compacted_stream_is_demoted_and_rehydrated_as_it_is_stored(
    tmp_path: Path, cold: str
) -> None:
    """Retention's keep-last-N on a tiered store, then the agent demoted to the cold
    tier and brought back: the same compacted stream each way (its base, the events
    after it, every idempotency key: a retry of a save below the base is recognised),
    ``verify`` clean."""
    from statekeeper.codec.keys import Keyring
    from statekeeper.errors import HistoryCompacted
    from statekeeper.governance.retention import RetentionPolicy, apply_retention

    if cold == "s3":
        moto_endpoint()
        cold_tier: Backend = _s3(tmp_path)
    else:
        cold_tier = SQLiteBackend(tmp_path / "cold.db")
    tiered = TieredBackend(_sqlite(tmp_path), hot=MemoryBackend(), cold=cold_tier, idle_after=3600)
    keyring = Keyring({"k1": bytes(range(32))})
    try:
        async with StateStore(tiered, keyring=keyring, snapshot_every=3) as store:
            for j in range(8):
                await store.save("t0/a", {"j": j}, idempotency_key=f"k{j}")
            report = await apply_retention(store, RetentionPolicy.parse("t0 keep_last=3\n"))
            assert [(a.kind, a.outcome, a.base_seq) for a in report.actions] == [
                ("compact", "done", 5)
            ]
            assert (await store.verify()).ok
            assert await tiered.stream_bases(["t0/a"]) == [5]
            keys = await tiered.idempotency_keys("t0/a")
            # every key stays, also of the events the compaction removed
            assert [(first, last) for _, first, last in keys] == [(s, s) for s in range(1, 9)]
            for _ in range(2):  # demoted, rehydrated by the load, and once more
                assert await tiered.demote("t0/a")
                assert await tiered.durable.head("t0/a") == 0
                assert await cold_tier.stream_bases(["t0/a"]) == [5]
                store._reads.forget("t0/a")
                assert (await store.load("t0/a")).data == {"j": 7}
                assert await tiered.stream_bases(["t0/a"]) == [5]
                assert [e.seq for e in await tiered.read("t0/a")] == [6, 7, 8]
                assert await tiered.idempotency_keys("t0/a") == keys
                again = await store.save("t0/a", {"j": 1}, idempotency_key="k1")  # a retry
                assert (again.first_seq, again.last_seq, again.duplicate) == (2, 2, True)
                with pytest.raises(HistoryCompacted):
                    await store.load("t0/a", at_seq=3)
                assert (await store.verify()).ok
            await store.save("t0/a", {"j": 8})
            assert (await store.verify()).ok
    finally:
        if cold == "s3":
            _drop_bucket(tmp_path)


@pytest.mark.parametrize("cold_kind", ["memory", pytest.param("s3", marks=pytest.mark.slow)])
async def test_a_deleted_streams_late_snapshot_is_never_served(
    tmp_path: Path, cold_kind: str
) -> None:
    """A deleted agent's snapshot landing late (in the cold tier too: every agent is
    demoted after each write here) is not served for the re-created agent."""
    try:
        for name in ("a", "b"):
            cold = _tier(cold_kind, tmp_path, f"cold-{name}")
            durable = SQLiteBackend(tmp_path / f"durable-{name}.db")
            backend = _AlwaysCold(durable, hot=MemoryBackend(), cold=cold, idle_after=3600)
            check = leftover_served if name == "a" else leftover_at_head
            await check(backend)
    finally:
        if cold_kind == "s3":
            _drop_bucket(tmp_path)
