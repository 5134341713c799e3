"""A run's release is not tried again once its claim has lapsed.

A release whose write fails is tried again (``test_langgraph_release_retry.py``), up to
8 tries. A try fails only after the backend's own retries gave up: PostgreSQL retries
a lost connection for ``retry_timeout`` (30 s), SQLite waits ``busy_timeout`` (30 s)
for a lock. The release runs as the run ends, in the user's ``invoke`` /
``ainvoke``: 8 such tries blocked it for 8 budgets (4 minutes with the defaults; the
release's first version made one try, 30 s). Past ``run_lease`` (30 s) from the
release's start the claim has lapsed anyway (the run no longer renews it): a try then
frees nothing, it only blocks the user. Now no try is made once the claim has lapsed:
the user's call is blocked for at most ``run_lease`` plus one try.

The failing tries are made deterministic by wrapping the store's append, and their
duration by the injected clock (each failing try moves it on by what it took); the
pauses between tries are counted through ``report._sleep``, not slept. "Another
process" is a second saver on the same store and clock.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from statekeeper.errors import BackendError
from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m

from .conftest import bare_checkpoint, config, new_thread, reply_graph
from .test_langgraph_release_retry import _is_release
from .test_langgraph_ride_committed import _stored_claim

REPORT = importlib.import_module("statekeeper.schema.report")

LEASE = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _slow_failing_releases(
    saver: StatekeeperSaver, thread: str, clock: Clock, took: float
) -> list[float]:
    """Wrap the store's append: every release of the thread fails (nothing written)
    after ``took`` seconds of the clock (a backend's retry budget used up). Returns
    the clock at the start of each try."""
    store = saver.store
    original = store.append
    agent = m.agent_id(saver.prefix, thread)
    started: list[float] = []

    async def failing(agent_id: str, event_type: str, *args: Any, **kwargs: Any) -> Any:
        if agent_id != agent or not _is_release(event_type, kwargs):
            return await original(agent_id, event_type, *args, **kwargs)
        started.append(clock.now)
        clock.now += took
        raise BackendError("connection lost: the retry budget ran out, nothing written")

    store.append = failing  # type: ignore[method-assign]
    return started


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waited: list[float] = []

    async def sleep(delay: float) -> None:
        waited.append(delay)

    monkeypatch.setattr(REPORT, "_sleep", sleep)
    return waited


@pytest.mark.parametrize("mode", ["sync", "async", "shared"])
@pytest.mark.parametrize("took, tries", [(LEASE, 1), (10.0, 3), (LEASE / 2 + 1, 2)])
async def test_no_release_try_once_the_claim_has_lapsed(
    url: str, mode: str, took: float, tries: int, pauses: list[float]
) -> None:
    clock = Clock()
    if mode == "shared":  # the saver's own loop, run by the caller's thread
        saver = await asyncio.to_thread(
            StatekeeperSaver.from_url, url, run_lease=LEASE, clock=clock
        )
    else:
        saver = await StatekeeperSaver.afrom_url(url, run_lease=LEASE, clock=clock)
    try:
        thread = new_thread()
        graph = reply_graph().compile(checkpointer=saver)
        started = _slow_failing_releases(saver, thread, clock, took)
        cfg = {"configurable": {"thread_id": thread}}
        given = {"messages": [HumanMessage("hi", id="h1")]}
        began = clock.now
        try:
            if mode == "async":
                out = await graph.ainvoke(given, cfg, durability="async")
            else:
                out = await asyncio.to_thread(graph.invoke, given, cfg, durability="async")
        finally:
            del saver.store.append
        assert out["messages"][-1].content == "hello"  # (the run's outcome not masked)
        # every try began while the claim could still hold the thread; none after
        # (before: 8 tries, the user's call blocked for 8 x `took`)
        assert all(t < began + LEASE for t in started)
        assert len(started) == tries
        assert len(pauses) == tries - 1
        # given up, the claim is stored but lapsed: another process takes the thread
        claim = await saver._portal.run(_stored_claim(saver, thread))
        assert claim is not None and claim["exp"] <= clock.now
        other = StatekeeperSaver(saver.store, _portal=saver._portal, run_lease=LEASE, clock=clock)
        await other.aput(config(thread), bare_checkpoint(), {"source": "update", "step": 0}, {})
    finally:
        if mode == "shared":
            await asyncio.to_thread(saver.close)
        else:
            await saver.aclose()
