"""Prometheus metrics of an instrumented store, scraped and parsed as Prometheus would."""

from __future__ import annotations

import urllib.request
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.errors import ConfigurationError, ConflictError, InvalidArgument, LeaseLost
from statekeeper.observability.exposition import metrics_app, start_http_server
from statekeeper.observability.instrumentation import ObservedBackend, instrument


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by (name, sorted labels)."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    found = samples(text)
    key = (name, tuple(sorted(labels.items())))
    assert key in found, (
        f"{name}{labels} not exposed; have {sorted(k for k in found if k[0] == name)}"
    )
    return found[key]


def scrape(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


async def test_operations_and_backend_calls_are_timed_per_backend() -> None:
    registry = CollectorRegistry()
    async with StateStore("memory://", witness=False) as store:
        instrument(store, registry=registry, name="main", tracing=False)
        for n in range(5):
            await store.save("a", {"n": n})
        agent = await store.agent("m")
        from statekeeper import StateTransition

        await agent.transition(StateTransition.START_PROCESSING)
        await store.load("a")
        text = scrape(registry)
    base = {"store": "main", "backend": "memory"}
    assert (
        value(text, "statekeeper_operation_duration_seconds_count", operation="save", **base) == 5
    )
    assert (
        value(text, "statekeeper_operation_duration_seconds_count", operation="transition", **base)
        == 1
    )
    assert (
        value(text, "statekeeper_operation_duration_seconds_count", operation="load", **base) >= 2
    )
    # every save is one backend append (sync durability), plus the agent's create + move
    assert (
        value(text, "statekeeper_backend_call_duration_seconds_count", call="append", **base) == 7
    )
    assert value(text, "statekeeper_appends_total", **base) == 7
    assert value(text, "statekeeper_cache_hits_total", **base) >= 1
    assert (
        value(text, "statekeeper_store_info", durability="sync", snapshot_every="bounded", **base)
        == 1
    )


async def test_conflicts_retries_and_fencing_rejections_are_counted() -> None:
    registry = CollectorRegistry()
    backend = MemoryBackend()
    async with (
        StateStore(backend, witness=False) as store,
        StateStore(backend, witness=False) as other,
    ):
        instrument(store, registry=registry, tracing=False)
        await store.save("a", {"n": 0})
        await other.save("a", {"n": 1})  # store's cached head is now stale
        await store.save("a", {"n": 2})  # a backend conflict, retried by the store
        with pytest.raises(ConflictError):
            await store.save("a", {"n": 3}, expected_seq=1)  # found by the store itself
        lease = await backend.acquire_lease("b", "me", 30)
        await store.save("b", {"n": 0}, lease=lease)
        await backend.release_lease("b", "me", lease.token)
        await backend.acquire_lease("b", "you", 30)  # fences "me" off
        with pytest.raises(LeaseLost):
            await store.save("b", {"n": 1}, lease=lease)
        text = scrape(registry)
    base = {"store": "memory", "backend": "memory"}
    assert value(text, "statekeeper_conflicts_total", **base) == 2
    assert value(text, "statekeeper_retries_total", **base) == 1
    assert value(text, "statekeeper_fencing_rejections_total", **base) == 1
    assert (
        value(
            text, "statekeeper_operation_errors_total", operation="save", error="conflict", **base
        )
        == 1
    )
    assert (
        value(
            text, "statekeeper_operation_errors_total", operation="save", error="lease_lost", **base
        )
        == 1
    )
    assert (
        value(text, "statekeeper_backend_errors_total", call="append", error="conflict", **base)
        == 1
    )


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_replay_lengths(engine: str, tmp_path: Any) -> None:
    """Read off a fold's backend calls: ``read_latest`` (SQLite), or ``latest_snapshot``
    then ``read`` (the memory engine)."""
    registry = CollectorRegistry()
    backend: Any = MemoryBackend() if engine == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    writer = StateStore(backend, snapshot_every=4, witness=False)
    for n in range(6):  # a snapshot at seq 4, two events after it
        await writer.save("a", {"n": n, "pad": "x" * 300})
    if engine == "sqlite":
        await writer.close()
    async with StateStore(
        writer.backend if engine == "memory" else backend, witness=False, cache_size=0
    ) as store:
        instrument(store, registry=registry, tracing=False)
        await store.load("a")
        text = scrape(registry)
    base = {"store": engine, "backend": engine}
    assert value(text, "statekeeper_replay_length_events_count", **base) == 1
    assert value(text, "statekeeper_replay_length_events_sum", **base) == 2
    assert value(text, "statekeeper_replay_length_events_bucket", le="1.0", **base) == 0
    assert value(text, "statekeeper_replay_length_events_bucket", le="2.0", **base) == 1


async def test_snapshot_sizes_and_group_commit_batches() -> None:
    import asyncio

    registry = CollectorRegistry()
    async with StateStore(
        "memory://", durability="group", snapshot_every=2, witness=False
    ) as store:
        instrument(store, registry=registry, tracing=False)
        await asyncio.gather(*(store.save(f"a{i}", {"i": i}) for i in range(8)))
        await asyncio.gather(*(store.save(f"a{i}", {"i": -i}) for i in range(8)))
        text = scrape(registry)
    base = {"store": "memory", "backend": "memory"}
    batches = value(text, "statekeeper_commit_batch_size_count", **base)
    assert value(text, "statekeeper_commit_batch_size_sum", **base) == 16
    assert batches < 16  # concurrent saves shared commits
    assert value(text, "statekeeper_snapshot_size_bytes_count", **base) == 8  # at seq 2


async def test_write_buffer_depth_and_age_are_the_live_rpo() -> None:
    registry = CollectorRegistry()
    now = [1000.0]
    async with StateStore(
        "memory://",
        durability="async",
        flush_size=100,
        flush_interval=3600,
        clock=lambda: now[0],
        witness=False,
    ) as store:
        instrument(store, registry=registry, tracing=False)
        await store.save("a", {"n": 1})
        now[0] = 1004.0
        await store.save("b", {"n": 1})
        now[0] = 1010.0
        text = scrape(registry)
        assert value(text, "statekeeper_write_buffer_depth", store="memory", backend="memory") == 2
        assert (
            value(text, "statekeeper_write_buffer_age_seconds", store="memory", backend="memory")
            == 10
        )
        await store.flush()
        text = scrape(registry)
        assert value(text, "statekeeper_write_buffer_depth", store="memory", backend="memory") == 0
        assert (
            value(text, "statekeeper_write_buffer_age_seconds", store="memory", backend="memory")
            == 0
        )


async def test_asgi_app_serves_the_text_format() -> None:
    registry = CollectorRegistry()
    async with StateStore("memory://", witness=False) as store:
        instrument(store, registry=registry, name="asgi", tracing=False)
        await store.save("a", {"n": 1})
        transport = httpx.ASGITransport(app=metrics_app(registry))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert value(response.text, "statekeeper_appends_total", store="asgi", backend="memory") == 1


async def test_start_http_server_is_scraped_over_http() -> None:
    import asyncio

    registry = CollectorRegistry()
    async with StateStore("memory://", witness=False) as store:
        instrument(store, registry=registry, name="http", tracing=False)
        await store.save("a", {"n": 1})
        server, thread = start_http_server(0, "127.0.0.1", registry)
        try:
            url = f"http://127.0.0.1:{server.server_port}/metrics"

            def get() -> str:
                with urllib.request.urlopen(url, timeout=10) as r:
                    return str(r.read().decode())

            text = await asyncio.to_thread(get)
        finally:
            server.shutdown()
            thread.join(timeout=10)
    assert value(text, "statekeeper_appends_total", store="http", backend="memory") == 1


async def test_two_stores_on_one_registry_need_two_names() -> None:
    registry = CollectorRegistry()
    async with (
        StateStore("memory://", witness=False) as a,
        StateStore("memory://", witness=False) as b,
    ):
        instrument(a, registry=registry, name="a", tracing=False)
        with pytest.raises(ConfigurationError, match="named 'a'"):
            instrument(b, registry=registry, name="a", tracing=False)
        instrument(b, registry=registry, name="b", tracing=False)
        await a.save("x", {})
        await b.save("x", {})
        await b.save("x", {"n": 1})
        text = scrape(registry)
    assert value(text, "statekeeper_appends_total", store="a", backend="memory") == 1
    assert value(text, "statekeeper_appends_total", store="b", backend="memory") == 2


async def test_uninstall_restores_the_store_and_instrumenting_twice_is_refused() -> None:
    registry = CollectorRegistry()
    async with StateStore("memory://", witness=False) as store:
        engine = store.backend
        obs = instrument(store, registry=registry, tracing=False)
        assert isinstance(store.backend, ObservedBackend)
        assert type(store).__name__ == "StateStore" and isinstance(store, StateStore)
        with pytest.raises(InvalidArgument, match="instrumented already"):
            instrument(store, registry=CollectorRegistry(), tracing=False)
        obs.uninstall()
        assert store.backend is engine and type(store) is StateStore
        assert store.save.__func__ is StateStore.save  # type: ignore[attr-defined]
        await store.save("a", {})
        assert "statekeeper_appends_total{" not in scrape(registry)
    with pytest.raises(InvalidArgument, match="needs a StateStore"):
        instrument(object(), registry=registry)  # type: ignore[arg-type]


async def test_a_dropped_store_stops_reporting() -> None:
    import gc

    registry = CollectorRegistry()
    store: Any = StateStore("memory://", witness=False)
    instrument(store, registry=registry, tracing=False)
    await store.save("a", {})
    assert "statekeeper_appends_total{" in scrape(registry)
    await store.close()
    del store
    gc.collect()
    assert "statekeeper_appends_total{" not in scrape(registry)


async def test_the_grafana_dashboard_queries_metrics_that_exist(tmp_path: Any) -> None:
    """Every metric the shipped dashboard queries is exposed by an instrumented store
    (or by the ``statekeeper metrics serve`` exporter)."""
    import json
    import re
    from pathlib import Path

    from statekeeper.observability.exposition import StoreExporter
    from statekeeper.observability.health import health_report

    dashboard = json.loads(
        (Path(__file__).parents[2] / "docs" / "grafana" / "statekeeper.json").read_text()
    )
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\b(statekeeper_[a-z_]+)\b", target["expr"])
    }
    queried |= set(re.findall(r"\b(statekeeper_[a-z_]+)\b", json.dumps(dashboard["templating"])))
    registry = CollectorRegistry()
    async with StateStore("memory://", witness=False) as store:
        instrument(store, registry=registry, tracing=False)
        await store.save("a", {"n": 1})
        with pytest.raises(ConflictError):
            await store.save("a", {"n": 2}, expected_seq=5)
        report = await health_report(store)

    async def scan() -> Any:
        return report

    registry.register(StoreExporter(scan, name="x"))
    exposed = {s.name for f in text_string_to_metric_families(scrape(registry)) for s in f.samples}
    assert queried and queried <= exposed, sorted(queried - exposed)


