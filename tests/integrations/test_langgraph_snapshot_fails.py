"""A thread's snapshot failing after its checkpoint committed (a backend error, a value
the snapshot's encoding refuses, a full disk) fails no write and loses nothing.

A snapshot only shortens a later cold read's replay; the checkpoint it follows is
already stored. Before, the snapshot's error failed the ``put`` (and every write that
had shared its commit) with the backend's raw error — ``OSError`` for a full disk —
and so the whole LangGraph run, although its checkpoint was durable; a
``SerializationError`` even re-committed the writes that shared the event. Now the run
finishes with every checkpoint stored, the failure is logged naming the thread, and
the snapshot is taken once the backend works again.

The graph runs on its own thread, joined with a generous bound: a hang fails the test
instead of the suite.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from statekeeper.errors import BackendUnavailable, SerializationError
from statekeeper.integrations.langgraph import StatekeeperSaver

from ._lg_graphs import chat_graph

STEPS = 6
#: joined with this bound: far above a 6-step run's time, only a hang reaches it
HANG_BOUND = 120.0


def _run(fn: Callable[[], Any]) -> Any:
    """``fn()`` on a thread of its own; its result, or its error raised here."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:
            out["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(HANG_BOUND)
    assert not worker.is_alive(), f"the run hung (still running after {HANG_BOUND} s)"
    if "error" in out:
        raise out["error"]
    return out["result"]


class _FailingSnapshots:
    """The backend's ``save_snapshot``, failing with ``error`` while ``failing``."""

    def __init__(self, saver: StatekeeperSaver, error: Exception) -> None:
        self.backend = saver.store.backend
        self.real = self.backend.save_snapshot
        self.error = error
        self.failing = True
        self.failed = 0

    async def __call__(self, agent_id: str, snapshot: Any) -> None:
        if self.failing:
            self.failed += 1
            raise self.error
        await self.real(agent_id, snapshot)


def _invoke(saver: StatekeeperSaver, api: str, durability: str, thread: str, inp: Any) -> Any:
    graph = chat_graph(STEPS).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": thread}}
    if api == "sync":
        return _run(lambda: graph.invoke(inp, cfg, durability=durability))
    return _run(lambda: asyncio.run(graph.ainvoke(inp, cfg, durability=durability)))


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
@pytest.mark.parametrize(
    "error",
    [OSError(28, "No space left on device"), BackendUnavailable("down"), SerializationError("x")],
    ids=["disk-full", "backend", "serialisation"],
)
def test_a_failing_snapshot_fails_no_run_and_loses_no_checkpoint(
    url: str,
    api: str,
    durability: str,
    error: Exception,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    thread, control = f"snapfail-{uuid.uuid4().hex}", f"snapok-{uuid.uuid4().hex}"
    # snapshot_min_bytes=1: a snapshot is due at (nearly) every commit
    saver = StatekeeperSaver.from_url(url, snapshot_min_bytes=1)
    try:
        expected = _invoke(saver, api, durability, control, {"messages": []})
        snaps = _FailingSnapshots(saver, error)
        monkeypatch.setattr(snaps.backend, "save_snapshot", snaps)
        with caplog.at_level(logging.WARNING):
            got = _invoke(saver, api, durability, thread, {"messages": []})
        assert snaps.failed >= 1  # the failure was injected, after a commit
        assert got == expected and got["turn"] == STEPS
        assert any(thread in r.getMessage() for r in caplog.records)
        cfg = {"configurable": {"thread_id": thread}}
        history = [t.checkpoint["channel_values"].get("turn") for t in saver.list(cfg)]
        want = [
            t.checkpoint["channel_values"].get("turn")
            for t in saver.list({"configurable": {"thread_id": control}})
        ]
        assert history == want  # every checkpoint the run acknowledged is stored

        # the backend works again: the thread's next commit takes its snapshot
        snaps.failing = False
        more = _invoke(saver, api, durability, thread, {"messages": []})
        assert more["turn"] == STEPS + 1
        agent = f"lg/{thread}#0"
        stored = saver._portal.call(saver.store.backend.latest_snapshot(agent))
        assert stored is not None
    finally:
        saver.close()
    with StatekeeperSaver.from_url(url) as cold:  # a new process reads it all back
        if not url.startswith("memory"):
            got_cold = cold.get_tuple({"configurable": {"thread_id": thread}})
            assert got_cold is not None
            assert got_cold.checkpoint["channel_values"]["turn"] == STEPS + 1
