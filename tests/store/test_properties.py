"""Property tests: whatever sequence of writes (and failed writes) an agent goes through,
the stored stream replays to exactly the state the live store served, snapshots never
change a result, and nothing is ever corrupted."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from statekeeper import (
    ConflictError,
    SerializationError,
    StateStore,
)
from statekeeper.backends import MemoryBackend
from statekeeper.backends.base import Backend
from statekeeper.errors import PatchError
from statekeeper.patch import diff

from ..conftest import FakeClock

# -- documents and operations ----------------------------------------------------------------

SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, 1, 0.0, 1.0, True, False]),
    st.text(max_size=4),
)
DOC = st.fixed_dictionaries(
    {},
    optional={
        "messages": st.lists(st.text(max_size=3), max_size=5),
        "n": SCALAR,
        "meta": st.dictionaries(st.sampled_from(["x", "y", "z", "a/b", "~"]), SCALAR, max_size=3),
        "tools": st.lists(st.dictionaries(st.sampled_from(["name", "ok"]), SCALAR), max_size=3),
    },
)
FSM = st.sampled_from(["idle", "processing", "waiting", "done"])

#: operations that always succeed
GOOD = st.one_of(
    st.tuples(st.just("save"), DOC, st.none() | FSM),
    st.tuples(st.just("patch"), DOC),  # append with the ops that turn the state into DOC
    st.tuples(st.just("note"), st.dictionaries(st.sampled_from(["why", "tool"]), SCALAR)),
    st.tuples(st.just("move"), FSM),
    st.tuples(st.just("keyed"), st.integers(0, 3), DOC),  # may be a retry of an earlier key
    st.tuples(st.just("snapshot")),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("other"), DOC),  # another store writes the same agent
)
#: operations that must fail and change nothing
BAD = st.one_of(
    st.tuples(st.just("stale"), DOC),
    st.tuples(st.just("bad_ops")),
    st.tuples(st.just("bad_value"), DOC),
)
OPS = st.lists(GOOD, min_size=1, max_size=25)
MIXED = st.lists(st.one_of(GOOD, GOOD, BAD, st.tuples(st.just("delete"))), min_size=1, max_size=30)

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def strict(a: Any, b: Any) -> bool:
    """JSON equality (``True``, ``1`` and ``1.0`` differ)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(strict(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(strict(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


# -- an interpreter with a model ------------------------------------------------------------------

AGENT = "agent"


@dataclass
class Model:
    """What the stream must contain: the (data, fsm) after every seq."""

    states: list[tuple[dict[str, Any], str | None]] = field(default_factory=list)
    keys: dict[str, int] = field(default_factory=dict)

    @property
    def data(self) -> dict[str, Any]:
        return self.states[-1][0] if self.states else {}

    @property
    def fsm(self) -> str | None:
        return self.states[-1][1] if self.states else None

    def push(self, data: dict[str, Any], fsm: str | None) -> None:
        self.states.append((data, fsm))


async def run(
    ops: list[tuple[Any, ...]], backend: Backend, *, snapshot_every: int, clock: FakeClock
) -> Model:
    """Apply ``ops`` through a live store, checking it against the model after each one."""
    options = {"snapshot_every": snapshot_every, "clock": clock}
    store = StateStore(backend, **options)
    other = StateStore(backend, **options)
    model = Model()
    try:
        for op in ops:
            clock.advance(1.0)
            kind = op[0]
            exists = bool(model.states)
            if kind == "save":
                _, doc, fsm = op
                await store.save(AGENT, doc, fsm_state=fsm)
                model.push(doc, fsm if fsm is not None else model.fsm)
            elif kind == "other":
                await other.save(AGENT, op[1])
                model.push(op[1], model.fsm)
            elif kind == "patch" and exists:
                await store.append(AGENT, "edit", ops=diff(model.data, op[1]))
                model.push(op[1], model.fsm)
            elif kind == "note" and exists:
                await store.append(AGENT, "note", op[1])
                model.push(model.data, model.fsm)
            elif kind == "move" and exists:
                await store.append(AGENT, "transition", {"to": op[1]}, fsm_state=op[1])
                model.push(model.data, op[1])
            elif kind == "keyed" and exists:
                key = f"key-{op[1]}"
                result = await store.append(
                    AGENT, "step", ops=diff(model.data, op[2]), idempotency_key=key
                )
                if key in model.keys:
                    assert result.duplicate and result.last_seq == model.keys[key]
                else:
                    assert not result.duplicate
                    model.push(op[2], model.fsm)
                    model.keys[key] = len(model.states)
            elif kind == "snapshot" and exists:
                assert await store.snapshot(AGENT) == len(model.states)
            elif kind == "reopen":
                await store.close()
                store = StateStore(backend, **options)
            elif kind == "stale" and exists:
                with pytest.raises(ConflictError):
                    await store.save(AGENT, op[1], expected_seq=len(model.states) - 1)
            elif kind == "bad_ops" and exists:
                with pytest.raises(PatchError):
                    await store.append(AGENT, "edit", ops=[{"op": "remove", "path": "/~nope"}])
            elif kind == "bad_value":
                with pytest.raises(SerializationError):
                    await store.save(AGENT, {**op[1], "bad": {"obj": object()}})
            elif kind == "delete":
                assert await store.delete(AGENT) is exists
                model = Model()
            # the live store serves exactly the model, and so does any other reader
            if model.states:
                for reader in (store, other):
                    snap = await reader.load(AGENT)
                    assert snap.seq == len(model.states)
                    assert strict(snap.data, model.data)
                    assert snap.fsm_state == model.fsm
            else:
                assert await store.get(AGENT) is None
        return model
    finally:
        await store.close()
        await other.close()


async def replayed(backend: Backend, seq: int) -> tuple[dict[str, Any], str | None]:
    """The state at ``seq`` as a fresh store (no cache) folds it from storage."""
    store = StateStore(backend)
    snap = await store.load(AGENT, at_seq=seq)
    return snap.data, snap.fsm_state


class Reusable(MemoryBackend):
    """A memory backend that survives ``close()`` (stores in a test reopen it)."""

    async def close(self) -> None:
        return None


# -- the properties -----------------------------------------------------------------------------


@SETTINGS
@given(ops=OPS, snapshot_every=st.integers(1, 8))
def test_replay_of_the_stream_equals_the_live_state(
    ops: list[tuple[Any, ...]], snapshot_every: int
) -> None:
    async def scenario() -> None:
        backend = Reusable()
        model = await run(ops, backend, snapshot_every=snapshot_every, clock=FakeClock())
        for seq, (data, fsm) in enumerate(model.states, start=1):
            got_data, got_fsm = await replayed(backend, seq)
            assert strict(got_data, data), seq
            assert got_fsm == fsm
        report = await StateStore(backend).verify()
        assert report.ok, report.problems

    asyncio.run(scenario())


@SETTINGS
@given(ops=OPS, snapshot_every=st.integers(1, 10))
# found by hypothesis: a patch with a typed value ("$t") onto a state the store holds as
# JSON bytes only (a plain document handed out by a load) raised AssertionError
@example(
    ops=[
        ("save", {}, None),
        ("keyed", 0, {}),
        ("keyed", 0, {}),
        ("keyed", 0, {"messages": ["$t"]}),
    ],
    snapshot_every=1,
)
def test_snapshot_plus_tail_equals_full_replay(
    ops: list[tuple[Any, ...]], snapshot_every: int
) -> None:
    async def scenario() -> None:
        with_snaps, without = Reusable(), Reusable()
        model = await run(ops, with_snaps, snapshot_every=snapshot_every, clock=FakeClock())
        await run(ops, without, snapshot_every=10**9, clock=FakeClock())
        assert await without.latest_snapshot(AGENT) is None or any(o[0] == "snapshot" for o in ops)
        a, b = StateStore(with_snaps), StateStore(without)
        for seq in range(1, len(model.states) + 1):
            x, y = await a.load(AGENT, at_seq=seq), await b.load(AGENT, at_seq=seq)
            assert strict(x.data, y.data)
            assert (x.fsm_state, x.updated_at, x.state_entered_at, x.created_at) == (
                y.fsm_state,
                y.updated_at,
                y.state_entered_at,
                y.created_at,
            )

    asyncio.run(scenario())


@SETTINGS
@given(ops=MIXED, snapshot_every=st.integers(1, 6))
def test_random_mixes_with_failures_never_corrupt(
    ops: list[tuple[Any, ...]], snapshot_every: int
) -> None:
    async def scenario() -> None:
        backend = Reusable()
        model = await run(ops, backend, snapshot_every=snapshot_every, clock=FakeClock())
        report = await StateStore(backend).verify()
        assert report.ok, report.problems
        assert await backend.head(AGENT) == len(model.states)
        if model.states:
            data, fsm = await replayed(backend, len(model.states))
            assert strict(data, model.data) and fsm == model.fsm

    asyncio.run(scenario())


@settings(SETTINGS, max_examples=25)
@given(ops=MIXED)
def test_random_mixes_on_sqlite(tmp_path_factory: pytest.TempPathFactory, ops: list[Any]) -> None:
    path: Path = tmp_path_factory.mktemp("prop") / "p.db"

    async def scenario() -> None:
        url = f"sqlite:///{path}?synchronous=OFF"
        model = await run(ops, url, snapshot_every=3, clock=FakeClock())  # type: ignore[arg-type]
        async with StateStore(url) as fresh:
            assert (await fresh.verify()).ok
            if model.states:
                snap = await fresh.load(AGENT)
                assert strict(snap.data, model.data) and snap.fsm_state == model.fsm
            else:
                assert await fresh.get(AGENT) is None

    asyncio.run(scenario())
