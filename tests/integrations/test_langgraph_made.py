"""A write's document made with its plan (issue 12, :mod:`.made`).

The plan of a new head on an existing namespace, and of a task's writes, notes the
document it makes of the thread's cached one; its commit takes that document instead of
applying the plan's ops (and parsing their paths for the namespace's head). The store
keeps that document as its record's data, and a cold read rebuilds it from the events:
it must be exactly what the ops make, or a warm saver and a cold one would see
different states.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from statekeeper import patch
from statekeeper.integrations.langgraph import StatekeeperSaver, made
from statekeeper.integrations.langgraph import mapping as m

from ._lg_graphs import Counter, counter_graph
from .conftest import new_thread


def chat_graph() -> StateGraph[Any]:
    def chat(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"reply {n} " + "x" * 300)]}

    builder = StateGraph(MessagesState)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    return builder


def nested_graph() -> StateGraph[Any]:
    inner = counter_graph(3).compile()

    def outer(state: Counter) -> dict[str, Any]:
        return {"n": inner.invoke({"n": state["n"]})["n"] + 1}

    builder = StateGraph(Counter)
    builder.add_node("outer", outer)
    builder.add_edge(START, "outer")
    return builder


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Every document :mod:`.made` notes (a checkpoint's, a task's writes') is checked
    against ``patch.apply`` of the plan's ops on the document before, and the head it
    sets against the ops' ``top`` (a writes plan's: none); returns the number of
    documents checked of each kind."""
    counts = {"checkpoint": 0, "writes": 0}

    def checking(kind: str) -> Any:
        original = getattr(made, kind)

        def check(st: Any, out: list[dict[str, Any]], ns: str, cid: str, *args: Any) -> None:
            before = copy.deepcopy(st.doc)
            original(st, out, ns, cid, *args)
            if st.made is None:
                return
            assert st.made[0] is out
            assert st.made[1] == patch.apply(st.doc, out)
            assert st.doc == before  # the cached document is never changed in place
            tops = [op["value"] for op in out if op["path"] == m.ptr("ns", ns, "top")]
            if kind == "checkpoint":
                assert (st.made[2], st.made[3]) == (ns, tops[-1])
            else:
                assert (st.made[2], st.made[3], tops) == (None, None, [])
            counts[kind] += 1

        return check

    for kind in counts:
        monkeypatch.setattr(made, kind, checking(kind))
    return counts


def test_made_documents_are_what_the_ops_make(tmp_path: Path, checked: dict[str, int]) -> None:
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db", run_lease=3600)
    try:
        counter = counter_graph(8).compile(checkpointer=saver)
        t = new_thread()
        cfg: Any = {"configurable": {"thread_id": t}}
        assert counter.invoke({"n": 0}, cfg, durability="sync")["n"] == 8
        assert counter.invoke({"n": 0}, cfg)["n"] == 8  # a second run on the thread
        # a fork from an earlier checkpoint (time travel): a new head off the line
        history = list(counter.get_state_history(cfg))
        older = history[len(history) // 2].config
        counter.invoke(None, older)
        counter.update_state(cfg, {"n": 100})
        chat = chat_graph().compile(checkpointer=saver)
        c: Any = {"configurable": {"thread_id": new_thread()}}
        for turn in range(4):
            chat.invoke({"messages": [HumanMessage(f"hi {turn}", id=f"h{turn}")]}, c)
        nested = nested_graph().compile(checkpointer=saver)
        nested.invoke({"n": 0}, {"configurable": {"thread_id": new_thread()}})
        assert checked["checkpoint"] >= 20 and checked["writes"] >= 20, checked
        # what was committed reads back the same through a fresh saver
        expected = counter.get_state(cfg).values, chat.get_state(c).values
    finally:
        saver.close()
    fresh = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db")
    try:
        again = (
            counter_graph(8).compile(checkpointer=fresh).get_state(cfg).values,
            chat_graph().compile(checkpointer=fresh).get_state(c).values,
        )
        assert again == expected
    finally:
        fresh.close()


def test_a_linear_checkpoint_is_not_applied_op_by_op(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The checkpoints of a run after its first, and the step's writes committed with
    # them, are committed with the documents their plans made: none of their ops goes
    # through ``apply_once`` (before: every one).
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db", run_lease=3600)
    applied: list[list[dict[str, Any]]] = []
    original = m.apply_once

    def counting(doc: Any, ops: list[dict[str, Any]]) -> Any:
        applied.append(ops)
        return original(doc, ops)

    monkeypatch.setattr(m, "apply_once", counting)
    try:
        graph = counter_graph(10).compile(checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": new_thread()}}
        assert graph.invoke({"n": 0}, cfg, durability="sync")["n"] == 10
        # the thread's first checkpoint (its namespace added whole) and the run's
        # release (a claim alone) only: 2 (3 allowed for a write made alone by chance)
        assert len(applied) <= 3, [[op["path"] for op in ops] for ops in applied]
        assert graph.get_state(cfg).values == {"n": 10}
    finally:
        saver.close()
