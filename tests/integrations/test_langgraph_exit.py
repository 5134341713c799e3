"""A saver the application never closes ends cleanly at interpreter exit.

A ``from_url`` saver on PostgreSQL that only read, left open, printed "Task was
destroyed but it is pending! ... AsyncConnectionPool.worker()" at exit (the pool's
workers, pending on the saver's loop, collected with it). It is now closed at exit.

A SQLite saver left open was "closed" at exit after Python had shut its thread pools
down: the SQLite writer thread and ``asyncio.to_thread`` refused work, so with
``durability="async"`` the buffered checkpoints were dropped (the last turns of the
thread silently gone on the next start) and, with any durability, the witness's marks
were not written. It is now flushed before the pools stop.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.security.highwater import WAITING as WITNESS
from statekeeper.store.durability import GUARD
from statekeeper.store.shared_loop import _IDLE, SharedLoop

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import Api, Chain
from .test_langgraph_migrate import SRC, TARGETS, _init, _target

_CHILD = """
import sys
sys.path.insert(0, {src!r})
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from statekeeper.integrations.langgraph import StatekeeperSaver
b = StateGraph(MessagesState)
b.add_node("reply", lambda s: {{"messages": [AIMessage("hello")]}})
b.add_edge(START, "reply")
saver = StatekeeperSaver.from_url({url!r}, **{options!r})  # never closed
g = b.compile(checkpointer=saver)
cfg = {{"configurable": {{"thread_id": "t1"}}}}
for turn in range({write!r}):
    g.invoke({{"messages": [HumanMessage(f"hi {{turn}}")]}}, cfg)
if {history!r}:
    print(len(list(g.get_state_history(cfg))))
else:
    print(len(g.get_state(cfg).values["messages"]))
"""


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    require_postgres()
    schema = namespace(tmp_path, "sk_lgx_")
    try:
        yield _init(f"{POSTGRES_DSN}?schema={schema}")
    finally:
        drop_schema(schema)


def _child(
    url: str, write: int, history: bool = True, **options: Any
) -> subprocess.CompletedProcess[str]:
    code = _CHILD.format(src=str(SRC), url=url, write=write, history=history, options=options)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_an_unclosed_postgres_saver_exits_without_a_word(pg_url: str) -> None:
    wrote = _child(pg_url, write=1)
    assert (wrote.returncode, wrote.stderr) == (0, "")
    assert int(wrote.stdout) > 0
    read = _child(pg_url, write=0)  # a saver that only read
    assert (read.returncode, read.stdout, read.stderr) == (0, wrote.stdout, "")


@pytest.mark.parametrize("durability", ["async", "sync"])
def test_an_unclosed_sqlite_saver_keeps_every_turn_and_its_witness(
    tmp_path: Path, durability: str
) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    # (async: nothing flushes by time before exit, only by size, 1000 records)
    # (and the child reads the latest state only: a full history read flushes first)
    wrote = _child(url, 5, False, durability=durability, flush_interval=3600.0)
    assert int(wrote.stdout) == 2 * 5  # 5 turns of a question and its reply
    read = _child(url, 0, False)
    assert read.stdout == wrote.stdout  # nothing of the last turns was dropped at exit
    assert (wrote.returncode, wrote.stderr) == (0, "")  # no "cannot write the witness file"
    assert (read.returncode, read.stderr) == (0, "")
    marks = json.loads((tmp_path / "agents.db.sk-witness").read_text())
    assert "lg/t1#0" in json.dumps(marks)  # the thread's mark was written at exit


_BOUND = """
import asyncio, sys
sys.path.insert(0, {src!r})
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from statekeeper.integrations.langgraph import StatekeeperSaver
async def main():
    saver = await StatekeeperSaver.afrom_url({url!r}, **{options!r})  # never closed
    b = StateGraph(MessagesState)
    b.add_node("reply", lambda s: {{"messages": [AIMessage("hello")]}})
    b.add_edge(START, "reply")
    g = b.compile(checkpointer=saver)
    cfg = {{"configurable": {{"thread_id": "t1"}}}}
    for turn in range({write!r}):
        await g.ainvoke({{"messages": [HumanMessage(f"hi {{turn}}")]}}, cfg)
    state = await g.aget_state(cfg)
    print(len(state.values.get("messages", [])))
asyncio.run(main())
"""


@pytest.mark.parametrize("engine", TARGETS)
def test_an_unclosed_afrom_url_saver_keeps_every_turn_when_asyncio_run_ends(
    tmp_path: Path, engine: str
) -> None:
    """A saver of ``afrom_url`` with ``durability="async"`` that the application never
    ``aclose``d lost every buffered checkpoint when ``asyncio.run`` ended, silently:
    the next start found none of the thread's turns."""
    with _target(engine, tmp_path) as url:

        def run(write: int, **options: Any) -> subprocess.CompletedProcess[str]:
            code = _BOUND.format(src=str(SRC), url=url, write=write, options=options)
            return subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
            )

        wrote = run(5, durability="async", flush_interval=3600.0)
        assert (wrote.returncode, wrote.stdout, wrote.stderr) == (0, "10\n", "")
        read = run(0)
        assert (read.returncode, read.stderr) == (0, "")
        assert read.stdout == "10\n"  # 5 turns of a question and its reply, none dropped


async def test_buffered_writes_do_not_keep_the_savers_loop_polled(tmp_path: Path) -> None:
    """The write-behind buffer's guard task (which writes it out when ``asyncio.run``
    ends) only waits: a ``from_url`` saver's background thread sleeps its idle wait while
    writes are buffered, as it did with the buffer's timer alone, instead of running the
    loop every 20 ms for as long as they stay buffered."""
    url = f"sqlite:///{tmp_path}/agents.db"
    with StatekeeperSaver.from_url(url, durability="async", flush_interval=3600.0) as saver:
        await Chain(Api(saver, "sync")).step({"i": 1})
        assert saver.store.stats().buffered > 0
        portal = saver._portal
        assert isinstance(portal, SharedLoop)
        # the loop's last pass (a task settling the call) ends on its own
        deadline = time.monotonic() + 60
        # (the witness's guard, which writes its marks when the loop ends, only waits too)
        waiting = sorted((GUARD, WITNESS))
        while any(t.get_name() not in waiting for t in asyncio.all_tasks(portal._loop)):
            assert time.monotonic() < deadline, asyncio.all_tasks(portal._loop)
            await asyncio.sleep(0.01)
        assert saver.store.stats().buffered > 0  # still buffered, the guard still there
        assert sorted(t.get_name() for t in asyncio.all_tasks(portal._loop)) == waiting
        assert portal._wait() == _IDLE
