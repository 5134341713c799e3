"""A real LangGraph ``StateGraph`` compiled with the statekeeper saver: multi-step runs,
interrupt and resume, time travel and forks, a SIGKILL mid-superstep, and the same
histories as LangGraph's own ``SqliteSaver``."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from statekeeper.integrations.langgraph import StatekeeperSaver, ThreadBusyError

from ._lg_graphs import chat_graph, opening, parallel_graph, review_graph
from .conftest import new_thread

HERE = Path(__file__).resolve().parent


def runs(log_path: Path) -> Counter[str]:
    return Counter(log_path.read_text().splitlines()) if log_path.exists() else Counter()


def cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def test_multi_step_run_and_a_second_turn(saver: StatekeeperSaver, tmp_path: Path) -> None:
    log_path = tmp_path / "log"
    graph = chat_graph(steps=4, log_path=str(log_path)).compile(checkpointer=saver)
    thread = new_thread()
    out = graph.invoke({"messages": opening(2), "turn": 0}, cfg(thread))
    assert [m.content for m in out["messages"]] == ["hello 0", "hello 1"] + [
        f"reply {i}" for i in range(4)
    ]
    assert out["turn"] == 4
    state = graph.get_state(cfg(thread))
    assert state.next == () and state.values == out
    history = list(graph.get_state_history(cfg(thread)))
    assert len(history) == 6  # input, start, 4 chat steps
    assert [h.metadata["step"] for h in history] == [4, 3, 2, 1, 0, -1]  # type: ignore[index]
    # a second turn on the same thread continues the conversation (the replies have
    # the same ids again, so add_messages replaces them in place)
    out = graph.invoke({"messages": [HumanMessage("more", id="h-more")], "turn": 2}, cfg(thread))
    assert [m.content for m in out["messages"]][-3:] == ["reply 2", "reply 3", "more"]
    assert len(list(graph.get_state_history(cfg(thread)))) == 10
    assert runs(log_path) == Counter(
        {f"chat {i}": 1 for i in range(4)} | {"chat 2": 2, "chat 3": 2}
    )


def test_interrupt_and_resume(saver: StatekeeperSaver, tmp_path: Path) -> None:
    log_path = tmp_path / "log"
    graph = review_graph(str(log_path)).compile(checkpointer=saver)
    thread = new_thread()
    first = graph.invoke({"messages": opening(1)}, cfg(thread))
    assert first["__interrupt__"][0].value == {"question": "approve?", "draft": "draft text"}
    state = graph.get_state(cfg(thread))
    assert state.next == ("review",)
    assert state.tasks[0].interrupts[0].value["question"] == "approve?"
    done = graph.invoke(Command(resume="yes"), cfg(thread))
    assert done["approved"] == "yes"
    assert done["notes"] == ["drafted", "reviewed:yes", "published"]
    assert done["messages"][-1].content == "published (yes)"
    # draft ran once; review ran twice (interrupt re-enters the node); publish once
    assert runs(log_path) == Counter({"draft": 1, "review": 2, "publish": 1})


def test_resume_from_another_saver_instance(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/resume.db"
    thread = new_thread()
    with StatekeeperSaver.from_url(url) as one:
        review_graph().compile(checkpointer=one).invoke({"messages": opening(1)}, cfg(thread))
    with StatekeeperSaver.from_url(url) as two:  # "another process" picks the thread up
        done = review_graph().compile(checkpointer=two).invoke(Command(resume="later"), cfg(thread))
    assert done["approved"] == "later"


def test_time_travel_and_fork(saver: StatekeeperSaver, tmp_path: Path) -> None:
    log_path = tmp_path / "log"
    graph = chat_graph(steps=3, log_path=str(log_path)).compile(checkpointer=saver)
    thread = new_thread()
    final = graph.invoke({"messages": opening(1), "turn": 0}, cfg(thread))
    history = list(graph.get_state_history(cfg(thread)))
    after_first = next(h for h in history if h.values.get("turn") == 1)
    assert after_first.next == ("chat",)
    # replay from the past: the saved state is what it was then
    past = graph.get_state(after_first.config)
    assert [m.content for m in past.values["messages"]] == ["hello 0", "reply 0"]
    # fork: edit the past and run on from there
    fork_config = graph.update_state(
        after_first.config, {"messages": [HumanMessage("edited", id="edit")]}
    )
    forked = graph.invoke(None, fork_config)
    assert [m.content for m in forked["messages"]] == [
        "hello 0",
        "reply 0",
        "edited",
        "reply 1",
        "reply 2",
    ]
    # the original branch is intact and still addressable
    assert graph.get_state(history[0].config).values == final
    assert graph.get_state(cfg(thread)).values == forked
    fork_state = graph.get_state(fork_config)
    assert fork_state.metadata["source"] == "update"  # type: ignore[index]
    assert (
        fork_state.parent_config["configurable"]["checkpoint_id"]  # type: ignore[index]
        == after_first.config["configurable"]["checkpoint_id"]
    )  # type: ignore[index]
    assert runs(log_path)["chat 1"] == 2 and runs(log_path)["chat 0"] == 1


async def test_async_graph(saver: StatekeeperSaver) -> None:
    graph = chat_graph(steps=3).compile(checkpointer=saver)
    thread = new_thread()
    out = await graph.ainvoke({"messages": opening(1), "turn": 0}, cfg(thread))
    assert out["turn"] == 3
    history = [h async for h in graph.aget_state_history(cfg(thread))]
    assert len(history) == 5
    interrupted = review_graph().compile(checkpointer=saver)
    other = new_thread()
    await interrupted.ainvoke({"messages": opening(1)}, cfg(other))
    done = await interrupted.ainvoke(Command(resume="ok"), cfg(other))
    assert done["approved"] == "ok"


def _scenario(checkpointer: Any, thread: str) -> list[tuple[Any, ...]]:
    """Chat, second turn, interrupt + resume, and a fork; return comparable history."""
    chat = chat_graph(steps=3).compile(checkpointer=checkpointer)
    chat.invoke({"messages": opening(2), "turn": 0}, cfg(thread), durability="sync")
    chat.invoke(
        {"messages": [HumanMessage("again", id="again")], "turn": 1}, cfg(thread), durability="sync"
    )
    history = list(chat.get_state_history(cfg(thread)))
    middle = history[len(history) // 2]
    fork = chat.update_state(middle.config, {"messages": [HumanMessage("fork", id="fork")]})
    chat.invoke(None, fork, durability="sync")
    review = review_graph().compile(checkpointer=checkpointer)
    review.invoke({"messages": opening(1)}, cfg(thread + "-r"), durability="sync")
    review.invoke(Command(resume="yes"), cfg(thread + "-r"), durability="sync")

    def comparable(state: Any) -> tuple[Any, ...]:
        meta = {k: v for k, v in (state.metadata or {}).items() if k != "run_id"}
        tasks = [(t.name, [i.value for i in t.interrupts], t.result) for t in state.tasks]
        return (state.values, state.next, meta, tasks, state.parent_config is None)

    out = [comparable(s) for s in chat.get_state_history(cfg(thread))]
    out += [comparable(s) for s in review.get_state_history(cfg(thread + "-r"))]
    return out


def test_same_states_and_histories_as_sqlite_saver(saver: StatekeeperSaver) -> None:
    thread = new_thread()
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        reference = _scenario(SqliteSaver(conn), thread)
    finally:
        conn.close()
    ours = _scenario(saver, thread)
    assert len(ours) == len(reference) >= 15
    assert ours == reference


@pytest.mark.slow
def test_crash_mid_superstep_does_not_rerun_saved_tasks(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/crash.db"
    log_path, block = tmp_path / "log", tmp_path / "block"
    block.touch()
    thread = new_thread()
    child = subprocess.Popen(
        [sys.executable, str(HERE / "_lg_crash_child.py"), url, thread, str(log_path), str(block)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        with StatekeeperSaver.from_url(url) as watcher:
            deadline = time.monotonic() + 60
            while True:
                assert child.poll() is None, child.stdout.read() if child.stdout else b""
                seen = runs(log_path)
                latest = watcher.get_tuple(cfg(thread)) if seen["slow begin"] else None
                saved = {(w[1], tuple(w[2])) for w in (latest.pending_writes if latest else [])}  # type: ignore[union-attr]
                if ("notes", ("fast",)) in saved:
                    break  # fast's writes are durable while slow is still running
                assert time.monotonic() < deadline, f"child made no progress: {seen}"
                time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    assert runs(log_path) == Counter({"start": 1, "fast": 1, "slow begin": 1})
    block.unlink()
    with StatekeeperSaver.from_url(url) as saver:
        graph = parallel_graph(str(log_path)).compile(checkpointer=saver)
        # the killed run still holds the thread until its lease lapses: refused, nothing runs
        with pytest.raises(ThreadBusyError):
            graph.invoke(None, cfg(thread))
    assert runs(log_path) == Counter({"start": 1, "fast": 1, "slow begin": 1})
    # once the lease has lapsed (a clock past it) the thread is free again
    later = saver.run_lease + 1
    with StatekeeperSaver.from_url(url, clock=lambda: time.time() + later) as saver:
        graph = parallel_graph(str(log_path)).compile(checkpointer=saver)
        # only slow is left to run: fast's writes were saved before the kill
        assert graph.get_state(cfg(thread)).next == ("slow",)
        out = graph.invoke(None, cfg(thread))
    assert sorted(out["notes"]) == ["fast", "join", "slow", "start"]
    # fast is not run again: its saved writes were applied; slow (killed) ran again
    assert runs(log_path) == Counter(
        {"start": 1, "fast": 1, "slow begin": 2, "slow end": 1, "join": 1}
    )


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_graph_durability_modes(saver: StatekeeperSaver, durability: str) -> None:
    graph = chat_graph(steps=3).compile(checkpointer=saver)
    thread = new_thread()
    out = graph.invoke({"messages": opening(1), "turn": 0}, cfg(thread), durability=durability)  # type: ignore[arg-type]
    assert graph.get_state(cfg(thread)).values == out
