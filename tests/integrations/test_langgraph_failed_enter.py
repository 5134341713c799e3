"""A run whose start fails after its first ``get_tuple`` still releases its thread.

LangGraph's loop claims the thread in its ``__enter__``'s first ``get_tuple``, then
hydrates the channels before it takes the input: a channel's ``from_checkpoint`` that
raises, a ``KeyboardInterrupt`` there, or the caller cancelling an ``ainvoke`` while
its claim is being stored ends the run inside ``__enter__``, whose exit stack (which
releases the claim) then never unwinds. The next run on the thread must run at once —
not be refused until the claim's lease lapses — and the thread must hold what
LangGraph's own ``InMemorySaver`` holds after the same calls.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from langgraph.channels import LastValue
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import new_thread

#: exceptions the next hydration of a :class:`Flaky` channel raises (one each)
_FAILS: list[BaseException] = []


class Flaky(LastValue[int]):
    """A channel whose ``from_checkpoint`` (run in the loop's ``__enter__``, after its
    first ``get_tuple``) raises what :data:`_FAILS` holds."""

    def from_checkpoint(self, checkpoint: Any) -> Any:
        if _FAILS:
            raise _FAILS.pop()
        return super().from_checkpoint(checkpoint)


class State(TypedDict):
    x: Annotated[int, Flaky(int)]
    n: int


def _count(state: State) -> dict[str, Any]:
    return {"n": state.get("n", 0) + state["x"]}


def _graph(saver: Any) -> Any:
    b = StateGraph(State)
    b.add_node("count", _count)
    b.add_edge(START, "count")
    return b.compile(checkpointer=saver)


@pytest.fixture(autouse=True)
def _no_failures() -> Iterator[None]:
    _FAILS.clear()
    yield
    _FAILS.clear()


async def _invoke(mode: str, graph: Any, inp: Any, cfg: Any, durability: str) -> Any:
    if mode == "sync":
        return await asyncio.to_thread(graph.invoke, inp, cfg, durability=durability)
    return await graph.ainvoke(inp, cfg, durability=durability)


async def _sequence(
    mode: str, saver: Any, thread: str, fail: BaseException, durability: str
) -> Any:
    """Run, fail a start with ``fail``, run again; the thread's history, summarised."""
    g = _graph(saver)
    cfg = {"configurable": {"thread_id": thread}}
    assert await _invoke(mode, g, {"x": 1}, cfg, durability) == {"x": 1, "n": 1}
    _FAILS.append(fail)
    with pytest.raises(type(fail)):
        await _invoke(mode, g, {"x": 10}, cfg, durability)
    assert not _FAILS
    # at once: not refused until the lease (an hour here) lapses
    assert await _invoke(mode, g, {"x": 100}, cfg, durability) == {"x": 100, "n": 101}
    history = await asyncio.to_thread(lambda: list(g.get_state_history(cfg)))
    return [(s.values, s.next, s.metadata["step"], s.metadata["source"]) for s in history]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
@pytest.mark.parametrize(
    "fail", [ValueError("bad channel"), KeyboardInterrupt()], ids=["error", "interrupt"]
)
async def test_a_start_failing_after_the_first_read_releases_the_thread(
    url: str, mode: str, durability: str, fail: BaseException
) -> None:
    saver = StatekeeperSaver.from_url(url, run_lease=3600)
    try:
        ours = await _sequence(mode, saver, new_thread(), fail, durability)
    finally:
        saver.close()
    theirs = await _sequence(mode, InMemorySaver(), new_thread(), fail, durability)
    assert ours == theirs


class _GateClock:
    """A claim clock that, once armed, holds the claim being stored (on the saver's
    loop) until the test lets it go."""

    def __init__(self) -> None:
        self.armed = False
        self.claiming = threading.Event()
        self.go = threading.Event()

    def __call__(self) -> float:
        if self.armed:
            self.armed = False
            self.claiming.set()
            self.go.wait(30)
        return time.time()


async def test_an_ainvoke_cancelled_while_its_claim_is_stored_releases_the_thread(url: str) -> None:
    """The caller gives up on ``aget_tuple`` (``ainvoke`` cancelled) while the saver's
    loop stores the run's claim: the claim, stored after the run ended, is released."""
    clock = _GateClock()
    saver = StatekeeperSaver.from_url(url, run_lease=3600, clock=clock)
    try:
        g = _graph(saver)
        cfg = {"configurable": {"thread_id": new_thread()}}
        await g.ainvoke({"x": 1}, cfg, durability="async")
        clock.armed = True
        started = asyncio.create_task(g.ainvoke({"x": 10}, cfg, durability="async"))
        assert await asyncio.to_thread(clock.claiming.wait, 30)
        started.cancel()
        clock.go.set()
        with pytest.raises(asyncio.CancelledError):
            await started
        out = await g.ainvoke({"x": 100}, cfg, durability="async")
        assert out == {"x": 100, "n": 101}
        other = StatekeeperSaver.from_url(url) if not url.startswith("memory") else None
        if other is not None:  # another process finds the thread free too
            try:
                out = await asyncio.to_thread(_graph(other).invoke, {"x": 1000}, cfg)
                assert out == {"x": 1000, "n": 1101}
            finally:
                other.close()
    finally:
        saver.close()
