"""Read-modify-write helpers: retries on conflict, backoff, and the typed give-up."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import Backoff, retry_on_conflict, update, update_agent
from statekeeper.errors import (
    AgentNotFound,
    ConfigurationError,
    ConflictError,
    RetriesExhausted,
)


@pytest.fixture
async def store(tmp_path: Any) -> Any:
    async with StateStore(f"sqlite:///{tmp_path / 'rmw.db'}") as s:
        yield s


async def test_concurrent_updates_lose_nothing(store: StateStore) -> None:
    def bump(data: dict[str, Any]) -> None:
        data["n"] = data.get("n", 0) + 1

    async def worker(peer: StateStore) -> int:
        total = 0
        for _ in range(25):
            total += (await update(peer, "a", bump, attempts=200)).attempts
        return total

    # two stores on one file: their caches go stale, their writes conflict
    async with StateStore(store.backend.path) as other:  # type: ignore[attr-defined]
        attempts = await asyncio.gather(*(worker(s) for s in (store, other, store, other)))
    assert (await store.load("a")).data == {"n": 100}
    assert sum(attempts) >= 100


async def test_the_change_function_sees_the_state_it_is_applied_to(store: StateStore) -> None:
    await store.save("a", {"items": []})
    seen: list[list[int]] = []
    sneaked = False

    async def change(data: dict[str, Any]) -> dict[str, Any]:
        nonlocal sneaked
        seen.append(list(data["items"]))
        if not sneaked:  # another writer lands between our read and our write
            sneaked = True
            await store.save("a", {"items": [1]})
        return {"items": [*data["items"], 2]}

    done = await update(store, "a", change)
    assert seen == [[], [1]]
    assert done.attempts == 2
    assert done.data == {"items": [1, 2]}
    assert (await store.load("a")).data == {"items": [1, 2]}
    assert done.seq == await store.head("a")


async def test_gives_up_with_a_typed_error_carrying_the_last_conflict(store: StateStore) -> None:
    await store.save("a", {"n": 0})
    calls = 0

    async def always_beaten(data: dict[str, Any]) -> None:
        nonlocal calls
        calls += 1
        await store.save("a", {"n": calls * 100})  # someone else always wins
        data["n"] = -1

    with pytest.raises(RetriesExhausted) as info:
        await update(store, "a", always_beaten, attempts=3, backoff=Backoff(base=0))
    err = info.value
    assert isinstance(err, ConflictError)
    assert err.attempts == 3 and calls == 3
    assert isinstance(err.last, ConflictError)
    assert err.last.current_seq == err.current_seq == await store.head("a")
    assert "3 conflicting attempts" in str(err)
    assert (await store.load("a")).data == {"n": 300}  # our change never landed


async def test_missing_agent_and_no_op(store: StateStore) -> None:
    with pytest.raises(AgentNotFound):
        await update(store, "ghost", lambda d: None, create=False)
    made = await update(store, "new", lambda d: {"x": 1})
    assert made.result is not None and made.seq == 1
    same = await update(store, "new", lambda d: None)  # nothing changed: nothing written
    assert same.result is None and same.seq == 1
    assert await store.head("new") == 1
    with pytest.raises(ConfigurationError):
        await update(store, "new", lambda d: 5)  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigurationError):
        await update(store, "new", lambda d: None, attempts=0)


async def test_update_agent_refreshes_and_reapplies(store: StateStore) -> None:
    agent = await store.agent("a", initial_data={"n": 0})
    await store.save("a", {"n": 10})  # the agent object is now stale
    calls = 0

    def bump(a: Any) -> None:
        nonlocal calls
        calls += 1
        a.data["n"] += 1

    seq = await update_agent(agent, bump)
    assert calls == 2
    assert (await store.load("a")).data == {"n": 11}
    assert seq == agent.seq == await store.head("a")


async def test_retry_on_conflict_and_backoff() -> None:
    tries = 0

    async def flaky() -> str:
        nonlocal tries
        tries += 1
        if tries < 3:
            raise ConflictError("a", 1, 2)
        return "ok"

    assert await retry_on_conflict(flaky, backoff=Backoff(base=0)) == "ok"
    with pytest.raises(RetriesExhausted) as info:
        await retry_on_conflict(_conflict, attempts=2)
    assert info.value.agent_id == "x"
    backoff = Backoff(base=0.01, factor=2, cap=0.05)
    rng = random.Random(7)
    delays = [backoff.delay(n, rng) for n in range(1, 10) for _ in range(20)]
    assert all(0 <= d <= 0.05 for d in delays)
    assert max(backoff.delay(1, rng) for _ in range(100)) <= 0.01
    assert len(set(delays)) > 100  # jittered
    with pytest.raises(ConfigurationError):
        Backoff(factor=0.5)


async def _conflict() -> None:
    raise ConflictError("x", 0, 1)
