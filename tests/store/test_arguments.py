"""Every public call refuses a bad argument with an ``InvalidArgument`` that names it,
before anything is written — on every backend that writes (issue 9, items 9 and 10)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import (
    AgentState,
    AgentStateMachine,
    InvalidArgument,
    StatekeeperError,
    StatePersistenceManager,
    StateStore,
    StateTransition,
    StorageBackend,
    SyncStateStore,
)
from statekeeper.concurrency import LeaseManager, Steps, update
from statekeeper.errors import InvalidAgentId

from ..backends._services import (
    fresh_url,
)

Call = Callable[[StateStore], Awaitable[Any]]


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store URL on each engine that writes (servers: their own namespace)."""
    if request.param in ("postgres", "redis"):
        pytest.importorskip("psycopg" if request.param == "postgres" else "redis")
    with fresh_url(request.param, tmp_path, "args.db") as url:
        yield url


@pytest.fixture
async def store(any_url: str) -> AsyncIterator[StateStore]:
    async with StateStore(any_url) as opened:
        await opened.save("a1", {"n": 1})
        yield opened


async def _unchanged(store: StateStore) -> None:
    """Nothing was written: a1 is as the fixture left it and no agent appeared."""
    assert await store.head("a1") == 1
    assert (await store.load("a1")).data == {"n": 1}
    assert [info.agent_id for info in await store.list_agents()] == ["a1"]


def _refused(info: pytest.ExceptionInfo[InvalidArgument], argument: str) -> None:
    assert isinstance(info.value, StatekeeperError)
    assert info.value.argument == argument
    assert argument in str(info.value)


class _NoFence:
    fence = "holder"


WRITES: list[Any] = [
    pytest.param(lambda s: s.save("a1", [1, 2]), "data", id="save-list"),
    pytest.param(lambda s: s.save("a1", None), "data", id="save-none"),
    pytest.param(lambda s: s.save("a2", "text"), "data", id="save-str-new-agent"),
    pytest.param(lambda s: s.create("a2", [1]), "data", id="create-list"),
    pytest.param(lambda s: s.save("a1", {}, fsm_state=5), "fsm_state", id="fsm-int"),
    pytest.param(lambda s: s.save("a1", {}, fsm_state=""), "fsm_state", id="fsm-empty"),
    pytest.param(lambda s: s.create("a2", {}, fsm_state="a\x00"), "fsm_state", id="fsm-nul"),
    pytest.param(lambda s: s.save("a1", {}, idempotency_key=5), "idempotency_key", id="key-int"),
    pytest.param(
        lambda s: s.save("a1", {}, idempotency_key=b"k"), "idempotency_key", id="key-bytes"
    ),
    pytest.param(
        lambda s: s.append("a1", "note", idempotency_key=""), "idempotency_key", id="key-empty"
    ),
    pytest.param(lambda s: s.save("a1", {}, expected_seq="1"), "expected_seq", id="seq-str"),
    pytest.param(lambda s: s.save("a1", {}, expected_seq=True), "expected_seq", id="seq-bool"),
    pytest.param(lambda s: s.save("a1", {}, expected_seq=-1), "expected_seq", id="seq-negative"),
    pytest.param(lambda s: s.save("a1", {}, actor=3), "actor", id="actor-int"),
    pytest.param(lambda s: s.save("a1", {}, info=[1]), "info", id="info-list"),
    pytest.param(lambda s: s.append("a1", "note", "text"), "info", id="append-info-str"),
    pytest.param(lambda s: s.save("a1", {}, event_type=3), "event_type", id="type-int"),
    pytest.param(lambda s: s.append("a1", "snapshot"), "event_type", id="type-reserved"),
    pytest.param(  # a delete's tombstone's type (trialdata: a feed consumer took it for one)
        lambda s: s.append("a1", "statekeeper.agent_deleted"), "event_type", id="type-tombstone"
    ),
    pytest.param(
        lambda s: s.save("a1", {}, event_type="statekeeper.agent_deleted"),
        "event_type",
        id="save-type-tombstone",
    ),
    pytest.param(lambda s: s.append("a1", "a\x00b"), "event_type", id="type-nul"),
    pytest.param(lambda s: s.save("a1", {}, lease=object()), "lease", id="lease-object"),
    pytest.param(lambda s: s.save("a1", {}, lease=_NoFence()), "lease", id="lease-bad-fence"),
    pytest.param(
        lambda s: s.save("a1", {}, schema_version="2"), "schema_version", id="version-str"
    ),
    pytest.param(lambda s: s.append("a1", "edit", ops={"op": "add"}), "ops", id="ops-dict"),
    pytest.param(lambda s: s.append("a1", "edit", ops="add"), "ops", id="ops-str"),
    pytest.param(lambda s: s.append("a1", "edit", ops=[1]), "ops[0]", id="ops-item-int"),
    pytest.param(
        lambda s: s.append("a1", "edit", ops=[{"op": "add", "path": "/a", "value": 1}, "x"]),
        "ops[1]",
        id="ops-second-item",
    ),
    pytest.param(
        lambda s: s.append("a1", "edit", ops=[{"path": "/x", "value": 1}]),
        "ops[0].op",
        id="ops-no-op",
    ),
    pytest.param(
        lambda s: s.append("a1", "edit", ops=[{"op": "add", "path": "x", "value": 1}]),
        "ops[0].path",
        id="ops-bad-pointer",
    ),
    pytest.param(
        lambda s: s.append("a1", "edit", ops=[{"op": "add", "path": 3, "value": 1}]),
        "ops[0].path",
        id="ops-path-int",
    ),
    pytest.param(
        lambda s: s.append("a1", "edit", ops=[{"op": "add", "path": "/x"}]),
        "ops[0].value",
        id="ops-no-value",
    ),
    pytest.param(
        lambda s: s.append("a1", "edit", ops=[{"op": "move", "path": "/x"}]),
        "ops[0].from",
        id="ops-move-no-from",
    ),
]


