"""A thread written in a newer format of the saver's document is refused, not misread.

During a rolling deploy a newer statekeeper may store a thread's document in a newer
format (``"lg": 3``). This saver read any ``"lg"`` as its own: its ``get_tuple`` handed
out what it made of the newer layout, and its ``put`` appended its own format's JSON
Patch onto it — both without an error. The saver checks the format where it loads a
thread's stream (every read and every write after a conflict goes through it) and raises
``ThreadFormatTooNew``; nothing is written. (The format written before 2 still loads:
``test_langgraph_format1.py``.)
"""

from __future__ import annotations

import asyncio
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph

from statekeeper import StateStore
from statekeeper.integrations.langgraph import StatekeeperSaver, ThreadFormatTooNew
from statekeeper.integrations.langgraph import mapping as m

from .conftest import new_thread


class Log(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def _graph(saver: StatekeeperSaver) -> Any:
    builder = StateGraph(Log)
    builder.add_node("node", lambda state: {"log": ["done"]})
    builder.add_edge(START, "node")
    return builder.compile(checkpointer=saver)


async def _newer_statekeeper_writes(url: str, agent: str) -> int:
    """What a newer statekeeper's saver would leave: its format in ``"lg"``."""
    async with StateStore(url) as store:
        result = await store.append(
            agent, "lg.upgrade", ops=[{"op": "replace", "path": "/lg", "value": m.FORMAT + 1}]
        )
        return result.last_seq


async def _head(url: str, agent: str) -> int:
    async with StateStore(url) as store:
        return await store.head(agent)


def test_a_thread_in_a_newer_format_is_refused_by_reads_and_writes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    thread = new_thread()
    config = {"configurable": {"thread_id": thread}}
    agent = m.agent_id("lg/", thread)
    with StatekeeperSaver.from_url(url) as running:  # a worker of this version
        graph = _graph(running)
        graph.invoke({"log": ["one"]}, config)
        head = asyncio.run(_newer_statekeeper_writes(url, agent))
        with pytest.raises(ThreadFormatTooNew) as caught:  # its cache is head-checked
            running.get_tuple(config)
        assert (caught.value.thread_id, caught.value.agent_id) == (thread, agent)
        assert (caught.value.stored, caught.value.supported) == (m.FORMAT + 1, m.FORMAT)
        with pytest.raises(ThreadFormatTooNew):
            graph.invoke({"log": ["two"]}, config)
    with StatekeeperSaver.from_url(url) as fresh:  # a worker started since
        with pytest.raises(ThreadFormatTooNew):
            fresh.get_tuple(config)
        with pytest.raises(ThreadFormatTooNew):
            list(fresh.list(config))
        with pytest.raises(ThreadFormatTooNew):
            _graph(fresh).invoke({"log": ["three"]}, config)
    assert asyncio.run(_head(url, agent)) == head  # nothing written


def test_this_format_and_the_threads_beside_it_are_read_as_before(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    newer, other = new_thread(), new_thread()
    with StatekeeperSaver.from_url(url) as saver:
        graph = _graph(saver)
        for thread in (newer, other):
            graph.invoke({"log": ["one"]}, {"configurable": {"thread_id": thread}})
        asyncio.run(_newer_statekeeper_writes(url, m.agent_id("lg/", newer)))
        other_config = {"configurable": {"thread_id": other}}
        graph.invoke({"log": ["two"]}, other_config)
        assert graph.get_state(other_config).values == {"log": ["one", "done", "two", "done"]}
