"""An instrumented store times itself at its seams: no wrapper frame on the write path,
and histograms that batch their observations expose what one-by-one ones would."""

from __future__ import annotations

import gc
import math
import sys
import weakref

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.observability.instrumentation import instrument
from statekeeper.observability.metrics import FOLD_AT, LATENCY_BUCKETS, Tally
from statekeeper.records import AppendRequest, AppendResult
from statekeeper.store import store_writes as store_module  # (the save's own module)
from statekeeper.store import writes as writes_module


class StackRecording(MemoryBackend):
    """Records the names of the frames above each of its appends."""

    def __init__(self) -> None:
        super().__init__()
        self.callers: list[list[str]] = []

    async def append(self, request: AppendRequest) -> AppendResult:
        frame = sys._getframe(1)
        names: list[str] = []
        while frame is not None and len(names) < 3:
            names.append(frame.f_code.co_qualname)
            frame = frame.f_back  # type: ignore[assignment]
        self.callers.append(names)
        return await super().append(request)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"{name}{labels} not exposed")


async def test_an_instrumented_save_runs_no_wrapper_between_store_and_engine() -> None:
    engine = StackRecording()
    registry = CollectorRegistry()
    async with StateStore(engine, witness=False) as store:
        instrument(store, registry=registry, tracing=False)
        await store.save("a", {"n": 0})
        await store.save("a", {"n": 1})
        await store.append("a", "note", {"x": 1})
        assert store.save.__func__ is StateStore.save  # type: ignore[attr-defined]
    # the engine's append is awaited by the write pipeline, which the store's own
    # save/append awaits: the same frames as an uninstrumented store
    for names in engine.callers:
        assert names[:2] in (  # (the store's save and append are defined in store_writes)
            ["WritePipeline.write", StateStore.save.__code__.co_qualname],
            ["WritePipeline.write", StateStore.append.__code__.co_qualname],
        ), names
    assert sample(registry, "statekeeper_operation_duration_seconds_count", operation="save") == 2
    assert sample(registry, "statekeeper_operation_duration_seconds_count", operation="append") == 1
    assert sample(registry, "statekeeper_backend_call_duration_seconds_count", call="append") == 3


class StepClock:
    """A clock one second later at each reading (the seams' readings are counted)."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return float(self.reads)


async def test_a_direct_save_shares_its_end_reading_with_the_engine_append(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = StepClock()
    monkeypatch.setattr(store_module, "_perf", clock)
    monkeypatch.setattr(writes_module, "_perf", clock)
    registry = CollectorRegistry()
    async with StateStore("memory://", witness=False) as store:
        instrument(store, registry=registry, tracing=False)
        for n in range(6):
            await store.save("a", {"n": n})
    # per save: its start, the append's start, the append's end (= the save's end)
    assert clock.reads == 3 * 6
    assert sample(registry, "statekeeper_operation_duration_seconds_count", operation="save") == 6
    assert sample(registry, "statekeeper_operation_duration_seconds_sum", operation="save") == 12
    assert sample(registry, "statekeeper_backend_call_duration_seconds_count", call="append") == 6
    assert sample(registry, "statekeeper_backend_call_duration_seconds_sum", call="append") == 6


@pytest.mark.parametrize("durability", ["group", "async"])
async def test_a_save_not_written_directly_is_timed_by_the_save_once(durability: str) -> None:
    registry = CollectorRegistry()
    async with StateStore("memory://", witness=False, durability=durability) as store:
        instrument(store, registry=registry, tracing=False)
        for n in range(3):
            await store.save("a", {"n": n})
        await store.save("a", {"n": 3}, idempotency_key="k")
        await store.save("a", {"n": 3}, idempotency_key="k")  # a retry: stored once
    assert sample(registry, "statekeeper_operation_duration_seconds_count", operation="save") == 5


async def test_a_retried_direct_save_is_timed_once() -> None:
    registry = CollectorRegistry()
    async with StateStore("memory://", witness=False) as store:
        instrument(store, registry=registry, tracing=False)
        await store.save("a", {"n": 0}, idempotency_key="k")
        await store.save("a", {"n": 0}, idempotency_key="k")
        await store.save("a", {"n": 1})
    assert sample(registry, "statekeeper_operation_duration_seconds_count", operation="save") == 3


async def test_a_dropped_instrumented_store_is_freed_without_the_cycle_collector() -> None:
    registry = CollectorRegistry()
    store = StateStore("memory://", witness=False)
    instrumentation = instrument(store, registry=registry, tracing=False)
    async with store:
        await store.save("a", {"n": 0})
    gc.disable()  # freed by reference counting alone: no store <-> instrumentation cycle
    try:
        gone = weakref.ref(store)
        del store
        assert gone() is None
    finally:
        gc.enable()
    instrumentation.uninstall()  # the store is gone: only its tallies are taken away
    assert "statekeeper_operation_duration_seconds_count{" not in generate_latest(registry).decode()


async def test_more_saves_than_a_batch_are_all_counted() -> None:
    registry = CollectorRegistry()
    async with StateStore("memory://", witness=False, snapshot_every=10) as store:
        instrument(store, registry=registry, tracing=False)
        for n in range(FOLD_AT + 3):
            await store.save("a", {"n": n})
    count = sample(registry, "statekeeper_operation_duration_seconds_count", operation="save")
    total = sample(registry, "statekeeper_operation_duration_seconds_sum", operation="save")
    inf = sample(
        registry, "statekeeper_operation_duration_seconds_bucket", operation="save", le="+Inf"
    )
    assert count == inf == FOLD_AT + 3
    assert total > 0
    assert sample(registry, "statekeeper_snapshot_size_bytes_count") == (FOLD_AT + 3) // 10


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(LATENCY_BUCKETS),  # exactly on a bound: the "le" bucket
            st.floats(min_value=0, max_value=20, allow_nan=False),
        ),
        max_size=3 * FOLD_AT,
    )
)
def test_a_batched_tally_exposes_what_prometheus_client_would(values: list[float]) -> None:
    tally = Tally(LATENCY_BUCKETS)
    registry = CollectorRegistry()
    reference = Histogram("ref", "reference", buckets=LATENCY_BUCKETS, registry=registry)
    for v in values:
        tally.observe(v)
        reference.observe(v)
    expected = {
        s.labels["le"]: s.value
        for s in next(iter(registry.collect())).samples
        if s.name == "ref_bucket"
    }
    got = {("+Inf" if le == "+Inf" else str(float(le))): n for le, n in tally.buckets()}
    assert got == {str(float(k)) if k != "+Inf" else k: v for k, v in expected.items()}
    assert tally.count == len(values)
    assert math.isclose(tally.sum, math.fsum(values), rel_tol=1e-9, abs_tol=1e-9)