async def _each_refused(store: StateStore, cases: list[Any]) -> None:
    """Every (call, argument) case on one store, in turn: the call raises InvalidArgument
    naming the argument and leaves the store unchanged (a store per case cost a store
    opening each, a PostgreSQL schema each; a case that wrote fails _unchanged at once)."""
    for param in cases:
        call: Call = param.values[0]
        argument: str = param.values[1]
        try:
            with pytest.raises(InvalidArgument) as info:
                await call(store)
            _refused(info, argument)
            await _unchanged(store)
        except (Exception, pytest.fail.Exception) as failed:  # name the case that failed
            raise AssertionError(f"{param.id}: {failed!r}"[:500]) from failed


async def test_writes_refuse_bad_arguments_before_writing(store: StateStore) -> None:
    await _each_refused(store, WRITES)


async def _drain(iterator: AsyncIterator[Any]) -> None:
    async for _ in iterator:
        pass


READS: list[Any] = [
    pytest.param(lambda s: s.load("a1", at_seq="1"), "at_seq", id="load-at-seq-str"),
    pytest.param(lambda s: s.load("a1", at_seq=1.0), "at_seq", id="load-at-seq-float"),
    pytest.param(lambda s: s.load("a1", at_time="now"), "at_time", id="load-at-time-str"),
    pytest.param(lambda s: s.load("a1", at_time=math.nan), "at_time", id="load-at-time-nan"),
    pytest.param(lambda s: _drain(s.history("a1", after_seq="0")), "after_seq", id="history"),
    pytest.param(lambda s: _drain(s.history("a1", to_seq=-1)), "to_seq", id="history-to"),
    pytest.param(lambda s: s.list_agents(limit=0), "limit", id="list-limit-0"),
    pytest.param(lambda s: s.list_agents(limit="9"), "limit", id="list-limit-str"),
    pytest.param(lambda s: s.list_agents(after=5), "after", id="list-after-int"),
    pytest.param(lambda s: s.find_key("a1", 5), "key", id="find-key-int"),
    pytest.param(lambda s: s.digest("a1", at_seq="1"), "at_seq", id="digest-at-seq"),
    pytest.param(lambda s: s.verify("a1"), "agent_ids", id="verify-str"),
    pytest.param(lambda s: s.verify([None]), "agent_ids[]", id="verify-bad-id"),
    pytest.param(lambda s: s.check_digest("a1"), "expected", id="check-digest-str"),
]


async def test_reads_refuse_bad_arguments(store: StateStore) -> None:
    await _each_refused(store, READS)


# -- agent ids: one rule, in the store as in every backend --------------------------------

