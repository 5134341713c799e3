"""A run's claim is renewed on a timer of the saver's loop, not by a task living on it.

While a task lives on a :class:`~statekeeper.integrations.langgraph.loop.SharedLoop`,
its background thread takes the loop every 20 ms for a pass; the renewal task lived as
long as any claim did (the whole of every run, and ~``run_lease / 3`` after). A timer
wakes the background thread only when a renewal is due. No test waits for a duration:
each waits for a condition, with ``GUARD`` against a deadlock only.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import START, StateGraph

from statekeeper import StateStore
from statekeeper.integrations.langgraph import StatekeeperSaver, runs
from statekeeper.integrations.langgraph import mapping as m

from .conftest import new_thread

#: a guard against a deadlocked test, never a synchronisation
GUARD = 120.0


class Count(TypedDict):
    n: int


def blocking_graph(entered: threading.Event, release: threading.Event) -> Any:
    def node(state: Count) -> dict[str, int]:
        entered.set()
        assert release.wait(GUARD)
        return {"n": state["n"] + 1}

    builder = StateGraph(Count)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    return builder


def stored_claim(url: str, thread: str) -> dict[str, Any] | None:
    """The claim stored on the thread, read by a store of its own (not the saver's
    loop: a read through it would run the loop, and so its due timers)."""

    async def read() -> dict[str, Any] | None:
        store = StateStore(url)
        try:
            found = await store.get(m.agent_id("lg/", thread))
            return None if found is None else found.data.get("run")
        finally:
            await store.close()

    return asyncio.run(read())


def renewal_tasks(saver: StatekeeperSaver) -> list[str]:
    """The tasks on the saver's loop running a claim renewal (others, e.g. the store's
    witness flush a second after a write, come and go on their own schedule)."""

    async def tasks() -> list[str]:
        me = asyncio.current_task()
        others = [t for t in asyncio.all_tasks() if t is not me]
        # (a bare saver call that waited goes on as a task running a ``steps.Rest``
        # around its coroutine: its name is the coroutine's)
        coros = [getattr(t.get_coro(), "_coro", t.get_coro()) for t in others]
        names = [getattr(c, "__qualname__", type(c).__name__) for c in coros]
        return [n for n in names if "renew" in n.lower()]

    return saver._portal.call(tasks())


def test_a_live_runs_claim_leaves_no_task_on_the_loop(tmp_path: Path) -> None:
    """While a run holds its thread, no renewal task lives on the saver's loop (so the
    background thread sleeps until the renewal is due); the renewal is a timer. Before:
    the renewal task lived for the whole run, and the background thread ran the loop
    every 20 ms meanwhile."""
    url = f"sqlite:///{tmp_path}/renew.db"
    entered, release = threading.Event(), threading.Event()
    thread = new_thread()
    with StatekeeperSaver.from_url(url) as saver:
        graph = blocking_graph(entered, release).compile(checkpointer=saver)
        out: list[Any] = []
        runner = threading.Thread(
            target=lambda: out.append(
                graph.invoke({"n": 0}, {"configurable": {"thread_id": thread}})
            )
        )
        runner.start()
        try:
            assert entered.wait(GUARD)
            claim = stored_claim(url, thread)
            assert claim is not None and claim["exp"] > time.time()  # the run holds it
            assert renewal_tasks(saver) == []
            assert saver._renewer is not None  # its renewal is a timer
        finally:
            release.set()
            runner.join(GUARD)
        assert out == [{"n": 1}]
    assert stored_claim(url, thread) is None  # released


def test_a_live_runs_claim_is_renewed_while_nobody_calls(tmp_path: Path) -> None:
    """A run busy in a node (no saver call) keeps its claim: the background thread
    renews it every ``run_lease / 3``, again and again, and the run then ends well."""
    url = f"sqlite:///{tmp_path}/renew.db"
    entered, release = threading.Event(), threading.Event()
    thread = new_thread()
    with StatekeeperSaver.from_url(url, run_lease=0.6) as saver:
        graph = blocking_graph(entered, release).compile(checkpointer=saver)
        out: list[Any] = []
        runner = threading.Thread(
            target=lambda: out.append(
                graph.invoke({"n": 0}, {"configurable": {"thread_id": thread}})
            )
        )
        runner.start()
        try:
            assert entered.wait(GUARD)
            first = stored_claim(url, thread)
            assert first is not None
            seen = [first["exp"]]
            deadline = time.monotonic() + GUARD
            while len(seen) < 3:  # two renewals, each after the one before
                claim = stored_claim(url, thread)
                assert claim is not None and claim["id"] == first["id"]
                if claim["exp"] > seen[-1]:
                    seen.append(claim["exp"])
                assert time.monotonic() < deadline, f"the claim was not renewed: {seen}"
        finally:
            release.set()
            runner.join(GUARD)
        assert out == [{"n": 1}]  # its writes after the renewals were its own
    assert stored_claim(url, thread) is None


def test_a_dead_runs_claim_is_not_renewed_and_lapses(tmp_path: Path) -> None:
    """A run whose loop is gone without releasing (``dead``) is not renewed: the next
    due renewal drops it and sets no timer again; its claim then lapses and another
    saver takes the thread over."""
    url = f"sqlite:///{tmp_path}/renew.db"
    thread = new_thread()
    with StatekeeperSaver.from_url(url, run_lease=0.6) as saver:
        run = runs.Run(thread, object(), addressed=False)
        saver._portal.call(saver._claim(run))
        first = stored_claim(url, thread)
        assert first is not None and first["id"] == run.token
        run.dead = True
        deadline = time.monotonic() + GUARD
        while run.key in saver._runs or saver._renewer is not None or saver._renewing:
            assert time.monotonic() < deadline, "the dead run was never dropped"
            time.sleep(0.01)  # (polling a condition)
        assert stored_claim(url, thread) == first  # never renewed
    lapsed = first["exp"] + 1
    with StatekeeperSaver.from_url(url, clock=lambda: lapsed) as taker:
        taken = runs.Run(thread, object(), addressed=False)
        taker._portal.call(taker._claim(taken))
        claim = stored_claim(url, thread)
        assert claim is not None and claim["id"] == taken.token
        taker._portal.call(taker._release(taken))
