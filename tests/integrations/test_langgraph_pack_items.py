"""A list channel (a chat's messages) packed in one pass against the stored list and the
saver's memo (``ValueCodec.pack_items``): the stored messages are not packed or compared
again, and every change to one of them is still stored."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.graph import START, MessagesState, StateGraph

from statekeeper import patch
from statekeeper.integrations.langgraph import StatekeeperSaver, ValueCodec, safe_serializer

from .conftest import new_thread


def _packed(codec: ValueCodec, messages: list[Any]) -> tuple[list[Any], dict[str, Any], Any]:
    pool: dict[str, Any] = {}
    memo: dict[int, Any] = {}
    new: dict[str, Any] = {}
    cell = codec.pack(messages, pool, new, memo, {})
    pool.update(new)
    return cell, pool, memo


def test_unchanged_stored_messages_are_the_stored_cells_and_new_ones_follow() -> None:
    codec = ValueCodec(safe_serializer())
    messages = [HumanMessage("hello " * 20, id="h"), AIMessage("answer " * 20, id="a")]
    stored, pool, memo = _packed(codec, messages)
    more = [*messages, HumanMessage("again " * 20, id="h2")]
    new: dict[str, Any] = {}
    used: dict[int, Any] = {}
    cell, extends = codec.pack_items(more, stored, pool, new, memo, used)
    assert extends
    assert cell[0] is stored[0] and cell[1] is stored[1]  # nothing packed again
    assert set(used) == {id(m) for m in more}
    pool.update(new)
    assert codec.unpack(cell, pool) == more


@pytest.mark.parametrize(
    "change",
    [
        lambda m: setattr(m, "content", "changed " * 20),
        lambda m: m.additional_kwargs.update(k=1),
        lambda m: setattr(m, "id", "other"),
        lambda m: setattr(m, "name", "bob"),
    ],
)
def test_a_stored_message_changed_in_place_is_packed_again(change: Any) -> None:
    codec = ValueCodec(safe_serializer())
    messages = [HumanMessage("hello " * 20, id="h"), AIMessage("answer " * 20, id="a")]
    stored, pool, memo = _packed(codec, messages)
    change(messages[0])
    new: dict[str, Any] = {}
    cell, extends = codec.pack_items(messages, stored, pool, new, memo, {})
    assert not extends and cell[1] is stored[1]
    pool.update(new)
    assert codec.unpack(cell, pool) == messages


def test_a_message_with_filled_containers_is_still_the_stored_cell() -> None:
    """Fields that are non-empty containers (tool calls, kwargs) are compared the long
    way, and an unchanged message is still not packed again."""
    codec = ValueCodec(safe_serializer())
    call = {"name": "search", "args": {"q": "x"}, "id": "c1", "type": "tool_call"}
    messages = [AIMessage("", id="a", tool_calls=[call], additional_kwargs={"k": [1]})]
    stored, pool, memo = _packed(codec, messages)
    cell, extends = codec.pack_items(messages, stored, pool, {}, memo, {})
    assert extends and cell[0] is stored[0]
    messages[0].additional_kwargs["k"].append(2)
    cell, extends = codec.pack_items(messages, stored, pool, {}, memo, {})
    assert not extends and cell[0] is not stored[0]


def test_a_shorter_or_reordered_list_is_not_an_extension() -> None:
    codec = ValueCodec(safe_serializer())
    messages = [HumanMessage("hello " * 20, id="h"), AIMessage("answer " * 20, id="a")]
    stored, pool, memo = _packed(codec, messages)
    assert not codec.pack_items(messages[:1], stored, pool, {}, memo, {})[1]
    assert not codec.pack_items(messages[::-1], stored, pool, {}, memo, {})[1]
    scalars = ["a", 1, None, True]
    assert codec.pack_items([*scalars, 2], scalars, pool, {}, memo, {}) == ([*scalars, 2], True)
    assert not codec.pack_items([1, 1], [True, 1], pool, {}, memo, {})[1]  # True is not 1


def _chat() -> StateGraph[Any]:
    def reply(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"reply {n} " * 20)]}  # no id: add_messages gives one

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder


def test_a_chat_turn_stores_its_messages_without_diffing_the_history(
    saver: StatekeeperSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn's checkpoints append the new messages without comparing the thread's whole
    message list with the stored one (``patch.diff`` of the list serialized both, at
    every put), and the thread reads back as LangGraph saw it."""
    graph = _chat().compile(checkpointer=saver)
    cfg: Any = {"configurable": {"thread_id": new_thread()}}
    graph.invoke({"messages": [HumanMessage("first " * 20, id="h-0")]}, cfg)
    diffed: list[Any] = []
    real = patch.diff

    def counted(old: Any, new: Any, path: str = "") -> Any:
        if type(old) is list and len(old) > 1:
            diffed.append(path)
        return real(old, new, path)

    monkeypatch.setattr(patch, "diff", counted)
    for turn in range(1, 4):
        out = graph.invoke({"messages": [HumanMessage(f"turn {turn} " * 20, id=f"h-{turn}")]}, cfg)
    assert diffed == []
    assert len(out["messages"]) == 8
    fresh = StatekeeperSaver(saver.store, _portal=saver._portal)
    state = _chat().compile(checkpointer=fresh).get_state(cfg)
    assert state.values["messages"] == out["messages"]
    assert all(m.id for m in state.values["messages"])


