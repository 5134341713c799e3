"""A run's first held write is parked like the others (issue 12).

Its claim rides on it; it used to be held on the saver's loop instead (its caller's
thread ran the loop until the step's checkpoint came, and that checkpoint's ``put`` was
handed to it and waited for). Parked, the ``put`` takes it into its own commit, stores
the claim with it and marks the run as holding the thread; a parked first write that
nothing takes in time is committed by its caller, which then marks the run the same
way, so its claim is released when the run ends.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph.commits import _SaverCommits

from ._lg_graphs import counter_graph
from .conftest import new_thread
from .test_langgraph_parked import GUARD


def _chat() -> StateGraph[Any]:
    def reply(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [("ai", f"answer {n}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder


def test_no_write_of_a_sync_run_waits_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four chat turns (each run's first write: its input's) and an 8-step run: no
    held write waits on the loop (base: the first write of every turn did), every
    ``put_writes`` returns with its writes stored, and the states are the graph's."""
    held: list[str] = []
    hold = _SaverCommits._hold

    async def counted(self: Any, thread_id: str, mine: Any) -> None:
        held.append(thread_id)
        await hold(self, thread_id, mine)

    monkeypatch.setattr(_SaverCommits, "_hold", counted)
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db", writes_wait=GUARD)
    try:
        chat = _chat().compile(checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": new_thread()}}
        for turn in range(4):
            message = HumanMessage(f"q{turn}", id=f"h{turn}")
            out = chat.invoke({"messages": [message]}, cfg, durability="sync")
            assert len(out["messages"]) == 2 * (turn + 1)
        state = chat.get_state(cfg)
        assert [m.content for m in state.values["messages"]][-2:] == ["q3", "answer 7"]
        counter = counter_graph(8).compile(checkpointer=saver)
        other: Any = {"configurable": {"thread_id": new_thread()}}
        assert counter.invoke({"n": 0}, other, durability="sync") == {"n": 8}
        assert held == []
        # every run released its claim: a new run starts on each thread at once
        assert counter.invoke({"n": 5}, other, durability="sync") == {"n": 8}
        chat.invoke({"messages": [HumanMessage("again", id="h9")]}, cfg, durability="sync")
    finally:
        saver.close()


def test_a_parked_first_write_committed_by_its_caller_marks_the_run(tmp_path: Path) -> None:
    """The run's first write, parked, is taken by nothing (the step's checkpoint is
    held back until it has been committed): its caller commits it with the run's claim
    and the run holds the thread, so its claim is stored while it runs and released
    when it ends."""
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db", writes_wait=0.05)
    committed = threading.Event()
    commit_parked = saver._commit_parked
    put = saver.put

    async def recorded(*args: Any, **kwargs: Any) -> None:
        await commit_parked(*args, **kwargs)
        committed.set()

    claims: list[Any] = []

    def late_put(config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
        if metadata.get("step") == 0:  # the first step's checkpoint, after its writes
            assert committed.wait(GUARD)
            st = saver._streams.get(config["configurable"]["thread_id"])
            claims.append(None if st is None else st.doc.get("run"))
        return put(config, checkpoint, metadata, versions)

    saver._commit_parked = recorded  # type: ignore[method-assign]
    saver.put = late_put  # type: ignore[method-assign,assignment]
    try:
        graph = counter_graph(3).compile(checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": new_thread()}}
        assert graph.invoke({"n": 0}, cfg, durability="sync") == {"n": 3}
        assert claims and claims[0] is not None  # stored with the parked write
        st = saver._streams[cfg["configurable"]["thread_id"]]
        assert st.doc.get("run") is None  # released at the run's end
        assert not saver._runs
        assert graph.invoke({"n": 1}, cfg, durability="sync") == {"n": 3}
    finally:
        saver.close()
