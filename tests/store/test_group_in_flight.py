"""``durability="group"`` with more than one batch committing at once (an engine whose
commits run on separate connections, ``Backend.batches_in_flight`` > 1): agents commit
in parallel batches, and an agent's later append never commits before (or beside) an
earlier one still in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from statekeeper.backends import MemoryBackend
from statekeeper.records import AppendRequest, AppendResult, RawEvent
from statekeeper.store.durability import GroupCommitter

from .conftest import CountingBackend, wait_until


def _request(agent_id: str, expected: int) -> AppendRequest:
    seq = expected + 1
    event = RawEvent(seq, "e", 1.0 + seq, b"payload-%d" % seq, b"sum-%d" % seq)
    return AppendRequest(agent_id, expected, [event])


class HeldBatches(CountingBackend):
    """Two batches may commit at once; each ``append_batch`` is held until the test
    releases it by its number (calls in arrival order)."""

    batches_in_flight = 2

    def __init__(self) -> None:
        super().__init__(MemoryBackend())
        self.batches: list[list[tuple[str, int]]] = []
        self.gates: list[asyncio.Event] = []
        self.committed: list[tuple[str, int]] = []

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        gate = asyncio.Event()
        self.batches.append([(r.agent_id, r.expected_seq) for r in requests])
        self.gates.append(gate)
        await gate.wait()
        results = await self.inner.append_batch(requests)
        self.committed += [(r.agent_id, r.expected_seq) for r in requests]
        return results


async def test_concurrent_agents_commit_in_parallel_batches() -> None:
    backend = HeldBatches()
    group = GroupCommitter(backend)
    group.min_beside = 1  # (any batch may start beside one in flight)
    a = asyncio.create_task(group.submit(_request("a", 0)))
    await wait_until(lambda: _true(len(backend.batches) == 1), what="a's batch")
    b = asyncio.create_task(group.submit(_request("b", 0)))
    # b does not wait for a's commit: it goes in a second batch, beside it
    await wait_until(lambda: _true(len(backend.batches) == 2), what="b's batch beside a's")
    assert backend.batches == [[("a", 0)], [("b", 0)]]
    assert group.most_in_flight == 2
    c = asyncio.create_task(group.submit(_request("c", 0)))
    d = asyncio.create_task(group.submit(_request("d", 0)))
    await asyncio.sleep(0)  # (a pass of the loop: nothing may start, two are in flight)
    assert len(backend.batches) == 2
    backend.gates[1].set()
    assert (await b).last_seq == 1
    # b's place is taken by one batch of everything that waited
    await wait_until(lambda: _true(len(backend.batches) == 3), what="the waiting batch")
    assert backend.batches[2] == [("c", 0), ("d", 0)]
    backend.gates[0].set()
    backend.gates[2].set()
    assert [(await t).last_seq for t in (a, c, d)] == [1, 1, 1]
    await group.drain()
    assert group.commits == 3 and group.appends == 4


async def test_an_agents_later_append_never_commits_before_an_earlier_one_in_flight() -> None:
    backend = HeldBatches()
    group = GroupCommitter(backend)
    group.min_beside = 1  # (any batch may start beside one in flight)
    first = asyncio.create_task(group.submit(_request("a", 0)))
    await wait_until(lambda: _true(len(backend.batches) == 1), what="a's first batch")
    second = asyncio.create_task(group.submit(_request("a", 1)))  # built on the first
    other = asyncio.create_task(group.submit(_request("b", 0)))
    await wait_until(lambda: _true(len(backend.batches) == 2), what="b's batch")
    # a's second append stays behind its first: b's batch went without it
    assert backend.batches[1] == [("b", 0)]
    backend.gates[1].set()
    assert (await other).last_seq == 1
    await asyncio.sleep(0)
    assert len(backend.batches) == 2  # a free place, but a's first is still in flight
    backend.gates[0].set()
    assert (await first).last_seq == 1
    await wait_until(lambda: _true(len(backend.batches) == 3), what="a's second batch")
    assert backend.batches[2] == [("a", 1)]
    backend.gates[2].set()
    assert (await second).last_seq == 2
    assert backend.committed == [("b", 0), ("a", 0), ("a", 1)]
    assert await backend.inner.head("a") == 2


async def test_appends_of_one_agent_pending_together_share_a_batch_in_order() -> None:
    backend = HeldBatches()
    group = GroupCommitter(backend)
    group.min_beside = 1  # (any batch may start beside one in flight)
    busy = [asyncio.create_task(group.submit(_request(name, 0))) for name in ("x", "y")]
    await wait_until(lambda: _true(len(backend.batches) == 2), what="x's and y's batches")
    waiting = [
        asyncio.create_task(group.submit(_request("a", 0))),
        asyncio.create_task(group.submit(_request("a", 1))),
        asyncio.create_task(group.submit(_request("x", 1))),
        asyncio.create_task(group.submit(_request("b", 0))),
    ]
    await asyncio.sleep(0)
    backend.gates[1].set()  # y's place is free; x's first is still in flight
    await wait_until(lambda: _true(len(backend.batches) == 3), what="the next batch")
    # x's second waits for x's first; a's two go together, in their order
    assert backend.batches[2] == [("a", 0), ("a", 1), ("b", 0)]
    backend.gates[0].set()
    backend.gates[2].set()
    await wait_until(lambda: _true(len(backend.batches) == 4), what="x's second batch")
    assert backend.batches[3] == [("x", 1)]
    backend.gates[3].set()
    assert [(await t).last_seq for t in (*busy, *waiting)] == [1, 1, 1, 2, 2, 1]


async def test_a_batch_beside_one_in_flight_waits_until_it_holds_min_beside_appends() -> None:
    backend = HeldBatches()
    group = GroupCommitter(backend)
    assert group.min_beside == 2
    a = asyncio.create_task(group.submit(_request("a", 0)))
    await wait_until(lambda: _true(len(backend.batches) == 1), what="a's batch")
    b = asyncio.create_task(group.submit(_request("b", 0)))
    await asyncio.sleep(0)
    assert len(backend.batches) == 1  # one append alone: not worth a commit of its own yet
    c = asyncio.create_task(group.submit(_request("c", 0)))
    await wait_until(lambda: _true(len(backend.batches) == 2), what="b's and c's batch")
    assert backend.batches[1] == [("b", 0), ("c", 0)]
    backend.gates[0].set()
    backend.gates[1].set()
    assert [(await t).last_seq for t in (a, b, c)] == [1, 1, 1]


async def test_one_batch_in_flight_where_the_engine_commits_one_at_a_time() -> None:
    backend = HeldBatches()
    group = GroupCommitter(backend, in_flight=1)
    a = asyncio.create_task(group.submit(_request("a", 0)))
    await wait_until(lambda: _true(len(backend.batches) == 1), what="a's batch")
    b = asyncio.create_task(group.submit(_request("b", 0)))
    await asyncio.sleep(0)
    assert len(backend.batches) == 1
    backend.gates[0].set()
    await wait_until(lambda: _true(len(backend.batches) == 2), what="b's batch")
    backend.gates[1].set()
    assert [(await t).last_seq for t in (a, b)] == [1, 1]
    assert group.most_in_flight == 1


async def _true(value: bool) -> bool:
    return value
