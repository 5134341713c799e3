"""A cold read of the latest checkpoint builds its messages and computes nothing for
the saver's own caches until they need it (issue 12: a read at SqliteSaver's cost)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import create_checkpoint
from langgraph.graph import START, MessagesState, StateGraph

from statekeeper.integrations.langgraph import (
    StatekeeperSaver,
    fingerprints,
    memo,
    messages,
    packing,
)
from statekeeper.integrations.langgraph import serde as serde_module

from .conftest import new_thread


def _chat(url: str, thread: str, turns: int) -> list[Any]:
    def reply(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"reply {n} " + "x" * 200, id=f"ai-{n}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    cfg = {"configurable": {"thread_id": thread}}
    with StatekeeperSaver.from_url(url) as saver:
        graph = builder.compile(checkpointer=saver)
        for turn in range(turns):  # big enough to be pooled (and kept built)
            graph.invoke({"messages": [HumanMessage(f"hi {turn} " + "y" * 200)]}, cfg)
        return list(graph.get_state(cfg).values["messages"])


def test_a_cold_read_fingerprints_no_message_and_changes_are_still_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/cold.db"
    thread = new_thread()
    stored = _chat(url, thread, 3)
    cfg: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    with StatekeeperSaver.from_url(url) as saver:  # a process's first read of a message kind
        assert saver.get_tuple(cfg) is not None
    calls: list[Any] = []
    fingerprint = serde_module.fingerprint

    def counted(v: Any) -> Any:
        calls.append(v)
        return fingerprint(v)

    for module in (packing, memo, messages):  # every module that calls it
        monkeypatch.setattr(module, "fingerprint", counted)
    with StatekeeperSaver.from_url(url) as saver:
        first = saver.get_tuple(cfg)
        assert first is not None and calls == []  # 6 messages built, none fingerprinted
        one = first.checkpoint["channel_values"]["messages"]
        assert one == stored
        # what the handed-out messages were is still known: the next put stores the
        # changes made to them (and only those messages: the rest are references)
        one[0].content = "edited"
        one[1].additional_kwargs["note"] = "added"
        cp = create_checkpoint(first.checkpoint, None, 99)
        cp["channel_versions"] = dict(cp["channel_versions"])
        cp["channel_versions"]["messages"] = "99"
        dumped: list[Any] = []
        message = serde_module.ValueCodec._message

        def dumps(self: Any, v: Any, *args: Any) -> Any:
            dumped.append(v)
            return message(self, v, *args)

        monkeypatch.setattr(serde_module.ValueCodec, "_message", dumps)
        saver.put(
            first.config, cp, {"source": "update", "step": 9, "parents": {}}, {"messages": "99"}
        )
        assert dumped == [one[0], one[1]]  # the unchanged four are references, not dumps
        assert calls  # (the put fingerprinted them: the counter is the one called)
    with StatekeeperSaver.from_url(url) as saver:
        latest = saver.get_tuple(cfg)
        assert latest is not None
        got = latest.checkpoint["channel_values"]["messages"]
        assert got[0].content == "edited" and got[1].additional_kwargs == {"note": "added"}
        assert got[2:] == stored[2:]


def test_a_stored_messages_fingerprint_is_worked_out_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message built from stored fields has its fingerprint worked out when first
    asked, then kept: every later put of the thread compares each message with it, and
    working it out again each time made a 200-turn chat's writes ~29 % more saver CPU."""
    url = f"sqlite:///{tmp_path}/once.db"
    thread = new_thread()
    _chat(url, thread, 3)
    computed: list[Any] = []  # the objects themselves: alive, so their ids stay distinct
    resolve = serde_module.Stored.resolve

    def counting(self: Any) -> Any:
        if getattr(self, "fp", None) is None:
            computed.append(self)
        return resolve(self)

    monkeypatch.setattr(serde_module.Stored, "resolve", counting)
    messages = _chat(url, thread, 4)  # a new saver: reads the 6 stored messages, 4 more turns
    assert len(messages) == 14
    # the turns compared the messages built from stored fields with what they were
    # built with, no fingerprint needed (test_langgraph_warm_recipes.py); one worked
    # out for another reason is worked out once
    assert len({id(s) for s in computed}) == len(computed)


def test_an_older_read_checks_cached_messages_without_fingerprints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older read after the latest makes the messages the latest read made again
    from their stored fields, with no field by field fingerprint check; a change made
    through a message handed out changes nothing another read hands out (no container
    is shared with the one made before)."""
    url = f"sqlite:///{tmp_path}/older.db"
    thread = new_thread()
    stored = _chat(url, thread, 4)
    cfg: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    checked: list[Any] = []
    changed = fingerprints._changed

    def counting(v: Any, fp: Any) -> Any:
        checked.append(v)
        return changed(v, fp)

    for module in (packing, memo):  # every module that calls it
        monkeypatch.setattr(module, "_changed", counting)
    with StatekeeperSaver.from_url(url) as saver:
        latest = saver.get_tuple(cfg)
        assert latest is not None
        older_cfg: Any = latest.parent_config
        older = saver.get_tuple(older_cfg)
        assert older is not None
        got = older.checkpoint["channel_values"]["messages"]
        assert got == stored[: len(got)] and len(got) >= 6
        assert checked == []  # every cached message was unchanged: no field-by-field check
        got[0].additional_kwargs["leak"] = True  # its own container: shared with nothing
        again = saver.get_tuple(older_cfg)
        assert again is not None
        assert again.checkpoint["channel_values"]["messages"] == stored[: len(got)]
        assert checked == []
