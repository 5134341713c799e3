"""A message field holding a mutable object that is not a dict or list (a dataclass, a
set, a dict subclass) changed in place by a node is stored changed, as LangGraph's own
savers store it.

The saver reuses a message it packed before while its fingerprint says no field
changed. The fingerprint kept such field values by reference, so the comparison was
the object with itself: a ``ToolMessage.artifact`` dataclass whose rows a later node
extended (returning the message, with a new one) stayed stored with the old rows, on
every later checkpoint and after a restart, without an error. ``InMemorySaver`` stores
the new rows.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import BACKENDS, backend_url, new_thread


@dataclasses.dataclass
class Rows:
    rows: list[int]


def _rows_dataclass() -> Any:
    return Rows([1])


def _rows_set() -> Any:
    return {1}


def _rows_defaultdict() -> Any:
    return defaultdict(list, {"rows": [1]})


def _grow(artifact: Any) -> None:
    if isinstance(artifact, Rows):
        artifact.rows.append(2)
    elif isinstance(artifact, set):
        artifact.add(2)
    else:
        artifact["rows"].append(2)


def _rows(artifact: Any) -> list[int]:
    """The rows an artifact holds, whatever form a saver gives it back in."""
    if isinstance(artifact, Rows):
        return artifact.rows
    if isinstance(artifact, set):
        return sorted(artifact)
    return list(artifact["rows"])


def _graph(saver: Any, make: Callable[[], Any]) -> Any:
    def tool(state: MessagesState) -> dict[str, Any]:
        return {"messages": [ToolMessage("found", tool_call_id="c1", id="tm", artifact=make())]}

    def amend(state: MessagesState) -> dict[str, Any]:
        found = next(m for m in state["messages"] if m.id == "tm")
        assert isinstance(found, ToolMessage)
        _grow(found.artifact)  # in place, then returned with a new message
        return {"messages": [found, AIMessage("amended", id="ai")]}

    builder = StateGraph(MessagesState)
    builder.add_node("tool", tool)
    builder.add_node("amend", amend)
    builder.add_edge(START, "tool")
    builder.add_edge("tool", "amend")
    return builder.compile(checkpointer=saver)


def _artifact_rows(graph: Any, config: Any) -> list[int]:
    messages = graph.get_state(config).values["messages"]
    return _rows(next(m for m in messages if m.id == "tm").artifact)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make", [_rows_dataclass, _rows_set, _rows_defaultdict])
def test_an_artifact_changed_in_place_is_stored_changed(
    backend: str, make: Callable[[], Any], tmp_path: Path
) -> None:
    config = {"configurable": {"thread_id": new_thread()}}
    oracle = _graph(InMemorySaver(), make)
    oracle.invoke({"messages": [HumanMessage("hi", id="h")]}, config)
    assert _artifact_rows(oracle, config) == [1, 2]

    url = backend_url(backend, tmp_path)
    saver = StatekeeperSaver.from_url(url)
    try:
        graph = _graph(saver, make)
        # (durability="sync": the tool step's checkpoint is stored before ``amend``
        # runs, so the message is in the saver's memo when it is changed; with
        # "async" that is a race, and "exit" stores nothing before the end)
        graph.invoke({"messages": [HumanMessage("hi", id="h")]}, config, durability="sync")
        assert _artifact_rows(graph, config) == [1, 2]
        if backend != "memory":  # a new saver reads what was stored
            with StatekeeperSaver.from_url(url) as again:
                assert _artifact_rows(_graph(again, make), config) == [1, 2]
    finally:
        saver.close()