BAD_IDS: list[Any] = [
    pytest.param("", id="empty"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("a\ud800b", id="lone-surrogate"),
    pytest.param("x" * 1025, id="1025-bytes"),
    pytest.param("\u00e9" * 600, id="1200-bytes-600-chars"),
    pytest.param("x" * (1 << 20), id="1-MiB"),
    pytest.param(b"a1", id="bytes"),
    pytest.param(None, id="none"),
    pytest.param(["a1"], id="list"),
    pytest.param("\x01sk-cold/a1", id="reserved-prefix"),
]

ID_CALLS: list[Any] = [
    pytest.param(lambda s, a: s.save(a, {"x": 1}), id="save"),
    pytest.param(lambda s, a: s.create(a, {}), id="create"),
    pytest.param(lambda s, a: s.append(a, "note"), id="append"),
    pytest.param(lambda s, a: s.load(a), id="load"),
    pytest.param(lambda s, a: s.load(a, at_seq=1), id="load-at-seq"),
    pytest.param(lambda s, a: s.get(a), id="get"),
    pytest.param(lambda s, a: s.head(a), id="head"),
    pytest.param(lambda s, a: _drain(s.history(a)), id="history"),
    pytest.param(lambda s, a: s.snapshot(a), id="snapshot"),
    pytest.param(lambda s, a: s.delete(a), id="delete"),
    pytest.param(lambda s, a: s.find_key(a, "k"), id="find_key"),
    pytest.param(lambda s, a: s.digest(a), id="digest"),
    pytest.param(lambda s, a: s.agent(a), id="agent"),
    pytest.param(lambda s, a: s.verify([a]), id="verify"),
]


@pytest.mark.parametrize("bad", BAD_IDS)
async def test_bad_agent_ids_are_refused_by_every_call(store: StateStore, bad: Any) -> None:
    # one store per engine and id, every call on it in turn (a store per call cost 560
    # store openings, a PostgreSQL schema each); a call that wrote fails _unchanged at once
    for param in ID_CALLS:
        call: Callable[[StateStore, Any], Awaitable[Any]] = param.values[0]
        try:
            with pytest.raises(InvalidAgentId) as info:
                await call(store, bad)
        except (Exception, pytest.fail.Exception) as failed:  # name the call that failed
            raise AssertionError(f"{param.id}: {failed!r}"[:500]) from failed
        assert "agent_id" in str(info.value), param.id
        assert len(str(info.value)) < 300, param.id  # a 1 MiB id is not echoed back
        await _unchanged(store)


@pytest.mark.parametrize(
    "good",
    [
        pytest.param("x" * 1024, id="1024-ascii"),
        pytest.param("\U0001f642" * 256, id="1024-bytes-emoji"),
        pytest.param("user/42: \u65e5\u672c #1", id="punctuation-and-cjk"),
    ],
)
async def test_the_longest_valid_ids_work_on_every_backend(store: StateStore, good: str) -> None:
    await store.save(good, {"ok": True})
    agent = await store.agent(good)
    await agent.transition(StateTransition.START_PROCESSING)
    assert (await store.load(good)).fsm_state == "processing"
    assert [e.seq async for e in store.history(good)] == [1, 2]
    assert good in [info.agent_id for info in await store.list_agents()]
    assert (await store.verify([good])).ok
    assert await store.delete(good) is True


# -- fsm_state: a state of the agent's machine -----------------------------------------


async def test_a_state_outside_the_agents_machine_is_refused(store: StateStore) -> None:
    agent = await store.agent("a1")
    with pytest.raises(InvalidArgument) as info:
        await store.save("a1", {"n": 2}, fsm_state="dancing")
    _refused(info, "fsm_state")
    assert "dancing" in str(info.value)
    await _unchanged(store)
    await store.save("a1", {"n": 1}, fsm_state=AgentState.PROCESSING)  # an Enum state
    assert (await store.load("a1")).fsm_state == "processing"
    del agent
    reopened = await store.agent("a1")  # the agent can still be opened
    assert reopened.state is AgentState.PROCESSING


async def test_a_store_with_states_refuses_any_other(any_url: str) -> None:
    async with StateStore(any_url, states=AgentState) as store:
        with pytest.raises(InvalidArgument) as info:
            await store.save("a1", {}, fsm_state="dancing")
        _refused(info, "fsm_state")
        assert await store.head("a1") == 0
        await store.save("a1", {}, fsm_state="tool_call")
        agent = await store.agent("a1")
        assert agent.state is AgentState.TOOL_CALL


def test_the_states_option_is_checked() -> None:
    with pytest.raises(InvalidArgument) as info:
        StateStore("memory://", states="idle")
    _refused(info, "states")


# -- the durable agent -------------------------------------------------------------------


async def test_agent_calls_refuse_bad_arguments_before_the_machine_moves(
    store: StateStore,
) -> None:
    agent = await store.agent("a1")
    agent.data["pending"] = True
    cases: list[tuple[Callable[[], Awaitable[Any]], str]] = [
        (lambda: agent.transition(StateTransition.START_PROCESSING, [1]), "metadata"),
        (
            lambda: agent.transition(StateTransition.START_PROCESSING, idempotency_key=7),
            "idempotency_key",
        ),
        (lambda: agent.transition(StateTransition.START_PROCESSING, actor=b"me"), "actor"),
        (lambda: agent.save([1]), "info"),
        (lambda: agent.save(event_type=""), "event_type"),
        (lambda: agent.record(5), "event_type"),
        (lambda: agent.record("note", "text"), "info"),
        (lambda: store.agent("a1", "machine"), "machine"),
        (lambda: store.agent("a3", initial_data=[1]), "initial_data"),
        (lambda: store.agent("a3", strict="yes"), "strict"),
        (lambda: store.agent("a3", lease="token"), "lease"),
    ]
    for call, argument in cases:
        with pytest.raises(InvalidArgument) as info:
            await call()
        _refused(info, argument)
        assert agent.state is AgentState.IDLE
    with pytest.raises(InvalidArgument) as info:
        agent.bind("token")  # type: ignore[arg-type]
    _refused(info, "lease")
    assert agent.lease is None
    assert agent.machine.history == []
    await _unchanged(store)
    assert agent.dirty  # the pending change is still there to save
    await agent.refresh()  # dropped on purpose (else closing the store warns)


# -- leases, steps, update(), the seed facade, the sync face ---------------------------------


async def test_lease_calls_refuse_bad_arguments(store: StateStore) -> None:
    with pytest.raises(InvalidArgument) as info:
        LeaseManager("sqlite:///x.db")  # type: ignore[arg-type]
    _refused(info, "target")
    with pytest.raises(InvalidArgument) as info:
        LeaseManager(store, holder="")
    _refused(info, "holder")
    with pytest.raises(InvalidArgument) as info:
        LeaseManager(store, ttl="30")  # type: ignore[arg-type]
    _refused(info, "ttl")
    leases = LeaseManager(store, holder="w1")
    for call, argument in [
        (lambda: leases.acquire("a\x00"), "agent_id"),
        (lambda: leases.acquire("a1", ttl=-1), "ttl"),
        (lambda: leases.acquire("a1", wait=-1), "wait"),
        (lambda: leases.acquire("a1", poll=0), "poll"),
        (lambda: leases.current(None), "agent_id"),  # type: ignore[arg-type]
    ]:
        with pytest.raises(InvalidArgument) as info:
            await call()  # type: ignore[no-untyped-call]
        _refused(info, argument)
    assert await leases.current("a1") is None  # nothing was granted
    lease = await leases.acquire("a1")
    for call, argument in [
        (lambda: lease.renew(ttl=0), "ttl"),
        (lambda: _start(lease, interval="1"), "interval"),
        (lambda: _start(lease, on_lost=5), "on_lost"),
    ]:
        with pytest.raises(InvalidArgument) as info:
            await call()  # type: ignore[no-untyped-call]
        _refused(info, argument)
    assert await lease.release() is True


async def _start(lease: Any, **options: Any) -> None:
    lease.start_heartbeat(**options)


async def test_steps_refuse_bad_arguments(store: StateStore) -> None:
    with pytest.raises(InvalidArgument) as info:
        Steps(store)
    _refused(info, "agent_id")
    with pytest.raises(InvalidArgument) as info:
        Steps("store", "a1")  # type: ignore[arg-type]
    _refused(info, "target")
    with pytest.raises(InvalidAgentId):
        Steps(store, "a\x00")
    steps = Steps(store, "a1")
    for call, argument in [
        (lambda: steps.run("", lambda: 1), "step_id"),
        (lambda: steps.run(7, lambda: 1), "step_id"),  # type: ignore[arg-type]
        (lambda: steps.run("s", 5), "fn"),  # type: ignore[arg-type]
        (lambda: steps.run("s", object), "result"),
        (lambda: steps.recorded("x" * 2000), "step_id"),
    ]:
        with pytest.raises(InvalidArgument) as info:
            await call()  # type: ignore[no-untyped-call]
        _refused(info, argument)
    await _unchanged(store)


async def test_update_refuses_bad_arguments(store: StateStore) -> None:
    for call, argument in [
        (lambda: update(store, "a1", 5), "fn"),  # type: ignore[arg-type]
        (lambda: update(store, "", lambda d: None), "agent_id"),
        (lambda: update(store, "a1", lambda d: None, info=[1]), "info"),  # type: ignore[arg-type]
    ]:
        with pytest.raises(InvalidArgument) as info:
            await call()  # type: ignore[no-untyped-call]
        _refused(info, argument)
    with pytest.raises(InvalidArgument) as info:
        await update(store, "a1", lambda d: [1, 2])  # type: ignore[arg-type,return-value]
    await _unchanged(store)


async def test_the_seed_facade_refuses_bad_arguments(tmp_path: Path) -> None:
    async with StatePersistenceManager(
        StorageBackend.LOCAL, path=str(tmp_path / "seed.db"), durability="sync"
    ) as manager:
        for call, argument in [
            (lambda: manager.save_state("a1", [1, 2]), "state"),  # type: ignore[arg-type]
            (lambda: manager.save_state("a1", None), "state"),  # type: ignore[arg-type]
            (lambda: manager.save_state("a1", {}, version="1"), "version"),  # type: ignore[arg-type]
            (lambda: manager.save_state("a\x00", {}), "agent_id"),
            (lambda: manager.load_state(""), "agent_id"),
        ]:
            with pytest.raises(InvalidArgument) as info:
                await call()  # type: ignore[no-untyped-call]
            _refused(info, argument)
        assert await manager.store.count_agents() == 0


def test_the_sync_store_refuses_bad_arguments(tmp_path: Path) -> None:
    with SyncStateStore(f"sqlite:///{tmp_path / 'sync.db'}") as store:
        store.save("a1", {"n": 1})
        for call, argument in [
            (lambda: store.save("a1", [1, 2]), "data"),
            (lambda: store.append("a1", "edit", ops=[None]), "ops[0]"),  # type: ignore[list-item]
            (lambda: store.load("a1", at_seq="1"), "at_seq"),
            (lambda: store.save("a\ud800", {}), "agent_id"),
            (lambda: store.agent("a1", machine=AgentStateMachine).transition("x"), "machine"),
        ]:
            with pytest.raises(InvalidArgument) as info:
                call()  # type: ignore[no-untyped-call]
            _refused(info, argument)
        assert store.head("a1") == 1
        assert store.count_agents() == 1


async def test_repair_checks_every_agent_id_before_rebuilding(store: StateStore) -> None:
    from statekeeper.store.repair import repair

    for bad, argument in [("a1", "agent_ids"), (["a1", "a\x00"], "agent_ids[]")]:
        with pytest.raises(InvalidArgument) as info:
            await repair(store, bad, apply=True)
        _refused(info, argument)
    await _unchanged(store)


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"snapshot_every": "100"}, "snapshot_every"),
        ({"cache_size": None}, "cache_size"),
        ({"write_retries": 1.5}, "write_retries"),
        ({"flush_size": "10"}, "flush_size"),
        ({"flush_interval": "1"}, "flush_interval"),
        ({"max_event_bytes": "1000"}, "max_event_bytes"),
        ({"clock": 5}, "clock"),
        ({"states": 5}, "states"),
    ],
)
def test_store_options_are_checked_before_a_file_is_created(
    tmp_path: Path, options: dict[str, Any], argument: str
) -> None:
    with pytest.raises(InvalidArgument) as info:
        StateStore(f"sqlite:///{tmp_path / 'never.db'}", **options)
    _refused(info, argument)
    assert not (tmp_path / "never.db").exists()
    with pytest.raises(InvalidArgument) as info:
        StateStore(5)  # type: ignore[arg-type]
    _refused(info, "backend")
