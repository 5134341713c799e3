"""16 LangGraph threads on one SQLite file: their writes share commits, and no write is
acknowledged before its commit — each one is readable through another saver on the
file when it returns (issue 12's group commit, end to end)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.integrations.langgraph import StatekeeperSaver

THREADS = 16
TURNS = 3


def chat() -> StateGraph[Any]:
    def reply(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"reply {n}", id=f"ai-{n}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder


def test_sixteen_threads_share_commits_and_each_write_is_committed_when_it_returns(
    tmp_path: Path,
) -> None:
    path = tmp_path / "threads.db"
    saver = StatekeeperSaver.from_url(f"sqlite:///{path}")
    backend = saver.store.backend
    assert isinstance(backend, SQLiteBackend)
    appends: list[int] = []  # appends per commit of the commit queue
    backend.commit_listeners.append(appends.append)
    commits_before = backend.append_commits
    # a second saver on the file: its own connections, nothing cached from the first
    other = StatekeeperSaver.from_url(f"sqlite:///{path}")
    early: list[str] = []
    writes = [0]
    count = threading.Lock()

    def seen_elsewhere(config: Any, task_id: str | None) -> bool:
        conf = config["configurable"]
        at = {
            "configurable": {
                "thread_id": conf["thread_id"],
                "checkpoint_ns": conf.get("checkpoint_ns", ""),
                "checkpoint_id": conf["checkpoint_id"],
            }
        }
        got = other.get_tuple(at)
        if got is None:
            return False
        return task_id is None or any(w[0] == task_id for w in got.pending_writes or ())

    def committed_on_return(method: Any, writes_of_a_task: bool) -> Any:
        def call(config: Any, *args: Any, **kwargs: Any) -> Any:
            out = method(config, *args, **kwargs)
            with count:
                writes[0] += 1
            task = (args[1] if len(args) > 1 else kwargs["task_id"]) if writes_of_a_task else None
            if not seen_elsewhere(out if not writes_of_a_task else config, task):
                early.append(f"{config['configurable']['thread_id']}: {method.__name__}")
            return out

        return call

    saver.put = committed_on_return(saver.put, False)  # type: ignore[method-assign]
    saver.put_writes = committed_on_return(saver.put_writes, True)  # type: ignore[method-assign]
    graph = chat().compile(checkpointer=saver)
    loop = saver._portal._loop

    def run(t: int, turns: range) -> None:
        cfg = {"configurable": {"thread_id": f"t{t}"}}
        for turn in turns:
            message = HumanMessage(f"hi {turn}", id=f"h{turn}")
            graph.invoke({"messages": [message]}, cfg, durability="sync")

    # The appends handed to the writer thread while it is held: the first flush of the
    # held turn may take one or several of them there (however many had arrived in
    # its tick); the rest queue behind it on the loop.
    handed = [0]
    locked = backend._locked

    def counted(fn: Any, *args: Any) -> Any:
        if fn == backend._append_batch_sync:
            with count:
                handed[0] += len(args[0])
        return locked(fn, *args)

    backend._locked = counted  # type: ignore[method-assign]

    try:
        with ThreadPoolExecutor(THREADS) as pool:
            for f in [pool.submit(run, t, range(1)) for t in range(THREADS)]:
                f.result()
            # The writer is held until every thread's next write (its run's input
            # checkpoint, which carries the claim) waits for it, on the writer thread
            # or in the loop's queue: those must then share two commits (the batch
            # handed to the writer, and the queue that filled up behind it).
            backend._writer_busy.acquire()
            try:
                handed[0] = 0
                futures = [pool.submit(run, t, range(1, TURNS)) for t in range(THREADS)]
                deadline = time.monotonic() + 60  # bounds a failure only
                while handed[0] + len(backend._queues.get(loop, ())) < THREADS:
                    assert time.monotonic() < deadline, "the claims never queued up"
                    assert not any(f.done() for f in futures)
                    time.sleep(0.001)  # (a poll of the condition above)
                held = len(appends)
            finally:
                backend._writer_busy.release()
            for f in futures:
                f.result()
        for t in range(THREADS):
            state = graph.get_state({"configurable": {"thread_id": f"t{t}"}})
            assert len(state.values["messages"]) == 2 * TURNS
        commits = backend.append_commits - commits_before
        assert early == []
        assert writes[0] == THREADS * TURNS * 5  # put, put_writes per step, 5 a turn
        # the held claims went together: two commits carried all of them
        assert sum(sorted(appends[held:], reverse=True)[:2]) >= THREADS
        assert commits <= writes[0] - (THREADS - 2)
        # every run's appends were seen: at least its input checkpoint (a sync run's
        # claim rides on it), a checkpoint per step (its writes may share it) and
        # its release — 4 for the 5 writes of a turn
        assert sum(appends) >= THREADS * TURNS * 4
    finally:
        saver.close()
        other.close()
