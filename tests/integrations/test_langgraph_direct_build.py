"""A read makes stored messages without validating them again (issue 12: a cold read of
the latest checkpoint at or under SqliteSaver's cost): stored fields are ``model_dump()``
of a validated message, so a class and field names seen validated once are made as
``model_construct`` does, and equal what validation makes in every respect."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import messages as messages_module
from statekeeper.integrations.langgraph.serde import Built, ValueCodec, safe_serializer

from .conftest import new_thread
from .test_langgraph_cold_read import _chat


def _messages(n: int) -> list[Any]:
    pad = "p" * 100  # pooled: at least pool_min bytes
    out: list[Any] = []
    for i in range(n):
        out += [
            HumanMessage(f"hi {i} {pad}", id=f"h{i}"),
            AIMessage(f"answer {i} {pad}", id=f"a{i}", name="bot"),
            ToolMessage(f"tool {i} {pad}", tool_call_id=f"t{i}", id=f"t{i}"),
            SystemMessage(f"system {i} {pad}"),
            ChatMessage(content=f"chat {i} {pad}", role="critic", id=f"c{i}"),
            FunctionMessage(content=f"fn {i} {pad}", name="f", id=f"f{i}"),
            AIMessageChunk(content=f"chunk {i} {pad}", id=f"k{i}"),
        ]
    return out


def _same(a: Any, b: Any, *, fields_set: bool = True) -> None:
    assert type(a) is type(b)
    assert a == b
    assert list(a.__dict__.items()) == list(b.__dict__.items())  # values and field order
    if fields_set:
        assert a.__pydantic_fields_set__ == b.__pydantic_fields_set__
    assert a.__pydantic_extra__ == b.__pydantic_extra__
    assert a.__pydantic_private__ == b.__pydantic_private__
    assert a.model_dump() == b.model_dump()


def test_messages_made_without_validation_equal_validated_ones() -> None:
    codec = ValueCodec(safe_serializer())
    originals = _messages(3)
    pool: dict[str, Any] = {}
    new: dict[str, Any] = {}
    packed = codec.pack(originals, pool, new)
    pool.update(new)
    first = codec.unpack(packed, pool, {}, Built())  # validated: each kind learned
    second = codec.unpack(packed, pool, {}, Built())  # made directly
    assert len(first) == len(second) == len(originals)
    for original, one, two in zip(originals, first, second, strict=True):
        _same(original, one)
        _same(original, two)
    # every empty container is the message's own: a change to one changes nothing else
    second[0].additional_kwargs["x"] = 1
    second[1].tool_calls.append({"name": "t", "args": {}, "id": "1", "type": "tool_call"})
    assert second[7].additional_kwargs == {} and second[8].tool_calls == []
    again = codec.unpack(packed, pool, {}, Built())
    assert again == first and again[0].additional_kwargs == {}


def test_a_cold_read_validates_no_stored_message_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/direct.db"
    thread = new_thread()
    stored = _chat(url, thread, 4)
    cfg: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    with StatekeeperSaver.from_url(url) as saver:  # the process's first read of these kinds
        assert saver.get_tuple(cfg) is not None
    made: list[Any] = []
    for cls in (HumanMessage, AIMessage):
        init = cls.__init__

        def counting(self: Any, *args: Any, __init: Any = init, **kwargs: Any) -> None:
            made.append(self)
            __init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counting)
    with StatekeeperSaver.from_url(url) as saver:  # a new saver: a cold read
        latest = saver.get_tuple(cfg)
        assert latest is not None
        got = latest.checkpoint["channel_values"]["messages"]
        assert made == []  # 8 messages made, none validated again
        assert len(got) == 8 and got == stored
        for a, b in zip(got, stored, strict=True):
            _same(a, b)
        older = saver.get_tuple(latest.parent_config)  # type: ignore[arg-type]
        assert older is not None and made == []
        assert older.checkpoint["channel_values"]["messages"] == stored[:7]


def test_a_message_kind_validation_changes_is_still_validated() -> None:
    """A class whose validation derives a field from the stored ones (here an
    ``AIMessage`` whose tool calls are read from ``additional_kwargs``) is never made
    directly: its stored fields are not all plain, so each one is validated."""
    codec = ValueCodec(safe_serializer())
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    original = AIMessage("x" * 100, id="m", additional_kwargs={"tool_calls": [call]})
    pool: dict[str, Any] = {}
    new: dict[str, Any] = {}
    packed = codec.pack([original], pool, new)
    pool.update(new)
    (first,) = codec.unpack(packed, pool, {}, Built())
    for _ in range(2):
        (got,) = codec.unpack(packed, pool, {}, Built())
        _same(original, got, fields_set=False)  # stored: every field model_dump() gave
        _same(first, got)
        assert got.tool_calls and got.tool_calls[0]["name"] == "f"
    assert not any(
        key[0] is AIMessage and "additional_kwargs" in key[1] for key in messages_module._DIRECT
    )


def test_a_warm_read_makes_messages_again_and_shares_no_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read after a read makes each message again from its stored fields (no check
    of the one made before, no ``model_copy``): what one read handed out shares no
    container with what the next hands out."""
    url = f"sqlite:///{tmp_path}/warm.db"
    thread = new_thread()
    stored = _chat(url, thread, 4)
    cfg: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    copies: list[Any] = []
    for cls in (HumanMessage, AIMessage):
        copy = cls.model_copy

        def counting(self: Any, *args: Any, __copy: Any = copy, **kwargs: Any) -> Any:
            copies.append(self)
            return __copy(self, *args, **kwargs)

        monkeypatch.setattr(cls, "model_copy", counting)
    with StatekeeperSaver.from_url(url) as saver:
        first = saver.get_tuple(cfg)
        assert first is not None
        one = first.checkpoint["channel_values"]["messages"]
        one[0].additional_kwargs["note"] = "mine"
        one[1].tool_calls.append({"name": "t", "args": {}, "id": "1", "type": "tool_call"})
        second = saver.get_tuple(cfg)
        assert second is not None
        two = second.checkpoint["channel_values"]["messages"]
        assert copies == []
        assert two == stored and two[0].additional_kwargs == {} and two[1].tool_calls == []
        for a, b in zip(two, stored, strict=True):
            _same(a, b)
        assert all(a is not b for a, b in zip(one, two, strict=True))


def test_list_and_pending_writes_validate_no_stored_message_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``list`` (every checkpoint of the thread) and pending writes make their messages
    (``$p``, and ``$r``: a message given its id after its write was stored) the same way."""
    url = f"sqlite:///{tmp_path}/list.db"
    thread = new_thread()
    stored = _chat(url, thread, 3)
    cfg: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    with StatekeeperSaver.from_url(url) as saver:
        expected = list(saver.list(cfg))  # the process's first: each kind validated once
    made: list[Any] = []
    for cls in (HumanMessage, AIMessage):
        init = cls.__init__

        def counting(self: Any, *args: Any, __init: Any = init, **kwargs: Any) -> None:
            made.append(self)
            __init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counting)
    with StatekeeperSaver.from_url(url) as saver:
        got = list(saver.list(cfg))
    assert made == []
    assert [t.checkpoint for t in got] == [t.checkpoint for t in expected]
    assert [t.pending_writes for t in got] == [t.pending_writes for t in expected]
    assert got[0].checkpoint["channel_values"]["messages"] == stored
    assert any(t.pending_writes for t in got)
