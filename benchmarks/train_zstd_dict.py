"""How ``src/statekeeper/codec/zstd_dict1.bin`` was made (kept for the record: the file
is part of the stored format and never changes; a new dictionary is a new flag value).

The record bodies (``{"ops": [...], "key": ...}``, what the codec compresses) of the
saver's events on three graphs that are *not* the benchmark's (a counter with another
channel and node name, a plan/act loop with a list channel, a ``MessagesState`` chat)
are the training samples; ``zstandard.train_dictionary(4096, samples, level=19)``
(zstd's trainer picks segments at random: a second run gives other bytes).
Measured on the 30-step graph of ``bench_langgraph_goals.py`` (700 events, none in the
training set; docs/benchmarks.md, "bytes12"): 358 -> 165 bytes a record at level 3.

Usage::

    .venv/bin/python benchmarks/train_zstd_dict.py OUT.bin
"""

from __future__ import annotations

import operator
import sqlite3
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import zstandard
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from statekeeper.codec import Codec
from statekeeper.integrations.langgraph import StatekeeperSaver


class Count(TypedDict):
    count: int


class Plan(TypedDict):
    goal: str
    steps: Annotated[list[str], operator.add]
    done: bool


def graphs() -> Iterator[tuple[str, StateGraph[Any], list[tuple[dict[str, Any], str]]]]:
    counter = StateGraph(Count)
    counter.add_node("inc", lambda s: {"count": s["count"] + 2})
    counter.add_edge(START, "inc")
    counter.add_conditional_edges("inc", lambda s: "inc" if s["count"] < 24 else END)
    yield "count", counter, [({"count": 0}, f"c{t}") for t in range(6)]

    plan = StateGraph(Plan)
    plan.add_node("plan", lambda s: {"steps": [f"look at {s['goal']}"]})
    plan.add_node(
        "act", lambda s: {"steps": [f"did {len(s['steps'])}"], "done": len(s["steps"]) > 6}
    )
    plan.add_edge(START, "plan")
    plan.add_edge("plan", "act")
    plan.add_conditional_edges("act", lambda s: END if s["done"] else "plan")
    yield (
        "plan",
        plan,
        [({"goal": f"goal {t}", "steps": [], "done": False}, f"p{t}") for t in range(4)],
    )

    def answer(s: MessagesState) -> dict[str, Any]:
        n = len(s["messages"])
        return {"messages": [AIMessage("sure, " + "word " * (n % 17 + 3), id=f"a{n}")]}

    chat = StateGraph(MessagesState)
    chat.add_node("answer", answer)
    chat.add_edge(START, "answer")
    turns = [
        ({"messages": [HumanMessage(f"question {i} about things", id=f"q{i}")]}, "m1")
        for i in range(25)
    ]
    yield "chat", chat, turns


def bodies(path: Path) -> list[bytes]:
    """The serialized bodies of every record of a store written without compression
    (``{"ops": [...], "key": ...}``: what the codec compresses)."""
    conn = sqlite3.connect(path)
    try:
        return [bytes(row[0])[35:] for row in conn.execute("SELECT payload FROM sk_events")]
    finally:
        conn.close()


def main() -> None:
    samples: list[bytes] = []
    for name, builder, runs in graphs():
        path = Path(tempfile.mkdtemp()) / f"{name}.db"
        with StatekeeperSaver.from_url(f"sqlite:///{path}", codec=Codec()) as saver:
            graph = builder.compile(checkpointer=saver)
            for value, thread in runs:
                config: Any = {"configurable": {"thread_id": thread}, "recursion_limit": 100}
                graph.invoke(value, config, durability="sync")
        samples += bodies(path)
    trained = zstandard.train_dictionary(4096, samples, level=19)
    Path(sys.argv[1]).write_bytes(trained.as_bytes())
    print(f"{len(samples)} samples -> {len(trained.as_bytes())} bytes, id {trained.dict_id()}")


if __name__ == "__main__":
    main()
