"""A sync LangGraph app on SQLite keeps a bounded number of connections: with
``durability="sync"`` every ``invoke`` writes (and reads) from a new executor thread,
and each such thread opened a reader connection (two file descriptors) kept until the
store closed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from statekeeper.integrations.langgraph import StatekeeperSaver


class _Counter(TypedDict):
    n: int


def _graph() -> StateGraph[Any]:
    builder = StateGraph(_Counter)
    builder.add_node("step", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["n"] < 2 else END)
    return builder


def test_many_invokes_reuse_the_reader_connections_of_ended_threads(tmp_path: Path) -> None:
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db")
    try:
        graph = _graph().compile(checkpointer=saver)
        for t in range(40):  # a new thread each: every invoke reads (lists its streams)
            cfg: Any = {"configurable": {"thread_id": f"t{t}"}}
            assert graph.invoke({"n": 0}, cfg, durability="sync")["n"] == 2
        backend: Any = saver.store.backend
        assert len(backend._readers) <= 4  # was one per invoke (41)
        # and a connection handed back reads what was written since
        assert _graph().compile(checkpointer=saver).get_state(
            {"configurable": {"thread_id": "t39"}}
        ).values == {"n": 2}
    finally:
        saver.close()


def test_threads_reading_at_once_each_have_their_own_connection(tmp_path: Path) -> None:
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db")
    try:
        graph = _graph().compile(checkpointer=saver)
        graph.invoke({"n": 0}, {"configurable": {"thread_id": "a"}})
        backend: Any = saver.store.backend
        barrier = threading.Barrier(3)
        seen: list[int] = []

        def read() -> None:
            conn = backend._reader()
            barrier.wait()  # all three hold theirs at once
            seen.append(id(conn))
            assert conn.execute("SELECT count(*) FROM sk_agents").fetchone()[0] >= 1

        threads = [threading.Thread(target=read) for _ in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert len(set(seen)) == 3
    finally:
        saver.close()


def test_a_backend_left_open_is_still_collected(tmp_path: Path) -> None:
    """The hand-back of a thread's reader connection does not keep its backend alive."""
    import gc
    import weakref

    from statekeeper.backends.sqlite import SQLiteBackend

    backend = SQLiteBackend(str(tmp_path / "x.db"))
    backend._reader().execute("SELECT 1").fetchone()  # this thread holds a reader
    ref = weakref.ref(backend)
    del backend
    gc.collect()
    assert ref() is None