def test_a_message_edited_in_place_between_turns_is_stored_edited(
    saver: StatekeeperSaver,
) -> None:
    graph = _chat().compile(checkpointer=saver)
    cfg: Any = {"configurable": {"thread_id": new_thread()}}
    out = graph.invoke({"messages": [HumanMessage("first " * 20, id="h-0")]}, cfg)
    first_reply = out["messages"][1]

    def edit(state: MessagesState) -> dict[str, Any]:
        state["messages"][1].content = "edited " * 20  # in place, in the channel's object
        return {"messages": [AIMessage("after " * 20, id="a-x")]}

    builder = StateGraph(MessagesState)
    builder.add_node("edit", edit)
    builder.add_edge(START, "edit")
    out = builder.compile(checkpointer=saver).invoke({"messages": []}, cfg)
    assert out["messages"][1].content == "edited " * 20
    fresh = StatekeeperSaver(saver.store, _portal=saver._portal)
    values = _chat().compile(checkpointer=fresh).get_state(cfg).values["messages"]
    assert [m.content for m in values] == [m.content for m in out["messages"]]
    assert values[1].id == first_reply.id
    # and a removal is stored too
    builder2 = StateGraph(MessagesState)
    builder2.add_node("rm", lambda s: {"messages": [RemoveMessage(id=first_reply.id)]})
    builder2.add_edge(START, "rm")
    out = builder2.compile(checkpointer=saver).invoke({"messages": []}, cfg)
    fresh = StatekeeperSaver(saver.store, _portal=saver._portal)
    values = _chat().compile(checkpointer=fresh).get_state(cfg).values["messages"]
    assert [m.id for m in values] == [m.id for m in out["messages"]] and len(values) == 2


def _spy_plain(saver: StatekeeperSaver) -> list[tuple[bool, bool]]:
    """(a run claim rides on it, declared plain) for every fast-path append."""
    fast: Any = saver._fast
    assert fast is not None
    seen: list[tuple[bool, bool]] = []
    real = fast.append_applied

    async def spy(agent: str, kind: str, ops: Any, *args: Any) -> Any:
        seen.append((any(op["path"] == "/run" for op in ops) and kind != "lg.run", args[-1]))
        return await real(agent, kind, ops, *args)

    fast.append_applied = spy
    lean = fast.lean
    if lean is not None:  # (the saver calls the lean append only with plain ops)

        def lean_spy(agent: str, kind: str, ops: Any, *args: Any) -> Any:
            seen.append((any(op["path"] == "/run" for op in ops) and kind != "lg.run", True))
            return lean(agent, kind, ops, *args)

        fast.lean = lean_spy
    return seen


def test_a_turns_first_write_with_its_run_claim_is_declared_plain(tmp_path: Any) -> None:
    """The first write of a run carries the run's claim (its expiry a finite float) and
    the turn's new messages: it is plain JSON, so the store serialises it without
    walking it for typed values (it did walk every such write)."""
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db")
    try:
        seen = _spy_plain(saver)
        graph = _chat().compile(checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": new_thread()}}
        for turn in range(2):
            message = HumanMessage(f"turn {turn} " * 20, id=f"h{turn}")
            graph.invoke({"messages": [message]}, cfg, durability="sync")
        riding = [plain for rides, plain in seen if rides]
        assert riding and all(riding)
    finally:
        saver.close()
