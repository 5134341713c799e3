"""A run's release whose own write fails, or loses its reply, is tried again.

A LangGraph run ends by clearing its claim on the thread (``_SaverClaims._release``).
When that write failed (a connection dropped: ``BackendError``, nothing written) or its
reply was lost (``BackendError(maybe_applied=True)``: written or not), the release was
given up with a warning: a claim still stored refused every other process the thread
(``ThreadBusyError``) until ``run_lease`` ran out (an hour here). Now the release is
tried again, reading the thread first (a release whose reply was lost landed: the
claim is gone, nothing more is written), pausing between tries with the bounded
backoff of ``migrate`` / ``rollback`` (:func:`statekeeper.schema.report.pause`, counted
through ``report._sleep`` here, not slept); a backend that keeps failing is given up
after a bounded number of tries (the lease lapses, as before).

The store's append is wrapped (the failures made deterministic: no timing); "another
process" is a second saver on the same store, with its own cache and runs.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from statekeeper.errors import BackendError
from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m

from .conftest import bare_checkpoint, config, new_thread, reply_graph
from .test_langgraph_ride_committed import _stored_claim

#: the module whose ``_sleep`` the backoff's pauses wait with
REPORT = importlib.import_module("statekeeper.schema.report")


def _is_release(event_type: str, kwargs: dict[str, Any]) -> bool:
    ops = kwargs.get("ops") or []
    return event_type == m.EV_RUN and any(
        op["path"] == "/run" and op.get("value") is None for op in ops
    )


def _fail_releases(saver: StatekeeperSaver, thread: str, how: list[str]) -> list[str]:
    """Wrap the store's append: the thread's releases fail as ``how`` says, one entry
    a try: "lost" (written, its reply lost), "refused" (nothing written); once ``how``
    is used up they go through. Returns what was done to each try."""
    store = saver.store
    original = store.append
    agent = m.agent_id(saver.prefix, thread)
    done: list[str] = []

    async def failing(agent_id: str, event_type: str, *args: Any, **kwargs: Any) -> Any:
        if agent_id != agent or not _is_release(event_type, kwargs) or len(done) >= len(how):
            if agent_id == agent and _is_release(event_type, kwargs):
                done.append("written")
            return await original(agent_id, event_type, *args, **kwargs)
        kind = how[len(done)]
        done.append(kind)
        if kind == "lost":
            await original(agent_id, event_type, *args, **kwargs)
            raise BackendError("connection lost after the commit was sent", maybe_applied=True)
        raise BackendError("connection lost: nothing sent")

    store.append = failing  # type: ignore[method-assign]
    return done


async def _other_process_writes(saver: StatekeeperSaver, thread: str) -> None:
    """Another process writes the thread (refused while a live claim holds it)."""
    other = StatekeeperSaver(saver.store, _portal=saver._portal, run_lease=3600)
    await other.aput(config(thread), bare_checkpoint(), {"source": "update", "step": 0}, {})


async def _invoke(graph: Any, mode: str, thread: str) -> Any:
    cfg = {"configurable": {"thread_id": thread}}
    given = {"messages": [HumanMessage("hi", id="h1")]}
    if mode == "sync":
        return await asyncio.to_thread(graph.invoke, given, cfg, durability="async")
    return await graph.ainvoke(given, cfg, durability="async")


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waited: list[float] = []

    async def sleep(delay: float) -> None:
        waited.append(delay)

    monkeypatch.setattr(REPORT, "_sleep", sleep)
    return waited


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    "how, tries",
    [
        (["lost"], ["lost"]),  # landed: the read finds the claim gone, writes nothing
        (["refused"], ["refused", "written"]),
        (["refused", "lost"], ["refused", "lost"]),
        (["refused"] * 3, ["refused"] * 3 + ["written"]),
    ],
    ids=["lost", "refused", "refused-then-lost", "refused-3"],
)
async def test_a_release_whose_write_fails_is_tried_again(
    url: str, mode: str, how: list[str], tries: list[str], pauses: list[float]
) -> None:
    saver = await StatekeeperSaver.afrom_url(url, run_lease=3600)
    try:
        thread = new_thread()
        graph = reply_graph().compile(checkpointer=saver)
        done = _fail_releases(saver, thread, how)
        try:
            out = await _invoke(graph, mode, thread)
        finally:
            del saver.store.append
        assert out["messages"][-1].content == "hello"  # the run itself went well
        assert done == tries
        # a pause after each failure (a "lost" one's try again reads, writes nothing)
        assert len(pauses) == len(how)
        # released: another process writes the thread at once (before: ThreadBusyError
        # until the hour of run_lease ran out, for every try but a landed "lost")
        assert await _stored_claim(saver, thread) is None
        await _other_process_writes(saver, thread)
    finally:
        await saver.aclose()


async def test_a_release_that_keeps_failing_is_given_up(
    url: str, pauses: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    """A bounded number of tries, the backoff's pauses between them; then the run ends
    as before (its outcome not masked, a warning logged) and the claim lapses."""
    saver = await StatekeeperSaver.afrom_url(url, run_lease=3600)
    try:
        thread = new_thread()
        graph = reply_graph().compile(checkpointer=saver)
        done = _fail_releases(saver, thread, ["refused"] * 100)
        try:
            out = await _invoke(graph, "async", thread)
        finally:
            del saver.store.append
        assert out["messages"][-1].content == "hello"
        assert 2 < len(done) < 100 and set(done) == {"refused"}
        assert len(pauses) == len(done) - 1
        assert all(0 < p <= 0.02 for p in pauses)
        assert "releasing thread" in caplog.text
        assert (await _stored_claim(saver, thread)) is not None  # (left to lapse)
    finally:
        await saver.aclose()
