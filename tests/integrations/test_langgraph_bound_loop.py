"""``StatekeeperSaver.afrom_url``: the saver's work runs on the application's event loop
(:class:`BoundLoop`), with no hop to a loop thread of the saver's own; sync calls from
other threads still work, and from the loop's own thread fail at once, not deadlock."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from statekeeper.errors import ConfigurationError, StoreClosed
from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import BACKENDS, backend_url


def _chat() -> StateGraph[Any]:
    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"reply {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_async_run_stores_on_the_callers_loop_and_thread(
    backend: str, tmp_path: Path
) -> None:
    saver = await StatekeeperSaver.afrom_url(backend_url(backend, tmp_path))
    seen: list[tuple[int, asyncio.AbstractEventLoop]] = []
    append = saver.store.append

    async def recorded(*args: Any, **kwargs: Any) -> Any:
        seen.append((threading.get_ident(), asyncio.get_running_loop()))
        return await append(*args, **kwargs)

    saver.store.append = recorded  # type: ignore[method-assign]
    try:
        graph = _chat().compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": f"bound-{uuid.uuid4().hex}"}}
        for turn in range(3):
            await graph.ainvoke({"messages": [HumanMessage(f"hi {turn}")]}, cfg)
        state = await graph.aget_state(cfg)
    finally:
        await saver.aclose()
    assert [m.content for m in state.values["messages"]] == [
        text for t in range(3) for text in (f"hi {t}", f"reply {2 * t + 1}")
    ]
    # every write (claims, checkpoints, writes, releases) on this loop, on this thread
    assert len(seen) >= 3 * 3
    assert set(seen) == {(threading.get_ident(), asyncio.get_running_loop())}


async def test_sync_calls_work_from_other_threads_and_fail_fast_on_the_loop(
    tmp_path: Path,
) -> None:
    async with await StatekeeperSaver.afrom_url(backend_url("sqlite", tmp_path)) as saver:
        graph = _chat().compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": f"mixed-{uuid.uuid4().hex}"}}
        await graph.ainvoke({"messages": [HumanMessage("async turn")]}, cfg)
        # a sync run from a worker thread, while the loop runs: handed to the loop
        await asyncio.to_thread(graph.invoke, {"messages": [HumanMessage("sync turn")]}, cfg)
        latest = await asyncio.to_thread(saver.get_tuple, cfg)
        assert latest is not None
        assert [m.content for m in latest.checkpoint["channel_values"]["messages"]] == [
            "async turn",
            "reply 1",
            "sync turn",
            "reply 3",
        ]
        assert latest == await saver.aget_tuple(cfg)
        # from the loop's own thread a blocking call would wait for itself: refused
        with pytest.raises(ConfigurationError, match="deadlock"):
            saver.get_tuple(cfg)
    with pytest.raises(StoreClosed):
        await asyncio.to_thread(saver.get_tuple, cfg)


def test_a_sync_call_after_the_loop_stopped_fails_instead_of_hanging(tmp_path: Path) -> None:
    async def opened() -> StatekeeperSaver:
        return await StatekeeperSaver.afrom_url(backend_url("sqlite", tmp_path))

    loop = asyncio.new_event_loop()
    try:
        saver = loop.run_until_complete(opened())
        with pytest.raises(ConfigurationError, match="not running"):
            saver.get_tuple({"configurable": {"thread_id": "t"}})
        loop.run_until_complete(saver.aclose())
    finally:
        loop.close()
