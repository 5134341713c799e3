"""A run's checkpoint commit made flat (issue 12: the small graph's run cost).

A ``put`` on a cached thread with nothing queued is built and committed in one frame
(``flatput.py``): the step's parked writes and the checkpoint's plan built as the
write queue builds them, the event committed by ``Backend.commit_request`` on the
calling thread. It must store what the general path stores — the same events, ops,
idempotency keys, a verified chain — and leave the state the graph's.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import ConflictError
from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m

from ._lg_graphs import chat_graph, counter_graph, opening

#: long enough that no held write is committed by its own timeout on a loaded machine
GUARD = 120.0


def _shape(path: str) -> str:
    """A JSON Pointer with its ids (checkpoints', tasks': random per run) as ``*``."""
    return "/".join("*" if len(token) >= 20 else token for token in path.split("/"))


def _events(saver: StatekeeperSaver, thread: str) -> list[tuple[str, Any, bool]]:
    """Each stored event of ``thread``: its type, its ops' (op, path shape), whether it
    carries an idempotency key (a checkpoint's); its chain verified."""
    agent = m.agent_id(saver.prefix, thread)

    async def read() -> list[tuple[str, Any, bool]]:
        found = []
        async for event in saver.store.history(agent):
            ops = [(op["op"], _shape(op["path"])) for op in event.ops if op["path"] != "/run"]
            found.append((event.type, ops, event.idempotency_key is not None))
        report = await saver.store.verify([agent])
        assert not report.problems, report.problems
        return found

    return saver._portal.call(read())


def _run_chat(saver: Any, thread: str) -> list[Any]:
    graph = chat_graph(6).compile(checkpointer=saver)
    cfg: Any = {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": opening(2)}, cfg, durability="sync")
    graph.invoke({"messages": opening(3)[2:]}, cfg, durability="sync")
    return [
        (s.values, s.next, [(t.name, t.result) for t in s.tasks])
        for s in graph.get_state_history(cfg)
    ]


def test_a_runs_checkpoints_are_committed_by_one_plain_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Most of a run's checkpoints (each with its step's writes) are committed by the
    engine's ``commit_request`` (no coroutine of the write queue, the store or the
    engine on the way), and the run's state is the graph's."""
    committed: list[bool] = []
    original = SQLiteBackend.commit_request

    def counted(self: SQLiteBackend, request: Any) -> Any:
        result = original(self, request)
        committed.append(result is not None)
        return result

    monkeypatch.setattr(SQLiteBackend, "commit_request", counted)
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db", writes_wait=GUARD)
    try:
        graph = counter_graph(10).compile(checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": "counted"}}
        assert graph.invoke({"n": 0}, cfg, durability="sync") == {"n": 10}
        assert graph.get_state(cfg).values == {"n": 10}
        assert sum(committed) >= 8, committed
        assert len(list(graph.get_state_history(cfg))) == 12
    finally:
        saver.close()


def test_the_flat_commit_stores_what_the_general_path_stores(tmp_path: Path) -> None:
    """The same chat (two turns, held writes) through a saver whose checkpoints take
    the flat commit and one whose every write takes the general path: the same events
    (types, ops, idempotency keys), each chain verified, and both threads' histories
    equal to LangGraph's own ``InMemorySaver``'s."""
    flat = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/flat.db", writes_wait=GUARD)
    general = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/general.db", writes_wait=GUARD)
    taken: list[bool] = []
    try:
        fast = flat._fast
        assert fast is not None
        can = fast.can_commit_applied

        def noted(*args: Any) -> bool:
            taken.append(can(*args))
            return taken[-1]

        fast.can_commit_applied = noted  # type: ignore[method-assign, assignment]
        other = general._fast
        assert other is not None
        other.can_commit_applied = lambda *args: False  # type: ignore[method-assign]
        oracle = _run_chat(InMemorySaver(), "chat")
        assert _run_chat(flat, "chat") == oracle
        assert _run_chat(general, "chat") == oracle
        assert sum(taken) >= 8, taken
        flat_events = _events(flat, "chat")
        assert flat_events == _events(general, "chat")
        assert len(flat_events) >= 10
    finally:
        flat.close()
        general.close()


def test_a_conflict_on_the_flat_commit_is_made_again_on_a_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process wrote the thread after the saver cached it: the flat commit's
    compare-and-set refuses the ``put`` (nothing of it stored) and the general path
    makes it again on a fresh read — the other write kept, the put stored after it,
    the chain verified."""
    refused: list[BaseException] = []
    original = SQLiteBackend.commit_request

    def noted(self: SQLiteBackend, request: Any) -> Any:
        try:
            return original(self, request)
        except BaseException as exc:
            refused.append(exc)
            raise

    monkeypatch.setattr(SQLiteBackend, "commit_request", noted)
    url = f"sqlite:///{tmp_path}/lg.db"
    saver = StatekeeperSaver.from_url(url, writes_wait=GUARD)
    try:
        graph = counter_graph(3).compile(checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": "raced"}}
        assert graph.invoke({"n": 0}, cfg, durability="sync") == {"n": 3}
        latest = saver.get_tuple(cfg)
        assert latest is not None
        agent = m.agent_id(saver.prefix, "raced")

        async def another_process() -> None:
            other = StateStore(url)
            try:
                await other.append(agent, "note", {"by": "another process"})
            finally:
                await other.close()

        asyncio.run(another_process())
        checkpoint = copy.deepcopy(latest.checkpoint)
        checkpoint["id"] = str(uuid6(clock_seq=-2))
        checkpoint["channel_values"] = {"n": 42}
        version = saver.get_next_version(checkpoint["channel_versions"]["n"], None)
        checkpoint["channel_versions"]["n"] = version
        metadata: Any = {"source": "update", "step": 9, "parents": {}}
        saver.put(latest.config, checkpoint, metadata, {"n": version})
        assert [type(exc) for exc in refused] == [ConflictError]
        now = saver.get_tuple(cfg)
        assert now is not None
        assert now.checkpoint["id"] == checkpoint["id"]
        assert now.checkpoint["channel_values"] == {"n": 42}
        types = [t for t, _, _ in _events(saver, "raced")]
        assert types[-2:] == ["note", m.EV_CHECKPOINT]
    finally:
        saver.close()


def test_an_async_run_is_stored(tmp_path: Path) -> None:
    """An async graph (``afrom_url``: the application's loop runs the saver's work)
    stores the graph's state, its checkpoints on a verified chain."""

    async def main() -> Any:
        saver = await StatekeeperSaver.afrom_url(f"sqlite:///{tmp_path}/lg.db")
        try:
            graph = counter_graph(5).compile(checkpointer=saver)
            cfg: Any = {"configurable": {"thread_id": "async"}}
            assert await graph.ainvoke({"n": 0}, cfg, durability="sync") == {"n": 5}
            report = await saver.store.verify()
            assert not report.problems, report.problems
            return (await graph.aget_state(cfg)).values
        finally:
            await saver.aclose()

    assert asyncio.run(main()) == {"n": 5}
