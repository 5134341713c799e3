"""Message graphs run through ``StatekeeperSaver`` (defaults) and through LangGraph's own
``InMemorySaver`` as the oracle: the same states, histories and message ids, turn by
turn, also across a restart (a new saver on the same store); every message stored once.

``add_messages`` gives id-less messages random ids: the tests make them deterministic
(one counter per side), so both sides must produce exactly the same ids — a saver that
stored a message before it got its id would load it id-less and ``add_messages`` would
give it a new one.
"""

from __future__ import annotations

import copy
import itertools
import types
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph import message as lg_message

from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import BACKENDS, backend_url, new_thread

PAD = "lorem ipsum dolor sit amet " * 11  # ~300 characters: every message is pooled


class _Ids:
    """Deterministic ``uuid4`` for ``add_messages``: one counter per side."""

    def __init__(self) -> None:
        self.counters: dict[str, Iterator[int]] = {}
        self.side = "oracle"

    def uuid4(self) -> uuid.UUID:
        counter = self.counters.setdefault(self.side, itertools.count(1))
        return uuid.UUID(int=next(counter))


@pytest.fixture
def ids(monkeypatch: pytest.MonkeyPatch) -> _Ids:
    fake = _Ids()
    monkeypatch.setattr(lg_message, "uuid", types.SimpleNamespace(uuid4=fake.uuid4))
    return fake


