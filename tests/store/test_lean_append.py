"""The lean keyed append (store/lean.py, issue 12): an event a caller built on a cached
agent (ops it applied itself, the document after them, an idempotency key) committed in
one call by ``Backend.commit_keyed`` — it stores what ``append_applied`` stores, byte for
byte; a key stored before answers as a duplicate with nothing written; a stale cached head
is refused with nothing written and the record dropped; every case it is not made for is
handed back with nothing done (one with a snapshot due is appended with it by the
engine's append, nothing built twice); the LangGraph saver's writes take it."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.codec import Codec
from statekeeper.errors import ConflictError
from statekeeper.records import AppendResult

from ..conftest import FakeClock
from ..lean_declines import LEAN, LOOP_WAITS, REASONS, TASK_READY, recording


def _ops(n: int) -> list[dict[str, Any]]:
    return [{"op": "replace", "path": "/cp", "value": {"step": n, "text": "x" * (n * 40)}}]


def _doc(n: int) -> dict[str, Any]:
    return {"cp": {"step": n, "text": "x" * (n * 40)}}


async def _stored(path: Path, agent: str) -> list[Any]:
    backend = SQLiteBackend(path)
    try:
        events = [
            (e.seq, e.type, e.timestamp, e.payload, e.checksum)
            for e in await backend.read(agent, 0, None)
        ]
        keys = [await backend.lookup_key(agent, f"k{n}") for n in range(1, 9)]
        return [events, keys, await backend.head_tag(agent)]
    finally:
        await backend.close()


async def _lean(store: StateStore, agent: str, n: int, seq: int, key: str) -> AppendResult | None:
    lean = store._writes.lean
    assert lean is not None
    done = lean(agent, "lg.cp", _ops(n), seq, key, _doc(n))
    if done is None or isinstance(done, AppendResult):
        return done
    return await done


@pytest.mark.parametrize("compression", ["none", "zstd-dict"])
async def test_the_lean_append_stores_what_append_applied_stores(
    tmp_path: Path, compression: str
) -> None:
    for name, lean in (("lean.db", True), ("applied.db", False)):
        codec = Codec(compression=compression, compress_min_bytes=64)
        async with StateStore(
            f"sqlite:///{tmp_path}/{name}", clock=FakeClock(), codec=codec, snapshot_every=1000
        ) as store:
            await store.create("a", _doc(0))
            for n in range(1, 9):
                if lean:
                    result = await _lean(store, "a", n, n, f"k{n}")
                else:
                    result = await store._writes.append_applied(
                        "a", "lg.cp", _ops(n), n, f"k{n}", _doc(n), True
                    )
                assert result is not None and (result.last_seq, result.duplicate) == (n + 1, False)
            assert (await store.load("a")).data == _doc(8)
            assert (await store.verify()).ok
        async with StateStore(f"sqlite:///{tmp_path}/{name}", codec=codec) as again:
            assert (await again.load("a")).data == _doc(8)  # read back from the file
    assert await _stored(tmp_path / "lean.db", "a") == await _stored(tmp_path / "applied.db", "a")


async def test_a_key_stored_before_is_a_duplicate_with_nothing_written(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path}/d.db", snapshot_every=1000) as store:
        await store.create("a", _doc(0))
        assert await _lean(store, "a", 1, 1, "k1") is not None
        assert await _lean(store, "a", 2, 2, "k2") is not None
        again = await _lean(store, "a", 3, 3, "k1")  # (an earlier attempt's key)
        assert again is not None and again.duplicate
        assert (again.first_seq, again.last_seq) == (2, 2)
        assert await store.head("a") == 3
        assert (await store.load("a")).data == _doc(2)
        assert (await store.verify()).ok


async def test_a_stale_cached_head_is_refused_with_nothing_written(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    async with StateStore(url, snapshot_every=1000) as store:
        await store.create("a", _doc(0))
        assert await _lean(store, "a", 1, 1, "k1") is not None
        async with StateStore(url) as other:  # another writer moves the head
            await other.append("a", "other", {"by": "other"})
        retries = store._writes.retries
        assert await _lean(store, "a", 2, 2, "k2") is None  # refused: handed back
        assert store._writes.retries == retries + 1
        assert store._writes.reads.cache.get("a") is None  # the stale record dropped
        with pytest.raises(ConflictError):
            await store.append("a", "lg.cp", ops=_ops(2), expected_seq=2, idempotency_key="k2")
        assert await store.head("a") == 3
        assert await store.backend.lookup_key("a", "k2") is None
        assert (await store.verify()).ok


async def test_what_it_is_not_made_for_is_handed_back_or_appended_otherwise(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path}/h.db", snapshot_every=3) as store:
        await store.create("a", _doc(0))
        assert await _lean(store, "a", 1, 5, "k1") is None  # not the cached seq
        assert await _lean(store, "b", 1, 1, "k1") is None  # no cached record
        async with store._writes.lock("a"):
            assert await _lean(store, "a", 1, 1, "k1") is None  # another write holds it
        assert await _lean(store, "a", 1, 1, "k1") is not None
        written = store._writes.snapshots_written
        # a snapshot due (every 3): built with the event, appended by the engine's append
        done = await _lean(store, "a", 2, 2, "k2")
        assert done is not None and done.last_seq == 3
        assert store._writes.snapshots_written == written + 1
        assert await store.backend.lookup_key("a", "k2") is not None
        assert (await store.load("a")).data == _doc(2)
        assert (await store.verify()).ok
    async with StateStore(f"sqlite:///{tmp_path}/g.db", durability="group") as grouped:
        assert grouped._writes.lean is None  # group commit: its appends share a commit


def test_a_langgraph_runs_writes_take_the_lean_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every checkpoint write of a run reaches the engine's lean append, which takes it
    or declines it for its reason (the loop has other work: how often depends on thread
    scheduling, so it is not counted); a declined one is made by the engine's append.
    That the engine takes every one when the loop has no other work:
    ``test_the_engine_takes_the_lean_append_when_the_loop_has_nothing_else``."""
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    from statekeeper.integrations.langgraph import StatekeeperSaver

    outcomes: list[str] = []
    monkeypatch.setattr(SQLiteBackend, "commit_keyed", recording(outcomes))

    class S(TypedDict):
        n: int

    graph = StateGraph(S)
    graph.add_node("inc", lambda s: {"n": s["n"] + 1})
    graph.add_edge(START, "inc")
    graph.add_conditional_edges("inc", lambda s: END if s["n"] >= 8 else "inc")
    with StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db") as saver:
        app = graph.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "t"}}
        assert app.invoke({"n": 0}, config, durability="sync") == {"n": 8}
        # the run's 10 checkpoints: each one after the stream's first came to the lean
        # append (with the step's writes it carries, or before them)
        assert len(outcomes) >= 9, outcomes
        assert set(outcomes) <= REASONS | {LEAN}, outcomes  # taken, or declined for a reason
        assert app.get_state(config).values == {"n": 8}
        assert len(list(app.get_state_history(config))) == 10
    with StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db") as again:
        tup = again.get_tuple({"configurable": {"thread_id": "t"}})
        assert tup is not None and tup.checkpoint["channel_values"] == {"n": 8}
    asyncio.run(_verified(f"sqlite:///{tmp_path}/lg.db"))


