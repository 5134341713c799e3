"""The concurrency tools from sync code (``statekeeper.concurrency.sync``): durable steps
whose side effect runs once across a retry and a SIGKILL, leases whose heartbeat keeps
them while the user's sync code blocks and whose late writes are refused with
``LeaseLost``, update/update_agent that retry a conflict on the fresh state — in the
caller's thread, with the async side's exceptions — and a store whose close releases
its leases."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from statekeeper import StateTransition, SyncStateStore
from statekeeper.concurrency import SyncLease, SyncLeaseManager, SyncSteps
from statekeeper.concurrency.crdt import GCounter
from statekeeper.concurrency.merge import CRDTs, Merger, Version
from statekeeper.concurrency.sync import merge_into, update, update_agent
from statekeeper.errors import (
    AgentNotFound,
    ConfigurationError,
    ConflictError,
    InvalidArgument,
    LeaseHeld,
    LeaseLost,
    RetriesExhausted,
    StoreClosed,
)

from .test_multiprocess import finish, go, kill_all, spawn
from .test_steps import STEPS, _effects

T = TypeVar("T")


def wait_for(condition: Callable[[], T], what: str, timeout: float = 60.0) -> T:
    """``condition()``'s first truthy value (polled: a condition, not a duration)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)
    return value


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agents.db'}"


@pytest.fixture
def two(url: str) -> Iterator[tuple[SyncStateStore, SyncStateStore]]:
    """Two sync stores over one SQLite file: two workers."""
    with SyncStateStore(url) as mine, SyncStateStore(url) as theirs:
        yield mine, theirs


# -- steps ------------------------------------------------------------------------------


def test_a_sync_step_runs_its_effect_once_across_a_retry_in_the_callers_thread() -> None:
    me = threading.get_ident()
    with SyncStateStore("memory://") as store:
        steps = SyncSteps(store, "order-7")
        calls: list[tuple[int, int]] = []

        def charge(amount: int) -> dict[str, int]:
            calls.append((amount, threading.get_ident()))
            if len(calls) == 1:
                raise ConnectionError("the payment API is down")  # not recorded
            store.save("ledger", {"charged": amount})  # the sync store, inside a step
            return {"charged": amount}

        with pytest.raises(ConnectionError, match="payment API"):
            steps.run("charge", charge, 30)
        assert steps.recorded("charge") is None
        assert steps.run("charge", charge, 30) == {"charged": 30}  # the retry
        assert steps.run("charge", charge, 99) == {"charged": 30}  # recorded: not run
        assert SyncSteps(store, "order-7").run("charge", charge, 5) == {"charged": 30}
        assert calls == [(30, me), (30, me)]
        assert store.load("ledger").data == {"charged": 30}
        record = steps.recorded("charge")
        assert record is not None and record.result == {"charged": 30}
        assert steps.results() == {"charge": {"charged": 30}}
        assert steps.idempotency_key("charge") == "order-7/step:charge"


def test_an_interrupt_inside_a_sync_step_records_nothing_and_is_raised() -> None:
    with SyncStateStore("memory://") as store:
        steps = SyncSteps(store, "job")

        def interrupted() -> int:
            raise KeyboardInterrupt  # Ctrl-C while the step's code runs

        with pytest.raises(KeyboardInterrupt):
            steps.run("s", interrupted)
        assert steps.recorded("s") is None  # the step's coroutine was cancelled
        assert steps.run("s", lambda: 7) == 7  # and the store goes on working


def test_the_decorator_and_the_context_form_are_durable_steps_too() -> None:
    with SyncStateStore("memory://") as store:
        steps = SyncSteps(store, "mail")
        sent: list[int] = []

        @steps.step(lambda n: f"email-{n}")
        def email(n: int) -> int:
            sent.append(n)
            return n * 10

        @steps.step()
        async def an_async_one() -> str:  # an async function works from sync code too
            return "async"

        assert [email(1), email(2), email(1)] == [10, 20, 10]
        assert an_async_one() == an_async_one() == "async"
        assert sent == [1, 2]
        with steps.once("report") as first:
            assert first.needed
            first.result = {"pages": 3}
        with pytest.raises(RuntimeError), steps.once("failing") as failing:
            assert failing.needed
            raise RuntimeError("not recorded")
        with steps.once("report") as again:
            assert not again.needed and again.result == {"pages": 3}
        # (an id by the async rule: the function's qualified name)
        assert list(steps.results()) == ["email-1", "email-2", an_async_one.__qualname__, "report"]


