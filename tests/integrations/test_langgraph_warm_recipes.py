"""A run's first read and its puts at a long chat's cost (issue 12, the 200-turn chat):
a read of the latest checkpoint makes each stored message it made before from a recipe
kept by its pool key (no pool cell, class entry or field names looked up again), and a
put compares each message a read built with what it was built with in one dict
comparison (no fingerprint worked out). What is handed out and what is stored stay
what they were: fresh objects every read, every change in place still stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from statekeeper.integrations.langgraph import StatekeeperSaver, messages, unpacking
from statekeeper.integrations.langgraph import serde as serde_module
from statekeeper.integrations.langgraph.serde import Built, ValueCodec, safe_serializer

from .conftest import new_thread
from .test_langgraph_cold_read import _chat


class _CountingDict(dict[Any, Any]):
    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.gets = 0

    def get(self, *a: Any) -> Any:
        self.gets += 1
        return super().get(*a)


def _cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def test_a_warm_read_makes_messages_from_their_recipes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/warm.db"
    thread = new_thread()
    stored = _chat(url, thread, 3)
    with StatekeeperSaver.from_url(url) as saver:
        first = saver.get_tuple(_cfg(thread))
        assert first is not None
        direct = _CountingDict(messages._DIRECT)
        for module in (messages, unpacking):  # every module that reads it
            monkeypatch.setattr(module, "_DIRECT", direct)
        second = saver.get_tuple(_cfg(thread))
        assert second is not None
        # no class entry looked up again (base: one per message)
        assert direct.gets == 0
        one = first.checkpoint["channel_values"]["messages"]
        two = second.checkpoint["channel_values"]["messages"]
        assert one == two == stored and len(two) == 6
        for a, b in zip(one, two, strict=True):
            assert a is not b and a.__dict__ == b.__dict__
            assert a.additional_kwargs is not b.additional_kwargs
            assert a.__pydantic_fields_set__ is not b.__pydantic_fields_set__
        # a change through one read's message shows in no other read's
        one[0].additional_kwargs["x"] = 1
        one[1].content = "changed"
        two[2].response_metadata["y"] = 2
        third = saver.get_tuple(_cfg(thread))
        assert third is not None
        assert third.checkpoint["channel_values"]["messages"] == stored


def test_a_recipe_goes_with_its_cache_entry() -> None:
    codec = ValueCodec(safe_serializer())
    messages = [HumanMessage("hello " * 20, id="h"), AIMessage("answer " * 20, id="a")]
    pool: dict[str, Any] = {}
    new: dict[str, Any] = {}
    packed = codec.pack(messages, pool, new, {}, {})
    pool.update(new)
    built = Built()
    codec.unpack(packed, pool, {}, built)  # learns the classes
    built = Built()
    assert codec.unpack(packed, pool, {}, built) == messages
    keys = [cell["$p"] for cell in packed]
    assert set(built.recipes) == set(keys) == set(built.cache)
    built.keep_used()
    assert codec.unpack(packed[1:], pool, {}, built) == messages[1:]
    built.keep_used()  # the first message's entry dropped, and its recipe with it
    assert set(built.recipes) == set(built.cache) == {keys[1]}
    other = HumanMessage("made another way", id="o")
    built.put(keys[1], other, serde_module.fingerprint(other))
    assert keys[1] not in built.recipes  # the entry made another way: no recipe for it


def test_puts_compare_read_messages_without_fingerprints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/puts.db"
    thread = new_thread()
    _chat(url, thread, 3)
    resolved: list[Any] = []
    resolve = serde_module.Stored.resolve

    def counting(self: Any) -> Any:
        resolved.append(self)
        return resolve(self)

    monkeypatch.setattr(serde_module.Stored, "resolve", counting)
    messages = _chat(url, thread, 3)  # a new saver: reads the 6 stored messages, 3 turns
    assert len(messages) == 12
    assert resolved == []  # base: the read messages' fingerprints worked out to compare


def _edit_graph(edit: Any) -> Any:
    from langgraph.graph import START, MessagesState, StateGraph

    def node(state: MessagesState) -> dict[str, Any]:
        edit(state["messages"][0])  # a node changing a stored message in place
        n = len(state["messages"])
        return {"messages": [AIMessage(f"reply {n} " + "x" * 200, id=f"ai-{n}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    return builder


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: setattr(m, "content", "edited " * 40),
        lambda m: m.additional_kwargs.update(k=1),
        lambda m: m.response_metadata.update(k=[1, 2]),
        lambda m: setattr(m, "name", "bob"),
    ],
)
def test_a_read_message_changed_in_place_by_a_node_is_stored(tmp_path: Path, edit: Any) -> None:
    url = f"sqlite:///{tmp_path}/edit.db"
    thread = new_thread()
    _chat(url, thread, 2)
    cfg = {"configurable": {"thread_id": thread}}
    with StatekeeperSaver.from_url(url) as saver:
        graph = _edit_graph(edit).compile(checkpointer=saver)
        saver.get_tuple(_cfg(thread))  # the messages built once: the run's read is warm
        out = graph.invoke({"messages": [HumanMessage("again " + "y" * 200)]}, cfg)
        expected = out["messages"][0]
    with StatekeeperSaver.from_url(url) as saver:  # read back from the file
        got = saver.get_tuple(_cfg(thread))
        assert got is not None
        assert got.checkpoint["channel_values"]["messages"][0] == expected