async def test_the_engine_takes_the_lean_append_when_the_loop_has_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no task ready and no pass of the loop due, the engine commits every lean
    append at once; a task ready, or a pass due with a timer due, makes it decline (for
    that reason, seen by :func:`why_declined`), and the engine's append makes the write."""
    outcomes: list[str] = []
    monkeypatch.setattr(SQLiteBackend, "commit_keyed", recording(outcomes))
    ran: list[int] = []
    async with StateStore(f"sqlite:///{tmp_path}/n.db", snapshot_every=1000) as store:
        await store.create("a", _doc(0))
        backend = store.backend
        assert isinstance(backend, SQLiteBackend)
        loop = asyncio.get_running_loop()
        backend._pass_due = math.inf  # no pass due (nor its poll of the loop's I/O and timers)
        for n in range(1, 5):
            done = await _lean(store, "a", n, n, f"k{n}")
            assert done is not None and done.last_seq == n + 1
        assert outcomes == [LEAN] * 4
        loop.call_soon(ran.append, 1)  # a task ready
        done = await _lean(store, "a", 5, 5, "k5")
        assert done is not None and done.last_seq == 6 and ran == [1]  # it ran first
        assert outcomes[4:] == [TASK_READY]
        backend._pass_due = 0.0  # a pass due, and a timer due
        loop.call_at(loop.time() - 1.0, ran.append, 2)
        done = await _lean(store, "a", 6, 6, "k6")
        assert done is not None and done.last_seq == 7
        assert outcomes[5:] == [LOOP_WAITS]
        await asyncio.sleep(0)  # (the timer runs)
        assert ran == [1, 2]
        backend._pass_due = math.inf
        done = await _lean(store, "a", 7, 7, "k7")
        assert done is not None and done.last_seq == 8
        assert outcomes[6:] == [LEAN]
        assert (await store.load("a")).data == _doc(7)
        assert (await store.verify()).ok


async def _verified(url: str) -> None:
    async with StateStore(url) as store:
        assert (await store.verify()).ok


async def test_an_append_the_engine_declines_is_made_by_its_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SQLiteBackend, "commit_keyed", lambda backend, *args: None)
    async with StateStore(f"sqlite:///{tmp_path}/e.db", snapshot_every=1000) as store:
        await store.create("a", _doc(0))
        appends = store._writes.appends
        done = await _lean(store, "a", 1, 1, "k1")  # (the writer busy, a task ready...)
        assert done is not None and (done.last_seq, done.duplicate) == (2, False)
        assert store._writes.appends == appends + 1
        again = await _lean(store, "a", 2, 2, "k1")  # its key: a duplicate, nothing written
        assert again is not None and again.duplicate and again.last_seq == 2
        assert await store.head("a") == 2
        assert (await store.load("a")).data == _doc(1)
        assert (await store.verify()).ok