def test_steps_of_a_sync_agent_commit_with_its_data_and_refuse_what_async_refuses() -> None:
    with SyncStateStore("memory://") as store:
        agent = store.agent("chat")
        agent.data["messages"] = ["hi"]
        assert SyncSteps(agent).run("llm", lambda: "hello") == "hello"
        assert store.load("chat").data == {"messages": ["hi"]}  # in the step's event
        assert [e.type for e in store.history("chat")][-1] == "step"
        with pytest.raises(ConfigurationError):
            SyncSteps(agent, lease=SyncLeaseManager(store).acquire("chat"))
        with pytest.raises(InvalidArgument, match="fn must be callable"):
            SyncSteps(store, "chat").run("x", "not a function")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="not a JSON value"):
            SyncSteps(store, "chat").run("y", lambda: {1, 2})
        with pytest.raises(InvalidArgument, match="target"):
            SyncSteps(store.store, "chat")  # type: ignore[arg-type]


def _run_sync_worker(url: str, log: Path, pause: str | None = None) -> Any:
    """The ``sync-steps`` worker (``_workers.py``); with ``pause``, SIGKILLed there."""
    proc = spawn("sync-steps", url, "job", str(log), str(STEPS), *([pause] if pause else []))
    try:
        go(proc)
        if pause is None:
            return finish(proc, timeout=120)
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["at", pause]
        proc.kill()  # SIGKILL: no cleanup, no flush, nothing
        proc.wait(timeout=30)
        return None
    finally:
        kill_all([proc])


@pytest.mark.parametrize(
    ("crashes", "twice"),
    [
        pytest.param(["before:3"], set(), id="between-steps"),
        pytest.param(["inside:2", "before:5"], set(), id="inside-a-step-then-between"),
        # the documented boundary: the effect happened, its record did not commit
        pytest.param(["after-effect:4"], {4}, id="after-the-effect-before-the-record"),
    ],
)
def test_a_killed_sync_worker_recovers_with_each_effect_once(
    tmp_path: Path, crashes: list[str], twice: set[int]
) -> None:
    url = f"sqlite:///{tmp_path / 'steps.db'}"
    log = tmp_path / "effects.log"
    for pause in crashes:
        _run_sync_worker(url, log, pause)
    results = _run_sync_worker(url, log)
    assert [r["step"] for r in results] == list(range(1, STEPS + 1))
    assert _effects(log) == {k: 2 if k in twice else 1 for k in range(1, STEPS + 1)}
    recovering = results[-1]["pid"]
    for r in results[: int(crashes[0].split(":")[1]) - 1]:  # recorded before the crash
        assert r["pid"] != recovering
    with SyncStateStore(url) as store:
        assert store.verify().ok
        assert list(SyncSteps(store, "job").results()) == [f"step-{k}" for k in range(1, 7)]


# -- leases ------------------------------------------------------------------------------


def test_the_heartbeat_keeps_a_sync_lease_while_the_users_code_blocks(
    two: tuple[SyncStateStore, SyncStateStore],
) -> None:
    mine, theirs = two
    other = SyncLeaseManager(theirs, holder="B")
    lease = SyncLeaseManager(mine, holder="A").acquire("job", ttl=30)
    lease.start_heartbeat(interval=0.05)
    first_expiry = lease.expires_at
    steps = SyncSteps(mine, "job", lease=lease)

    def long_call() -> str:  # blocks this thread until the heartbeat has renewed twice
        # (a condition, not a duration: a long TTL keeps a loaded machine's stall harmless)
        seen = wait_for(lambda: lease.expires_at > first_expiry and lease.expires_at, "a renewal")
        wait_for(lambda: lease.expires_at > seen, "a second renewal while this code blocks")
        assert other.try_acquire("job") is None  # still A's
        return "done"

    assert steps.run("long", long_call) == "done"  # its record is fenced: still A's
    assert lease.expires_at > first_expiry and not lease.lost
    mine.save("job", {"by": "A"}, lease=lease)
    with pytest.raises(LeaseHeld):
        other.acquire("job")
    assert lease.release() is True
    assert other.try_acquire("job") is not None


