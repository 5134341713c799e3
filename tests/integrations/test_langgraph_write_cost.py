"""What a LangGraph write costs the store: how many store calls a saver write makes.

The speed goals of issue 12 are measured in ``benchmarks/`` (CPU and writes/s depend on
the machine); these tests pin the design choices behind them, counted in store calls,
which do not depend on timing. Every test runs on each backend of :data:`BACKENDS`.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import Api, Chain, config, new_thread


class _Counter(TypedDict):
    n: int


def _counting(saver: StatekeeperSaver, *names: str) -> collections.Counter[str]:
    """Count the saver's calls of the store methods ``names`` from now on (``get``
    counts ``_get_shared`` too: the saver's read of a plain store's document)."""
    counts: collections.Counter[str] = collections.Counter()
    for name in names:
        for attr in (name, "_get_shared") if name == "get" else (name,):
            method = getattr(saver.store, attr, None)
            if method is None:  # (a store without it: an older tree measured)
                continue

            def counted(*args: Any, _name: str = name, _method: Any = method, **kw: Any) -> Any:
                counts[_name] += 1
                return _method(*args, **kw)

            setattr(saver.store, attr, counted)
    return counts


@pytest.fixture
def small_graph() -> Iterator[StateGraph[Any]]:
    def step(state: _Counter) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    builder = StateGraph(_Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["n"] < 3 else END)
    yield builder


def test_a_new_threads_first_run_reads_the_store_once(
    saver: StatekeeperSaver, small_graph: StateGraph[Any]
) -> None:
    """A run on a new thread lists the thread's streams once (there are none), creates
    its stream and writes on the document it created: it does not list and load what
    it has just created (it did: 2 listings and 1 load for every new thread)."""
    graph = small_graph.compile(checkpointer=saver)
    counts = _counting(saver, "list_agents", "get", "load", "create")
    thread = new_thread()
    assert graph.invoke({"n": 0}, {"configurable": {"thread_id": thread}})["n"] == 3
    assert counts == {"list_agents": 1, "create": 1}
    # what it wrote reads back through a saver that has nothing cached
    fresh = StatekeeperSaver(saver.store, _portal=saver._portal)
    state = small_graph.compile(checkpointer=fresh).get_state(
        {"configurable": {"thread_id": thread}}
    )
    assert state.values == {"n": 3}
    history = list(fresh.list(config(thread)))
    assert [t.metadata["step"] for t in history] == [3, 2, 1, 0, -1]


async def test_a_thread_created_by_a_put_takes_its_later_puts_without_a_read(
    saver: StatekeeperSaver,
) -> None:
    """A put that creates the thread, then more puts: one listing, no load."""
    counts = _counting(saver, "list_agents", "get", "load", "head")
    chain = Chain(Api(saver, "sync"))
    for i in range(3):
        await chain.step({"a": i})
    assert counts == {"list_agents": 1}
    latest = saver.get_tuple(config(chain.thread_id))
    assert latest is not None and latest.checkpoint["channel_values"] == {"a": 2}
