"""Retry counts are exact in every durability mode: counted where the store writes again
after a conflict, not derived from the conflicts the backend met."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.errors import ConflictError, WriteBufferError
from statekeeper.observability.health import health_report
from statekeeper.observability.instrumentation import instrument
from statekeeper.records import AppendRequest, AppendResult


def counter(registry: CollectorRegistry, name: str) -> float:
    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                return s.value
    raise AssertionError(f"{name} not exposed")


class FailsOneBatch(MemoryBackend):
    """An engine whose first shared commit fails as a whole with a conflict (every
    caller of that commit learns it, as the group committer documents)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed_batch: int | None = None

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        if self.failed_batch is None and requests:
            self.failed_batch = len(requests)
            raise ConflictError(requests[0].agent_id, requests[0].expected_seq, -1)
        return await super().append_batch(requests)


async def test_group_commit_retries_of_a_whole_failed_commit_are_each_counted() -> None:
    registry = CollectorRegistry()
    backend = FailsOneBatch()
    async with StateStore(backend, durability="group", witness=False) as store:
        instrumentation = instrument(store, registry=registry, tracing=False)
        await asyncio.gather(*(store.save(f"a{i}", {"n": i}) for i in range(4)))
        assert backend.failed_batch is not None and backend.failed_batch >= 1
        # every caller of the failed commit wrote again, once
        assert counter(registry, "statekeeper_retries_total") == backend.failed_batch
        report = await health_report(store, instrumentation=instrumentation)
    assert report.rates is not None and report.rates.retries == backend.failed_batch


async def test_group_commit_stale_cache_conflict_is_one_retry() -> None:
    registry = CollectorRegistry()
    backend = MemoryBackend()
    async with (
        StateStore(backend, durability="group", witness=False) as store,
        StateStore(backend, witness=False) as other,
    ):
        instrument(store, registry=registry, tracing=False)
        await store.save("a", {"n": 0})
        await other.save("a", {"n": 1})  # store's cached head is now stale
        await store.save("a", {"n": 2})  # conflicts in the shared commit, written again
        with pytest.raises(ConflictError):
            await store.save("a", {"n": 3}, expected_seq=1)  # raised: not a retry
        assert counter(registry, "statekeeper_retries_total") == 1
        assert counter(registry, "statekeeper_conflicts_total") == 2


async def test_a_write_behind_conflict_is_not_a_retry() -> None:
    """An async-durability flush that conflicts is a failed write (WriteBufferError), not
    a write made again."""
    registry = CollectorRegistry()
    backend = MemoryBackend()
    async with StateStore(backend, witness=False) as other:
        store = StateStore(backend, durability="async", witness=False)
        instrument(store, registry=registry, tracing=False)
        await store.save("a", {"n": 0})
        await store.flush()
        await other.save("a", {"n": 1})  # behind the buffered store's back
        await store.save("a", {"n": 2})  # acknowledged, buffered: conflicts at the flush
        with pytest.raises(WriteBufferError):
            await store.flush()
        assert counter(registry, "statekeeper_retries_total") == 0
        await store.close()


async def test_retries_before_instrumenting_are_not_counted() -> None:
    registry = CollectorRegistry()
    backend = MemoryBackend()
    async with (
        StateStore(backend, witness=False) as store,
        StateStore(backend, witness=False) as other,
    ):
        await store.save("a", {"n": 0})
        await other.save("a", {"n": 1})
        await store.save("a", {"n": 2})  # a retry before instrument()
        instrument(store, registry=registry, tracing=False)
        assert counter(registry, "statekeeper_retries_total") == 0
        await other.save("a", {"n": 3})
        await store.save("a", {"n": 4})
        assert counter(registry, "statekeeper_retries_total") == 1


@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_a_stale_cached_head_under_expected_seq_is_one_conflict_and_no_retry(
    durability: str,
) -> None:
    """A save with ``expected_seq`` at the head this store cached, which another store
    has moved since: the engine's compare-and-set refuses it, the store reads the head
    and raises the conflict. One conflict met (not the engine's and the store's again),
    and no write made again (nothing was retried: the caller gets the conflict)."""
    registry = CollectorRegistry()
    backend = MemoryBackend()
    async with (
        StateStore(backend, durability=durability, witness=False) as store,  # type: ignore[arg-type]
        StateStore(backend, witness=False) as other,
    ):
        instrument(store, registry=registry, tracing=False)
        await store.save("a", {"n": 0})  # seq 1, cached by store
        await other.save("a", {"n": 1})  # seq 2: store's cached head is stale
        with pytest.raises(ConflictError):
            await store.save("a", {"n": 2}, expected_seq=1)
        assert counter(registry, "statekeeper_conflicts_total") == 1
        assert counter(registry, "statekeeper_retries_total") == 0


@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_a_durable_agent_save_on_a_moved_head_is_one_conflict_and_no_retry(
    durability: str,
) -> None:
    """The same through a :class:`DurableAgent` (its save appends on its cached record
    first, then through ``StateStore.append`` with ``expected_seq``)."""
    registry = CollectorRegistry()
    backend = MemoryBackend()
    async with (
        StateStore(backend, durability=durability, witness=False) as store,  # type: ignore[arg-type]
        StateStore(backend, witness=False) as other,
    ):
        instrument(store, registry=registry, tracing=False)
        agent = await store.agent("a")
        agent.data["n"] = 0
        await agent.save()
        await other.save("a", {"n": 1})  # behind the agent's back
        agent.data["n"] = 2
        with pytest.raises(ConflictError):
            await agent.save()
        await agent.refresh()  # (its change dropped: not written)
        assert counter(registry, "statekeeper_conflicts_total") == 1
        assert counter(registry, "statekeeper_retries_total") == 0