def test_a_write_under_a_lost_sync_lease_is_refused_with_lease_lost(
    two: tuple[SyncStateStore, SyncStateStore],
) -> None:
    mine, theirs = two
    me = threading.get_ident()
    old = SyncLeaseManager(mine, holder="A").acquire("job", ttl=0.05)
    mine.save("job", {"by": "A"}, lease=old)
    taker = SyncLeaseManager(theirs, holder="B")
    new = wait_for(lambda: taker.try_acquire("job", 30), "A's lease to run out")
    assert new is not None
    theirs.save("job", {"by": "B"}, lease=new)

    with pytest.raises(LeaseLost) as refused:
        mine.save("job", {"by": "A, late"}, lease=old)
    assert (refused.value.token, refused.value.current_token) == (old.token, new.token)
    agent = mine.agent("job", lease=old)
    agent.data["late"] = True
    with pytest.raises(LeaseLost):
        agent.save()
    agent.refresh()
    with pytest.raises(LeaseLost):
        update(mine, "job", lambda data: data.update(late=True), lease=old)
    assert theirs.load("job").data == {"by": "B"}

    # the heartbeat learns it: on_lost runs off the loop (it may use the sync store)
    lost = threading.Event()
    seen: list[Any] = []

    def on_lost(lease: SyncLease, error: BaseException) -> None:
        seen.append((lease, type(error), mine.load("job").data, threading.get_ident()))
        lost.set()

    old.start_heartbeat(interval=0.01, on_lost=on_lost)
    assert lost.wait(60)
    assert seen[0][:3] == (old, LeaseLost, {"by": "B"}) and seen[0][3] != me
    assert old.lost and isinstance(old.refusal(), LeaseLost)
    ran: list[int] = []
    with pytest.raises(LeaseLost):  # known lost: the step's effect does not run
        SyncSteps(mine, "job", lease=old).run("s", lambda: ran.append(1))
    assert ran == []
    with pytest.raises(LeaseLost):
        old.renew()
    assert old.release() is False  # taken over: nothing to release


def test_hold_heartbeats_and_releases_and_hands_on_lost_the_same_lease(
    two: tuple[SyncStateStore, SyncStateStore],
) -> None:
    mine, theirs = two
    manager = SyncLeaseManager(mine, holder="A", ttl=30)
    with manager.hold("job") as lease:
        assert isinstance(lease, SyncLease) and lease.lease._heartbeat is not None
        assert SyncLeaseManager(theirs, holder="B").try_acquire("job") is None
        info = manager.current("job")
        assert info is not None and info.holder == "A" and info.token == lease.token
    assert lease.released
    with manager.acquire("other") as other:  # a lease is a context manager too
        assert not other.released
    assert other.released
    assert SyncLeaseManager(theirs, holder="B").try_acquire("job") is not None
    with pytest.raises(InvalidArgument, match="on_lost"), manager.hold("x", on_lost=3):  # type: ignore[arg-type]
        pass
    with pytest.raises(InvalidArgument, match="target"):
        SyncLeaseManager(mine.store)  # type: ignore[arg-type]


def test_closing_the_store_releases_its_leases_and_stops_their_heartbeats(url: str) -> None:
    store = SyncStateStore(url)
    manager = SyncLeaseManager(store, holder="A", ttl=30)
    beating = manager.acquire("job")
    beating.start_heartbeat(interval=0.01)
    task = beating.lease._heartbeat
    idle = manager.acquire("idle")
    given_up = manager.acquire("given-up")
    assert given_up.release() is True
    store.close()
    assert beating.released and idle.released
    assert task is not None and task.done()
    with SyncStateStore(url) as other:
        taker = SyncLeaseManager(other, holder="B", ttl=30)
        assert taker.try_acquire("job") is not None  # released, not left to run out
        assert taker.try_acquire("idle") is not None
    with pytest.raises(StoreClosed):
        beating.renew()
    with pytest.raises(StoreClosed):
        SyncSteps(store, "job").run("s", lambda: 1)
    with pytest.raises(StoreClosed):
        update(store, "job", lambda data: None)
    with pytest.raises(StoreClosed):
        manager.acquire("again")


