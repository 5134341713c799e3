"""A run whose start fails still releases its thread.

``invoke(None)`` on a thread with nothing to resume claims the thread in LangGraph's
first ``get_tuple``, then LangGraph's loop refuses the input (``EmptyInputError``)
in its ``__enter__``: the loop's exit stack, which releases the claim, never unwinds.
The next run — of this process or another — must not find the thread busy, and a
claim that was all the thread held leaves no stream behind. SQLite and Redis, the
sync and the async API (on the saver's own loop and bound to the caller's loop).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.errors import EmptyInputError
from langgraph.graph import START, MessagesState, StateGraph

from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import new_thread, reply_graph


def _failing_graph() -> StateGraph[Any]:
    def boom(state: MessagesState) -> dict[str, Any]:
        raise RuntimeError("node failed")

    b = StateGraph(MessagesState)
    b.add_node("boom", boom)
    b.add_edge(START, "boom")
    return b


async def _streams(saver: StatekeeperSaver, thread_id: str) -> list[str]:
    listed = await saver._portal.run(saver.store.list_agents(limit=1000))
    return [i.agent_id for i in listed if thread_id in i.agent_id]


def hi() -> dict[str, Any]:
    return {"messages": [HumanMessage("hi")]}  # a new message (add_messages gives it an id)


async def _invoke(mode: str, graph: Any, inp: Any, cfg: Any) -> Any:
    if mode == "sync":
        return await asyncio.to_thread(graph.invoke, inp, cfg)
    return await graph.ainvoke(inp, cfg)


async def _open(mode: str, url: str) -> StatekeeperSaver:
    if mode == "bound":
        return await StatekeeperSaver.afrom_url(url)
    return StatekeeperSaver.from_url(url)


async def _close(saver: StatekeeperSaver) -> None:
    await saver.aclose()


@pytest.mark.parametrize("mode", ["sync", "async", "bound"])
@pytest.mark.parametrize("deleted", [False, True], ids=["new", "deleted"])
async def test_a_refused_input_releases_the_thread(fs_url: str, mode: str, deleted: bool) -> None:
    other = StatekeeperSaver.from_url(fs_url)  # another process
    try:
        saver = await _open(mode, fs_url)
        try:
            g = reply_graph().compile(checkpointer=saver)
            thread = new_thread()
            cfg = {"configurable": {"thread_id": thread}}
            if deleted:
                await _invoke(mode, g, hi(), cfg)
                if mode == "sync":
                    saver.delete_thread(thread)
                else:
                    await saver.adelete_thread(thread)
            with pytest.raises(EmptyInputError):
                await _invoke(mode, g, None, cfg)
            # the same saver runs the thread at once
            out = await _invoke(mode, g, hi(), cfg)
            assert [m.content for m in out["messages"]] == ["hi", "hello"]
            with pytest.raises(EmptyInputError):
                await _invoke(mode, g, None, {"configurable": {"thread_id": thread + "-2"}})
        finally:
            await _close(saver)
        # nothing stored for the second thread: no stream of it (statekeeper agents
        # lists none), and another process runs it at once
        assert await _streams(other, thread + "-2") == []
        og = reply_graph().compile(checkpointer=other)
        cfg2 = {"configurable": {"thread_id": thread + "-2"}}
        out = await asyncio.to_thread(og.invoke, hi(), cfg2)
        assert [m.content for m in out["messages"]] == ["hi", "hello"]
    finally:
        other.close()


@pytest.mark.parametrize("mode", ["sync", "async", "bound"])
async def test_a_refused_input_on_a_thread_with_history_releases_it(fs_url: str, mode: str) -> None:
    """An empty ``Command`` on a thread that has checkpoints: the claim is released
    (the stream stays: it holds the thread's history)."""
    from langgraph.types import Command

    saver, other = await _open(mode, fs_url), StatekeeperSaver.from_url(fs_url)
    try:
        g = reply_graph().compile(checkpointer=saver)
        thread = new_thread()
        cfg = {"configurable": {"thread_id": thread}}
        await _invoke(mode, g, hi(), cfg)
        with pytest.raises(Exception):  # noqa: B017 - LangGraph's own error (it varies)
            await _invoke(mode, g, Command(), cfg)
        assert len(await _streams(saver, thread)) == 1
        og = reply_graph().compile(checkpointer=other)
        out = await asyncio.to_thread(og.invoke, hi(), cfg)
        assert [m.content for m in out["messages"]] == ["hi", "hello"] * 2
    finally:
        other.close()
        await _close(saver)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_failing_node_releases_the_thread(fs_url: str, mode: str) -> None:
    """A run ending by a node's exception after its first write: released, as before."""
    saver, other = await _open(mode, fs_url), StatekeeperSaver.from_url(fs_url)
    try:
        g = _failing_graph().compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": new_thread()}}
        with pytest.raises(RuntimeError, match="node failed"):
            await _invoke(mode, g, hi(), cfg)
        og = reply_graph().compile(checkpointer=other)
        out = await asyncio.to_thread(og.invoke, hi(), cfg)
        assert [m.content for m in out["messages"]] == ["hi", "hi", "hello"]
    finally:
        other.close()
        await _close(saver)
