"""``statekeeper_commits_total`` ("a shared commit counts once") and
``StoreStats.commits`` in the default durability: SQLite's commit queue commits the
appends of concurrent saves together (``statekeeper_commit_batch_size`` saw it), but
the count was the number of appends. And with ``durability="async"`` a write-behind
flush is one commit of many appends, counted as many."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from statekeeper import StateStore
from statekeeper.observability import instrument


def _values(registry: CollectorRegistry) -> dict[str, float]:
    text = generate_latest(registry).decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


async def test_commits_of_concurrent_saves_on_sqlite_count_each_shared_commit_once(
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    async with StateStore(f"sqlite:///{tmp_path / 'a.db'}", witness=False) as store:
        instrument(store, registry=registry, tracing=False)
        await asyncio.gather(*(store.save(f"a{i}", {"n": i}) for i in range(20)))
        found = _values(registry)
        stats = store.stats()
    batches = found["statekeeper_commit_batch_size_count"]
    assert found["statekeeper_commit_batch_size_sum"] == 20 == stats.appends
    assert batches < 20  # the engine shared commits (the case this test is about)
    assert found["statekeeper_commits_total"] == batches, found
    assert stats.commits == batches


async def test_a_write_behind_flush_is_one_commit(tmp_path: Path) -> None:
    async with StateStore(
        f"sqlite:///{tmp_path / 'a.db'}", durability="async", witness=False
    ) as store:
        for i in range(20):
            await store.save(f"a{i}", {"n": i})
        await store.flush()
        stats = store.stats()
    assert stats.appends == 20
    assert stats.commits == 1, stats


async def test_a_failed_write_behind_flush_is_no_commit(tmp_path: Path) -> None:
    """Before: ``WriteBehind.flushes`` counted a flush whose ``append_batch`` failed, so
    ``commits`` (and ``statekeeper_commits_total``) counted commits that never were."""
    from statekeeper.errors import BackendError, WriteBufferError

    async with StateStore(
        f"sqlite:///{tmp_path / 'a.db'}", durability="async", witness=False
    ) as store:
        behind = store._writes.behind
        assert behind is not None
        backend = behind._backend
        real = backend.append_batch

        async def failing(requests: Any) -> Any:
            raise BackendError("the disk went away")

        backend.append_batch = failing  # type: ignore[method-assign]
        await store.save("a", {"n": 1})
        with contextlib.suppress(WriteBufferError):
            await store.flush()
        assert store.stats().commits == 0
        backend.append_batch = real  # type: ignore[method-assign]
        await store.save("b", {"n": 2})
        await store.flush()
        assert store.stats().commits == 1
