"""PostgreSQL with ``durability="group"``: a batch of other agents commits on another
connection while one batch is in flight, and an agent's next save waits for the batch
holding its previous one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.records import AppendRequest, AppendResult

from ._services import POSTGRES_DSN


async def test_other_agents_commit_while_a_batch_is_in_flight_and_one_agent_keeps_order(
    schema: str, open_store: Callable[..., StateStore]
) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema)
    assert backend.batches_in_flight == 4
    batches: list[list[tuple[str, int]]] = []
    first_entered, release_first = asyncio.Event(), asyncio.Event()
    append_batch = backend.append_batch

    async def held(requests: Sequence[AppendRequest]) -> list[AppendResult | BaseException]:
        batches.append([(r.agent_id, r.expected_seq) for r in requests])
        if len(batches) == 1:  # the first batch waits, as if its WAL flush took long
            first_entered.set()
            await release_first.wait()
        return await append_batch(requests)

    backend.append_batch = held  # type: ignore[method-assign]
    store = open_store(backend, durability="group")
    try:
        first = asyncio.create_task(store.save("a", {"n": 1}))
        await first_entered.wait()
        # b and c commit (a batch on another pool connection) while a's is in flight
        others = await asyncio.wait_for(_saves(store, "b", "c"), timeout=20)
        assert [r.last_seq for r in others] == [1, 1] and not first.done()
        second = asyncio.create_task(store.save("a", {"n": 2}))
        await asyncio.wait_for(_saves(store, "d", "e"), timeout=20)
        assert ("a", 1) not in [item for batch in batches for item in batch]  # still waiting
    finally:  # a failed check never leaves the batch held for the teardown
        release_first.set()
    assert (await first).last_seq == 1
    assert (await second).last_seq == 2
    assert (await store.load("a")).data == {"n": 2}
    assert [item for batch in batches for item in batch if item[0] == "a"] == [("a", 0), ("a", 1)]


async def _saves(store: StateStore, *agents: str) -> list[AppendResult]:
    return list(await asyncio.gather(*(store.save(a, {"n": 1}) for a in agents)))
