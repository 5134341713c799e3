"""Read-modify-write helpers: retries on conflict, backoff, and the typed give-up."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import Backoff, retry_on_conflict, update, update_agent
from statekeeper.errors import (
    AgentNotFound,
    ConfigurationError,
    ConflictError,
    InvalidArgument,
    RetriesExhausted,
)


@pytest.fixture
def store(db_url: str, open_store: Callable[..., StateStore]) -> StateStore:
    """A SQLite file, so that peers on the same file can race this store."""
    return open_store(db_url)


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


async def test_update_agent_refuses_an_agent_with_unsaved_changes(store: StateStore) -> None:
    """Changes made to agent.data before update_agent were written with fn's change
    when no conflict happened, and silently dropped by the refresh when one did (the
    call still succeeded). Now refused up front, before fn runs; nothing written."""
    agent = await store.agent("a", initial_data={"n": 0})
    agent.data["note"] = "keep me"  # unsaved
    calls: list[int] = []

    async def bump(a: Any) -> None:
        if not calls:
            await store.save("a", {"n": 100})  # another writer gets in first
        calls.append(a.data["n"])
        a.data["n"] += 1

    with pytest.raises(InvalidArgument, match="unsaved changes") as info:
        await update_agent(agent, bump)
    assert info.value.argument == "agent"
    assert calls == []
    assert agent.data == {"n": 0, "note": "keep me"}  # still pending, not dropped
    assert (await store.load("a")).data == {"n": 0}
    await agent.save()  # the documented way: save them first ...
    assert await update_agent(agent, bump) == agent.seq
    assert (await store.load("a")).data == {"n": 101}  # (the other writer's save won)
    assert calls == [0, 100]


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


# -- issue 9.12: a time budget, full jitter, in-process coalescing ------------------------


async def test_the_default_budget_is_time_not_ten_attempts(store: StateStore) -> None:
    """Under contention ten attempts run out in milliseconds; the default keeps going."""
    await store.save("a", {"n": 0})
    calls = 0

    async def beaten_fifteen_times(data: dict[str, Any]) -> None:
        nonlocal calls
        calls += 1
        if calls <= 15:  # another writer wins fifteen times in a row
            await store.save("a", {"n": data["n"] + 100})
        data["n"] += 1

    done = await update(store, "a", beaten_fifteen_times, backoff=Backoff(base=0))
    assert done.attempts == 16
    assert (await store.load("a")).data == {"n": 1501}


async def test_the_time_budget_ends_in_a_typed_error(store: StateStore) -> None:
    await store.save("a", {"n": 0})

    async def always_beaten(data: dict[str, Any]) -> None:
        await store.save("a", {"n": data["n"] + 1})
        data["n"] = -1

    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(RetriesExhausted) as info:
        await update(store, "a", always_beaten, budget=0.3)
    assert loop.time() - started >= 0.3
    assert info.value.attempts >= 1
    assert (await store.load("a")).data["n"] != -1  # our change never landed


async def test_budget_arguments_are_checked(store: StateStore) -> None:
    for bad in ({"budget": 0}, {"budget": -1.0}, {"budget": "5"}, {"budget": True}):
        with pytest.raises(ConfigurationError, match="budget"):
            await update(store, "a", lambda d: None, **bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="attempts or budget"):
        await update(store, "a", lambda d: None, budget=None)
    with pytest.raises(ConfigurationError, match="backoff"):
        await update(store, "a", lambda d: None, backoff=0.1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="budget"):
        await retry_on_conflict(_conflict, budget=0)
    with pytest.raises(ConfigurationError, match="agent_id"):
        await update(store, ["a"], lambda d: None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="fn"):
        await update(store, "a", None)  # type: ignore[arg-type]
    assert await store.head("a") == 0  # nothing was written


async def test_one_process_never_fights_itself(store: StateStore) -> None:
    """200 concurrent updates of one agent through one store: coalesced, no conflict."""

    def bump(data: dict[str, Any]) -> None:
        data["n"] = data.get("n", 0) + 1

    results = await asyncio.gather(*(update(store, "a", bump) for _ in range(200)))
    assert [r.attempts for r in results] == [1] * 200  # nobody had to retry
    state = await store.load("a")
    assert state.data == {"n": 200}
    assert state.seq < 200  # several calls shared a write
    assert sorted(r.data["n"] for r in results) == list(range(1, 201))  # each saw its own
    assert max(r.seq for r in results) == state.seq


async def test_a_failing_change_fails_only_its_own_call(store: StateStore) -> None:
    def bump(data: dict[str, Any]) -> None:
        data["n"] = data.get("n", 0) + 1

    def broken(data: dict[str, Any]) -> None:
        data["n"] = "garbage"  # partly applied, then fails: must not leak into the write
        raise ValueError("boom")

    calls = [update(store, "a", bump), update(store, "a", broken), update(store, "a", bump)]
    calls.append(update(store, "a", lambda d: 5))  # type: ignore[arg-type,return-value]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(outcomes[1], ValueError)
    assert isinstance(outcomes[3], ConfigurationError)
    assert (await store.load("a")).data == {"n": 2}


async def test_calls_with_different_event_parameters_are_not_merged(store: StateStore) -> None:
    def bump(data: dict[str, Any]) -> None:
        data["n"] = data.get("n", 0) + 1

    await asyncio.gather(
        *(update(store, "a", bump, info={"i": i}, actor=f"w{i % 2}") for i in range(6))
    )
    events = [e async for e in store.history("a")]
    assert sorted(e.info["i"] for e in events) == list(range(6))  # one event each
    assert all(e.actor == f"w{e.info['i'] % 2}" for e in events)
    assert (await store.load("a")).data == {"n": 6}


async def test_a_cancelled_caller_does_not_block_the_others(store: StateStore) -> None:
    gate = asyncio.Event()

    async def slow(data: dict[str, Any]) -> None:
        await gate.wait()
        data["slow"] = True

    def bump(data: dict[str, Any]) -> None:
        data["n"] = data.get("n", 0) + 1

    first = asyncio.ensure_future(update(store, "a", slow))
    queued = asyncio.ensure_future(update(store, "a", bump))  # waits behind `first`
    doomed = asyncio.ensure_future(update(store, "a", bump))
    await asyncio.sleep(0)
    doomed.cancel()
    gate.set()
    await first
    assert (await queued).data == {"slow": True, "n": 1}
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert (await store.load("a")).data == {"slow": True, "n": 1}


async def test_merge_into_takes_the_same_budget(store: StateStore) -> None:
    from statekeeper.concurrency import Version, merge_into

    await store.save("doc", {"title": "t"})
    with pytest.raises(ConfigurationError, match="budget"):
        await merge_into(store, "doc", Version({"title": "x"}), base_seq=1, budget=0)
    with pytest.raises(ConfigurationError, match="attempts"):
        await merge_into(store, "doc", Version({"title": "x"}), base_seq=1, attempts=0)
    done = await merge_into(store, "doc", Version({"title": "x"}), base_seq=1)
    assert done.seq == 2 and (await store.load("doc")).data["title"] == "x"


async def test_a_failed_read_fails_the_waiting_calls_and_the_next_ones_work(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statekeeper.errors import BackendError

    real_get = store.get
    failures = 1

    async def flaky_get(agent_id: str) -> Any:
        nonlocal failures
        if failures:
            failures -= 1
            raise BackendError("the server went away")
        return await real_get(agent_id)

    monkeypatch.setattr(store, "get", flaky_get)

    def bump(data: dict[str, Any]) -> None:
        data["n"] = data.get("n", 0) + 1

    outcomes = await asyncio.gather(
        *(update(store, "a", bump) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(o, BackendError) for o in outcomes)  # nobody is left waiting
    assert (await update(store, "a", bump)).data == {"n": 1}