# -- update, update_agent, merge_into ---------------------------------------------------


def test_sync_update_retries_a_conflict_on_the_fresh_state() -> None:
    me = threading.get_ident()
    with SyncStateStore("memory://") as store:
        store.save("a", {"n": 0})
        seen: list[tuple[dict[str, Any], int]] = []

        def add_one(data: dict[str, Any]) -> None:
            seen.append((dict(data), threading.get_ident()))
            if len(seen) == 1:
                store.save("a", {"n": 100})  # another writer gets there first
            data["n"] += 1

        done = update(store, "a", add_one)
        assert seen == [({"n": 0}, me), ({"n": 100}, me)]
        assert (done.attempts, done.data, done.seq) == (2, {"n": 101}, 3)
        assert store.load("a").data == {"n": 101}

        def always_beaten(data: dict[str, Any]) -> None:
            store.save("a", {"n": data["n"] + 100})
            data["n"] += 1

        with pytest.raises(RetriesExhausted) as exhausted:
            update(store, "a", always_beaten, attempts=3)
        assert exhausted.value.attempts == 3 and isinstance(exhausted.value, ConflictError)
        with pytest.raises(ZeroDivisionError):
            update(store, "a", lambda data: data.update(n=1 / 0))
        with pytest.raises(AgentNotFound):
            update(store, "missing", lambda data: None, create=False)
        with pytest.raises(InvalidArgument, match="fn must be callable"):
            update(store, "a", None)  # type: ignore[arg-type]
        first = update(store, "acct", lambda d: d.update(b=10), idempotency_key="dep-1")
        retry = update(store, "acct", lambda d: d.update(b=99), idempotency_key="dep-1")
        assert retry.result is not None and retry.result.duplicate and retry.seq == first.seq


def test_sync_updates_from_many_threads_lose_nothing(url: str) -> None:
    def bump(data: dict[str, Any]) -> None:
        data["n"] = data.get("n", 0) + 1

    with SyncStateStore(url) as store, ThreadPoolExecutor(8) as pool:
        done = list(pool.map(lambda _: update(store, "counter", bump), range(200)))
        assert store.load("counter").data == {"n": 200}
        assert len({d.data["n"] for d in done}) == 200  # each saw its own change


def test_sync_update_agent_refreshes_and_runs_again_on_a_conflict() -> None:
    with SyncStateStore("memory://") as store:
        agent = store.agent("task")
        runs: list[dict[str, Any]] = []

        def work(a: Any) -> None:
            assert a is agent
            runs.append(dict(a.data))
            if len(runs) == 1:
                store.save("task", {"note": "elsewhere"})  # a concurrent write
            a.data["done"] = True
            a.transition(StateTransition.START_PROCESSING)

        seq = update_agent(agent, work)
        assert runs == [{}, {"note": "elsewhere"}]
        stored = store.load("task")
        assert stored.seq == seq and stored.fsm_state == "processing"
        assert stored.data == {"note": "elsewhere", "done": True}
        agent.data["unsaved"] = 1
        with pytest.raises(InvalidArgument, match="unsaved changes"):
            update_agent(agent, work)
        agent.refresh()


def test_sync_merge_into_merges_an_offline_copy() -> None:
    with SyncStateStore("memory://") as store:
        store.save("doc", {"title": "t", "likes": GCounter().to_json()})
        copied = store.load("doc")
        copy = Version.of(copied.data)
        store.save("doc", {"title": "t", "likes": GCounter({"server": 1}).to_json()})
        edited = copy.edited(
            {"title": "offline", "likes": GCounter({"laptop": 2}).to_json()}, "laptop"
        )
        result = merge_into(
            store, "doc", edited, base_seq=copied.seq, created_at=copied.created_at,
            merger=Merger(fields={"likes": CRDTs()}),
        )  # fmt: skip
        data = Version.of(store.load("doc").data).data
        assert result.merged and data["title"] == "offline"
        assert GCounter.from_json(data["likes"]).value == 3
