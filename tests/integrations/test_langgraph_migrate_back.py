"""Leaving and coming back: a thread made by ``StatekeeperSaver`` is exported to a
``SqliteSaver`` file, goes on there, and is imported back into the store it came from.

The store's own checkpoints keep statekeeper's integer channel versions; the ones made
on ``SqliteSaver`` come back with its zero-padded strings (the same versions in
LangGraph's other form). Before, the import's verification compared the forms as they
were: the command copied the new checkpoints and then failed with ``MigrationMismatch``
("checkpoint channel_versions", exit 2) on the first checkpoint the store had made.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph

from statekeeper import SyncStateStore
from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph.migrate import export_threads, import_threads

from .test_langgraph_oracle import _normal


def chat() -> StateGraph[Any]:
    def reply(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"reply {n}", id=f"ai-{n}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder


def ask(graph: Any, config: Any, text: str) -> list[str]:
    out = graph.invoke({"messages": [HumanMessage(text, id=f"h-{text}")]}, config)
    return [str(m.content) for m in out["messages"]]


def test_a_thread_exported_and_continued_on_sqlitesaver_imports_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    peer = tmp_path / "langgraph.sqlite"
    SyncStateStore(url).close()
    config: Any = {"configurable": {"thread_id": "t1"}}
    with StatekeeperSaver.from_url(url) as saver:
        ours = chat().compile(checkpointer=saver)
        ask(ours, config, "one")
        ask(ours, config, "two")
    assert export_threads(url, str(peer)).threads_verified == 1

    conn = sqlite3.connect(peer, check_same_thread=False)
    try:
        theirs = chat().compile(checkpointer=SqliteSaver(conn))
        ask(theirs, config, "three")  # the application went on there

        report = import_threads(str(peer), url)  # and comes back
        assert (report.checkpoints_copied, report.checkpoints_present) == (3, 6)
        assert report.threads_verified == 1
        with StatekeeperSaver.from_url(url) as saver:
            back = chat().compile(checkpointer=saver)
            assert _normal(list(back.get_state_history(config))) == _normal(
                list(theirs.get_state_history(config))
            )
            assert ask(back, config, "four") == ask(theirs, config, "four")
    finally:
        conn.close()