def chat_builder() -> StateGraph[Any]:
    """A MessagesState chat whose node replies with an id-less message, as chat models'
    wrappers commonly do."""

    def chat(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        n = len(state["messages"])
        return {"messages": [AIMessage(f"reply {n} to {last.content[:20]!r} {PAD}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    return builder


class ScriptedModel(BaseChatModel):
    """A deterministic tool-calling chat model (no network)."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        n = len(messages)
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(f"answer {n}: {last.content[:30]} {PAD}", id=f"ai-{n}")
        else:
            reply = AIMessage(
                "",
                id=f"ai-{n}",
                tool_calls=[{"name": "lookup", "args": {"q": str(last.content)}, "id": f"c{n}"}],
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"facts about {q[:20]} {PAD}"


def react_builder(saver: Any) -> Any:
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return create_react_agent(ScriptedModel(), [lookup], checkpointer=saver)


def _normal(snapshots: list[Any]) -> list[Any]:
    """State snapshots with checkpoint ids replaced by their position (ids and times
    differ between savers; everything else must not)."""
    order = {s.config["configurable"]["checkpoint_id"]: i for i, s in enumerate(snapshots)}

    def cfg(c: Any) -> Any:
        if c is None:
            return None
        conf = dict(c["configurable"])
        conf["checkpoint_id"] = order.get(conf.get("checkpoint_id"), "?")
        return conf

    return [
        (
            s.values,
            s.next,
            cfg(s.config),
            cfg(s.parent_config),
            {k: v for k, v in (s.metadata or {}).items() if k != "run_id"},
            [
                (t.name, t.error, [i.value for i in t.interrupts], _no_ids(t.result))
                for t in s.tasks
            ],
            [i.value for i in s.interrupts],
        )
        for s in snapshots
    ]


def _no_ids(value: Any) -> Any:
    """A task result with its messages' ids left out: LangGraph stores a task's writes
    in the background while ``add_messages`` gives their messages ids, so whether the
    in-memory saver's copy has them is a race (this saver stores them with the ids,
    checked by :func:`_written_as_seen`)."""
    if isinstance(value, BaseMessage):
        return (type(value).__name__, value.content)
    if isinstance(value, dict):
        return {k: _no_ids(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_no_ids(v) for v in value]
    return value


def _written_as_seen(history: list[Any]) -> None:
    """Every message in a task's stored writes has the id the graph's state gave it."""
    ids = {m.content: m.id for s in history for m in s.values.get("messages", [])}
    for s in history:
        for t in s.tasks:
            for m in (t.result or {}).get("messages", []):
                if isinstance(m, BaseMessage) and m.content and m.content in ids:
                    assert m.id == ids[m.content], (t.name, m.content[:30])


def _message_ids(state: Any) -> list[str | None]:
    return [m.id for m in state["messages"]]


class Side:
    """One saver under test, its compiled graph and its id counter."""

    def __init__(self, name: str, ids: _Ids, make: Callable[[], Any], build: Any) -> None:
        self.name, self.ids, self.make, self.build = name, ids, make, build
        self.saver = make()
        self.graph = build(self.saver)

    def restart(self) -> None:
        if isinstance(self.saver, StatekeeperSaver):
            self.saver.close()
        self.saver = self.make()
        self.graph = self.build(self.saver)

    def invoke(self, value: Any, config: Any) -> Any:
        self.ids.side = self.name
        # add_messages sets ids on the input's objects: each side gets its own copy
        return self.graph.invoke(copy.deepcopy(value), config)

    def state(self, config: Any) -> tuple[Any, Any]:
        return self.graph.get_state(config), list(self.graph.get_state_history(config))

    def close(self) -> None:
        if isinstance(self.saver, StatekeeperSaver):
            self.saver.close()


def _compare_turn(oracle: Side, ours: Side, value: Any, config: Any) -> Any:
    want = oracle.invoke(value, config)
    got = ours.invoke(value, config)
    assert got == want
    assert all(m.id is not None for m in got["messages"])
    o_state, o_hist = oracle.state(config)
    s_state, s_hist = ours.state(config)
    # what get_state shows is what the run returned: the same objects, ids and all
    assert _message_ids(s_state.values) == _message_ids(got)
    assert s_state.values == o_state.values
    assert _normal([s_state]) == _normal([o_state])
    assert _normal(s_hist) == _normal(o_hist)
    _written_as_seen(s_hist)
    return got


def _url(name: str, tmp_path: Path) -> str:
    return backend_url(name, tmp_path)


def _chat_builder(saver: Any) -> Any:
    return chat_builder().compile(checkpointer=saver)


@pytest.mark.parametrize("backend", BACKENDS)
def test_chat_matches_in_memory_saver_turn_by_turn(backend: str, tmp_path: Path, ids: _Ids) -> None:
    url = _url(backend, tmp_path)
    oracle = Side("oracle", ids, InMemorySaver, _chat_builder)
    ours = Side("ours", ids, lambda: StatekeeperSaver.from_url(url), _chat_builder)
    config = {"configurable": {"thread_id": new_thread()}}
    try:
        first: Any = None
        known: dict[str, str] = {}  # content -> the id it was first given
        for turn in range(12):
            value: dict[str, Any] = {"messages": [HumanMessage(f"question {turn} {PAD}")]}
            if turn == 8:  # remove the first reply by the id an earlier result gave
                value["messages"].insert(0, RemoveMessage(id=first["messages"][1].id))
            if turn in (4, 10) and backend != "memory":
                ours.restart()  # a new process would see exactly this
            result = _compare_turn(oracle, ours, value, config)
            first = first or result
            for m in result["messages"]:  # ids are stable across turns and restarts
                assert known.setdefault(m.content, m.id) == m.id
        assert first["messages"][1].id not in _message_ids(result)
    finally:
        ours.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_react_agent_matches_in_memory_saver(backend: str, tmp_path: Path, ids: _Ids) -> None:
    url = _url(backend, tmp_path)
    oracle = Side("oracle", ids, InMemorySaver, react_builder)
    ours = Side("ours", ids, lambda: StatekeeperSaver.from_url(url), react_builder)
    config = {"configurable": {"thread_id": new_thread()}}
    try:
        for turn in range(6):
            if turn == 3 and backend != "memory":
                ours.restart()
            _compare_turn(oracle, ours, {"messages": [HumanMessage(f"q{turn} {PAD}")]}, config)
    finally:
        ours.close()


def _stored_message_contents(saver: StatekeeperSaver, thread_id: str) -> list[str]:
    """The content of every message cell in the thread's pool."""
    st = saver._portal.call(saver._open(thread_id, create=False))
    assert st is not None
    return [cell["$m"][1].get("content", "") for cell in st.doc["pool"].values() if "$m" in cell]


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_message_is_stored_once(backend: str, tmp_path: Path) -> None:
    url = _url(backend, tmp_path)
    thread = new_thread()
    config = {"configurable": {"thread_id": thread}}
    saver = StatekeeperSaver.from_url(url)
    try:
        graph = _chat_builder(saver)
        for turn in range(20):
            if turn == 10 and backend != "memory":
                saver.close()
                saver = StatekeeperSaver.from_url(url)
                graph = _chat_builder(saver)
            result = graph.invoke({"messages": [HumanMessage(f"q {turn} {PAD}")]}, config)
        contents = _stored_message_contents(saver, thread)
        assert len(result["messages"]) == 40
        assert sorted(contents) == sorted(m.content for m in result["messages"])
        # and every checkpoint reads back with the ids the run returned
        history = list(graph.get_state_history(config))
        ids_seen: dict[str, str] = {}
        for snap in history:
            for m in snap.values.get("messages", []):
                assert m.id is not None
                assert ids_seen.setdefault(m.content, m.id) == m.id
    finally:
        saver.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_remove_message_by_an_id_from_an_earlier_result(backend: str, tmp_path: Path) -> None:
    url = _url(backend, tmp_path)
    config = {"configurable": {"thread_id": new_thread()}}
    with StatekeeperSaver.from_url(url) as saver:
        graph = _chat_builder(saver)
        first = graph.invoke({"messages": [HumanMessage("hello " + PAD)]}, config)
        graph.invoke({"messages": [HumanMessage("again " + PAD)]}, config)
        reply_id = first["messages"][1].id
        assert graph.get_state(config).values["messages"][1].id == reply_id
        graph.update_state(config, {"messages": [RemoveMessage(id=reply_id)]})
        assert reply_id not in _message_ids(graph.get_state(config).values)