async def test_sqlite_group_commits_are_counted_by_the_engine(tmp_path: Any) -> None:
    """With durability="group" on SQLite the store hands each append to the engine's
    own commit queue (no append_batch call): the shared commits are still counted."""
    import asyncio

    registry = CollectorRegistry()
    url = f"sqlite:///{tmp_path / 'g.db'}?synchronous=OFF"
    async with StateStore(url, durability="group", witness=False) as store:
        instrument(store, registry=registry, tracing=False)
        for n in range(3):
            await asyncio.gather(*(store.save(f"a{i}", {"n": n}) for i in range(8)))
        text = scrape(registry)
    base = {"store": "sqlite", "backend": "sqlite"}
    assert value(text, "statekeeper_commit_batch_size_sum", **base) == 24  # every append
    assert value(text, "statekeeper_commit_batch_size_count", **base) < 24  # shared commits


@pytest.mark.parametrize("engine", ["sqlite", "memory"])
async def test_an_observed_group_store_batches_agent_saves_and_counts_each(
    tmp_path: Any, engine: str
) -> None:
    """16 agents saving together through an instrumented durability="group" store: the
    saves share commits as on the plain store (the plain one hands them to SQLite's
    commit queue through ``join_next``; the observed one, off the fast path, through
    the committer's ``submit``), and every save is counted: appends, the commit batch
    sizes and, where the engine takes appends one by one (SQLite), its append calls."""
    import asyncio

    saves = 16 * 4
    commits: dict[bool, int] = {}
    for observed in (False, True):
        registry = CollectorRegistry()
        url = "memory://" if engine == "memory" else f"sqlite:///{tmp_path / f'{observed}.db'}"
        async with StateStore(url, durability="group", witness=False) as store:
            if observed:
                instrument(store, registry=registry, tracing=False)
            agents = [await store.agent(f"a{i}") for i in range(16)]  # (16 creates)
            group = store._writes.group
            assert group is not None
            before = group.commits

            async def saving(agent: Any) -> None:
                for n in range(4):
                    agent.data["n"] = n
                    await agent.save()

            await asyncio.gather(*(saving(agent) for agent in agents))
            commits[observed] = group.commits - before
            for i in range(16):
                assert (await store.load(f"a{i}")).data == {"n": 3}
            if observed:
                text = scrape(registry)
                base = {"store": engine, "backend": engine}
                written = saves + 16
                assert value(text, "statekeeper_appends_total", **base) == written
                assert value(text, "statekeeper_commit_batch_size_sum", **base) == written
                calls = "statekeeper_backend_call_duration_seconds_count"
                if engine == "sqlite":
                    assert value(text, calls, call="append", **base) == written
                timed = "statekeeper_operation_duration_seconds_count"
                assert value(text, timed, operation="append", **base) == saves
    assert commits[False] < saves and commits[True] < saves  # shared commits, both


@pytest.mark.parametrize("durability", ["sync", "group", "async"])
@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_a_retried_write_found_by_its_key_is_not_counted_again(
    engine: str, durability: str, tmp_path: Any
) -> None:
    """A write retried with its idempotency key (its reply was lost) is answered with
    the result stored before: no new event, no commit. It was counted as an append
    again (and, where commits are counted per append, as a commit): two stored events
    read as four appends."""
    url = "memory://" if engine == "memory" else f"sqlite:///{tmp_path / 'keys.db'}"
    async with StateStore(url, durability=durability) as store:
        registry = CollectorRegistry()
        instrument(store, registry=registry, name="s", tracing=False)
        for _ in range(2):  # each write, and its retry
            await store.save("a", {"n": 1}, idempotency_key="save-1")
        for _ in range(2):
            await store.append("a", "note", {"x": 1}, idempotency_key="note-1")
        await store.flush()
        assert await store.head("a") == 2
        assert store.stats().appends == 2
        text = scrape(registry)
        assert value(text, "statekeeper_appends_total", store="s", backend=engine) == 2
        assert value(text, "statekeeper_commits_total", store="s", backend=engine) == 2
