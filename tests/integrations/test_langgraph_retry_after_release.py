"""A run refused because another run held the thread is let in as soon as that run has
ended ("retry when that run has finished"), by the very saver that refused it.

The refusing saver had the holder's claim in its cached document; the holder released
it in a commit that saver never read. Before, every retry was refused on that cached
claim until its lease lapsed (``run_lease`` seconds: 30 by default), so a worker that
lost one race could not run the thread for half a minute. The lease here is an hour,
so that the refusal would outlast any test.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from statekeeper.integrations.langgraph import (
    CheckpointForkError,
    StatekeeperSaver,
    ThreadBusyError,
)

from .conftest import new_thread
from .test_langgraph_runs import GUARD, reply_graph, run_url, whole_turns

__all__ = ["run_url"]  # (the fixture, shared with test_langgraph_runs)


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_refused_run_retried_after_the_holder_ended_runs(run_url: str, face: str) -> None:
    entered, go = threading.Event(), threading.Event()

    def node() -> None:
        if not entered.is_set():
            entered.set()
            assert go.wait(GUARD)

    holder_saver = StatekeeperSaver.from_url(run_url, run_lease=3600)
    other_saver = (
        holder_saver
        if run_url == "memory://"
        else StatekeeperSaver.from_url(run_url, run_lease=3600)
    )
    holder = reply_graph(node).compile(checkpointer=holder_saver)
    other = reply_graph(lambda: None).compile(checkpointer=other_saver)
    cfg: Any = {"configurable": {"thread_id": new_thread()}}
    other.invoke({"messages": [HumanMessage("first", id="h0")]}, cfg)  # cached there

    def invoke_other(text: str) -> None:
        message = {"messages": [HumanMessage(text, id=f"h-{text}")]}
        if face == "sync":
            other.invoke(message, cfg)
        else:
            asyncio.run(other.ainvoke(message, cfg))

    errors: list[BaseException] = []

    def run() -> None:
        try:
            holder.invoke({"messages": [HumanMessage("held", id="h1")]}, cfg)
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert entered.wait(GUARD)
        with pytest.raises(ThreadBusyError):  # the holder's claim, now in its cache
            invoke_other("refused")
        go.set()
        worker.join(GUARD)
        assert not errors
        invoke_other("retried")  # the holder has ended: no refusal
        messages = other.get_state(cfg).values["messages"]
        assert whole_turns(messages) == ["first", "held", "retried"]
    finally:
        go.set()
        worker.join(GUARD)
        holder_saver.close()
        if other_saver is not holder_saver:
            other_saver.close()


def test_fork_errors_repr_says_what_happened() -> None:
    """``repr()`` and ``args`` of the fork errors carry their own message; before, they
    carried ``ConflictError``'s for a head seq equal to the one expected: "its head
    record (seq 4) was rewritten since this process read it (by `statekeeper migrate`,
    its rollback or finalize, or `statekeeper rekey` …)", in every log that uses
    ``%r`` of a run refused because another run held its thread."""
    busy = ThreadBusyError("t1", 1.0, "lg/t1#0", 4, lost=False)
    fork = CheckpointForkError("t1", "", "p", "q", "lg/t1#0", 4)
    for error in (busy, fork):
        assert error.args == (str(error),)
        assert "rewritten" not in repr(error) and "migrate" not in repr(error)
    assert "held by another run" in repr(busy)
    assert "would fork the thread" in repr(fork)
