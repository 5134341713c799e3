"""``prune`` (LangGraph's API) on a thread a run holds says so instead of returning as
if it had pruned it.

With fork protection a run's thread is not compacted under it: ``prune_retention``
lists it in ``RetentionReport.threads_skipped``. ``prune`` returns nothing (LangGraph's
signature), so a thread skipped there kept every checkpoint with no sign of it: the
caller believed it pruned. It now raises ``ThreadBusyError`` naming the thread, after
pruning the other threads it was given.
"""

from __future__ import annotations

import asyncio
import operator
import threading
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph

from statekeeper.integrations.langgraph import StatekeeperSaver, ThreadBusyError

from .conftest import BACKENDS, backend_url, new_thread


class Log(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("asynchronous", [False, True])
def test_prune_of_a_thread_a_run_holds_raises(
    backend: str, asynchronous: bool, tmp_path: Path
) -> None:
    inside, go = threading.Event(), threading.Event()

    def node(state: Log) -> dict[str, Any]:
        if state["log"][-1] == "block":
            inside.set()
            assert go.wait(60)
        return {"log": ["done"]}

    builder = StateGraph(Log)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    busy, free = new_thread(), new_thread()
    with StatekeeperSaver.from_url(backend_url(backend, tmp_path)) as saver:
        graph = builder.compile(checkpointer=saver)
        for thread in (busy, free):
            graph.invoke({"log": ["one"]}, {"configurable": {"thread_id": thread}})
        run = threading.Thread(
            target=graph.invoke, args=({"log": ["block"]}, {"configurable": {"thread_id": busy}})
        )
        run.start()
        try:
            assert inside.wait(60)
            with pytest.raises(ThreadBusyError) as raised:
                if asynchronous:
                    asyncio.run(saver.aprune([busy, free]))
                else:
                    saver.prune([busy, free])
            assert raised.value.thread_id == busy
        finally:
            go.set()
            run.join()
        # the free thread was pruned all the same; the busy one kept its checkpoints
        assert len(list(saver.list({"configurable": {"thread_id": free}}))) == 1
        assert len(list(saver.list({"configurable": {"thread_id": busy}}))) == 6
        saver.prune([busy])  # free now: pruned
        assert len(list(saver.list({"configurable": {"thread_id": busy}}))) == 1
