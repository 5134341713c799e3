"""A step's checkpoint is committed by the thread LangGraph waits on (issue 12).

LangGraph saves a step's pending writes and the checkpoint after the step from two of
its background threads, and waits only for the checkpoint before the next step. The
saver stores both in one commit (``writes_wait``); that commit must run on the thread
that called ``put`` — not on the ``put_writes`` thread, which would make the step wait
for another thread to be scheduled — and ``put_writes`` still returns only once its
writes are durable.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from statekeeper.backends.sqlite import _BUSY
from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import new_thread

#: long enough that no write is committed by its own timeout on a loaded machine: every
#: held write is taken by the run's next write (a checkpoint, the run's release)
GUARD = 120.0


class Counter(TypedDict):
    n: int


def counter_graph(steps: int) -> StateGraph[Any]:
    def step(state: Counter) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    builder = StateGraph(Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END)
    return builder


def test_a_steps_commit_runs_on_the_thread_that_called_put(tmp_path: Path) -> None:
    saver = StatekeeperSaver.from_url(
        f"sqlite:///{tmp_path}/lg.db", writes_wait=GUARD, run_lease=3600
    )
    inside = threading.local()  # the saver call this thread is in
    committed_in: list[str] = []  # the call each commit ran in
    durable: list[bool] = []  # each put_writes' writes were stored when it returned
    try:
        backend: Any = saver.store.backend
        write, lone = backend._append_batch_sync, backend._commit_lone

        def recorded(requests: Any) -> Any:
            committed_in.append(getattr(inside, "call", "other"))
            return write(requests)

        def recorded_lone(*args: Any) -> Any:  # a lone append committed inline
            found = lone(*args)
            if found is not _BUSY:
                committed_in.append(getattr(inside, "call", "other"))
            return found

        backend._append_batch_sync = recorded
        backend._commit_lone = recorded_lone

        def traced(name: str, method: Any) -> Any:
            @functools.wraps(method)
            def call(*args: Any, **kwargs: Any) -> Any:
                inside.call = name
                try:
                    result = method(*args, **kwargs)
                finally:
                    inside.call = None
                if name == "put_writes":
                    config, writes, task_id = args[:3]
                    tuple_ = saver.get_tuple(config)
                    assert tuple_ is not None
                    stored = {(t, ch) for t, ch, _ in tuple_.pending_writes or ()}
                    durable.append(all((task_id, ch) in stored for ch, _ in writes))
                return result

            return call

        saver.put = traced("put", saver.put)  # type: ignore[method-assign]
        saver.put_writes = traced("put_writes", saver.put_writes)  # type: ignore[method-assign]
        graph = counter_graph(5).compile(checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": new_thread()}}
        assert graph.invoke({"n": 0}, cfg, durability="sync") == {"n": 5}
        assert graph.get_state(cfg).values == {"n": 5}
        assert durable and all(durable), durable
        assert committed_in.count("put") >= 5, committed_in
        assert "put_writes" not in committed_in, committed_in
    finally:
        saver.close()
