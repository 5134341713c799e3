"""A write-behind append that a failed flush dropped was still counted in
``statekeeper_appends_total`` (it was counted when buffered), and nothing counted what
was lost: a dashboard showed writes that were never stored. Appends count once stored;
``statekeeper_write_buffer_lost_total`` counts the buffered appends dropped, and the
health report of the instrumented store names the loss as a breach."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from statekeeper import StateStore
from statekeeper.errors import BackendError, WriteBufferError
from statekeeper.observability import instrument
from statekeeper.observability.health import health_report


def _values(registry: CollectorRegistry) -> dict[str, float]:
    text = generate_latest(registry).decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


async def test_appends_a_failed_flush_dropped_are_counted_lost_not_appended(
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    async with StateStore(
        f"sqlite:///{tmp_path / 'a.db'}", durability="async", witness=False
    ) as store:
        instrument(store, registry=registry, tracing=False)
        await store.save("kept", {"n": 0})
        await store.flush()
        behind = store._writes.behind
        assert behind is not None
        backend = behind._backend
        real = backend.append_batch

        async def failing(requests: Any) -> Any:
            raise BackendError("the disk went away")

        backend.append_batch = failing  # type: ignore[method-assign]
        await store.save("a", {"n": 1})
        await store.save("a", {"n": 2})  # (merged with the first at the flush)
        await store.save("b", {"n": 1})
        assert store.stats().appends == 1  # buffered: not stored yet
        with contextlib.suppress(WriteBufferError):
            await store.flush()
        backend.append_batch = real  # type: ignore[method-assign]
        stats = store.stats()
        found = _values(registry)
        report = await health_report(store)
    assert stats.appends == 1, stats
    assert stats.lost == 3, stats
    assert found["statekeeper_appends_total"] == 1
    assert found["statekeeper_write_buffer_lost_total"] == 3
    assert report.lost_writes == 3
    assert any("3 buffered write(s) lost" in b for b in report.breaches), report.breaches


async def test_appends_count_once_flushed(tmp_path: Path) -> None:
    async with StateStore(
        f"sqlite:///{tmp_path / 'a.db'}", durability="async", witness=False
    ) as store:
        for i in range(5):
            await store.save("a", {"n": i})
        assert store.stats().appends == 0
        await store.flush()
        stats = store.stats()
    assert (stats.appends, stats.lost) == (5, 0)
