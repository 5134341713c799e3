"""Deterministic LangGraph graphs used by the integration tests (and the crash child).

No LLM: nodes append fixed messages, count, branch, interrupt, and log every execution
to a side file so a test can tell which nodes ran (and how often).
"""

from __future__ import annotations

import operator
import os
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send, interrupt


class ChatState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    turn: int
    notes: Annotated[list[str], operator.add]
    approved: str


class Counter(TypedDict):
    n: int


def counter_graph(steps: int) -> StateGraph[Any]:
    """One node that adds 1 to ``n`` until it reaches ``steps``: a checkpoint a step."""

    def step(state: Counter) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    builder = StateGraph(Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END)
    return builder


def log(path: str | None, line: str) -> None:
    """Append one line to the side log (fsync'd: a SIGKILL must not lose it)."""
    if not path:
        return
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def chat_graph(steps: int = 3, log_path: str | None = None) -> StateGraph[Any]:
    """A chat that grows by one AI message per step for ``steps`` steps."""

    def chat(state: ChatState) -> dict[str, Any]:
        n = state.get("turn", 0)
        log(log_path, f"chat {n}")
        return {"messages": [AIMessage(f"reply {n}", id=f"ai-{n}")], "turn": n + 1}

    def route(state: ChatState) -> str:
        return "chat" if state.get("turn", 0) < steps else END

    builder = StateGraph(ChatState)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    builder.add_conditional_edges("chat", route)
    return builder


def review_graph(log_path: str | None = None) -> StateGraph[Any]:
    """draft -> review (interrupts for approval) -> publish."""

    def draft(state: ChatState) -> dict[str, Any]:
        log(log_path, "draft")
        return {"messages": [AIMessage("draft text", id="draft")], "notes": ["drafted"]}

    def review(state: ChatState) -> dict[str, Any]:
        log(log_path, "review")
        answer = interrupt({"question": "approve?", "draft": state["messages"][-1].content})
        return {"approved": str(answer), "notes": [f"reviewed:{answer}"]}

    def publish(state: ChatState) -> dict[str, Any]:
        log(log_path, "publish")
        return {
            "messages": [AIMessage(f"published ({state['approved']})", id="pub")],
            "notes": ["published"],
        }

    builder = StateGraph(ChatState)
    builder.add_node("draft", draft)
    builder.add_node("review", review)
    builder.add_node("publish", publish)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    return builder


def parallel_graph(log_path: str, block_file: str | None = None) -> StateGraph[Any]:
    """start -> (fast, slow) in one superstep -> join. ``slow`` waits (forever, while
    ``block_file`` exists) after logging that it started: the crash test kills it."""

    def start(state: ChatState) -> dict[str, Any]:
        log(log_path, "start")
        return {"notes": ["start"]}

    def fast(state: ChatState) -> dict[str, Any]:
        log(log_path, "fast")
        return {"notes": ["fast"]}

    def slow(state: ChatState) -> dict[str, Any]:
        log(log_path, "slow begin")
        while block_file and Path(block_file).exists():
            time.sleep(0.02)
        log(log_path, "slow end")
        return {"notes": ["slow"]}

    def join(state: ChatState) -> dict[str, Any]:
        log(log_path, "join")
        return {"notes": ["join"]}

    builder = StateGraph(ChatState)
    for name, fn in (("start", start), ("fast", fast), ("slow", slow), ("join", join)):
        builder.add_node(name, fn)
    builder.add_edge(START, "start")
    builder.add_edge("start", "fast")
    builder.add_edge("start", "slow")
    builder.add_edge(["fast", "slow"], "join")
    builder.add_edge("join", END)
    return builder


def opening(n: int = 2) -> list[AnyMessage]:
    """The conversation a chat thread starts with."""
    return [HumanMessage(f"hello {i}", id=f"h-{i}") for i in range(n)]


class MapState(TypedDict, total=False):
    topics: list[str]
    results: Annotated[list[str], operator.add]
    summary: str


class ItemState(TypedDict, total=False):
    topic: str
    results: Annotated[list[str], operator.add]


def item_subgraph(log_path: str | None = None) -> Any:
    """research -> check (interrupts: a person approves each item) -> summarize."""

    def research(state: ItemState) -> dict[str, Any]:
        log(log_path, f"research {state['topic']}")
        return {"results": [f"facts on {state['topic']}"]}

    def check(state: ItemState) -> dict[str, Any]:
        log(log_path, f"check {state['topic']}")
        verdict = interrupt({"approve": state["topic"]})
        return {"results": [f"{state['topic']}: {verdict}"]}

    builder = StateGraph(ItemState)
    builder.add_node("research", research)
    builder.add_node("check", check)
    builder.add_edge(START, "research")
    builder.add_edge("research", "check")
    builder.add_edge("check", END)
    return builder.compile()


def map_reduce_graph(log_path: str | None = None) -> StateGraph[Any]:
    """plan -> one ``item`` subgraph per topic (``Send`` fan-out; each interrupts) ->
    reduce. Subgraph checkpoints live in their own ``item:<task id>`` namespaces."""

    def plan(state: MapState) -> dict[str, Any]:
        log(log_path, "plan")
        return {"topics": list(state.get("topics") or ["ducks", "geese", "swans"])}

    def fan_out(state: MapState) -> list[Send]:
        return [Send("item", {"topic": t}) for t in state["topics"]]

    def reduce(state: MapState) -> dict[str, Any]:
        log(log_path, "reduce")
        return {"summary": " | ".join(sorted(state.get("results") or []))}

    builder = StateGraph(MapState)
    builder.add_node("plan", plan)
    builder.add_node("item", item_subgraph(log_path))
    builder.add_node("reduce", reduce)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", fan_out, ["item"])
    builder.add_edge("item", "reduce")
    builder.add_edge("reduce", END)
    return builder
