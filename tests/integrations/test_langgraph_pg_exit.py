"""A LangGraph saver on PostgreSQL the application never closes keeps every turn when
its event loop ends on a server out of connections, once a connection can be had.

A saver of ``afrom_url`` with ``durability="async"`` whose pool had lost its
connections dropped the buffered checkpoints when ``asyncio.run`` ended, even with a
connection slot free by then: the pool's workers were cancelled with the loop's other
tasks and nobody made the connection (see tests/backends/test_postgres_exit.py). A
saver of ``from_url`` flushes at interpreter exit on its own loop, whose pool still
runs. Each test runs its own server with 6 connection slots, never the shared one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from statekeeper.integrations.langgraph import StatekeeperSaver

from ..backends._exhausted import Child, exhausted_server

pytestmark = pytest.mark.slow  # (a private server each)

_GRAPH = """
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from statekeeper.integrations.langgraph import StatekeeperSaver
b = StateGraph(MessagesState)
b.add_node("reply", lambda s: {{"messages": [AIMessage("hello")]}})
b.add_edge(START, "reply")
cfg = {{"configurable": {{"thread_id": "t1"}}}}
"""

_BOUND = (
    _GRAPH
    + """
async def main():
    LOOPS.append(asyncio.get_running_loop())
    saver = await StatekeeperSaver.afrom_url(  # never closed
        {url!r}, durability="async", flush_interval=3600.0
    )
    g = b.compile(checkpointer=saver)
    for turn in range(3):
        await g.ainvoke({{"messages": [HumanMessage(f"hi {{turn}}")]}}, cfg)
    print("buffered" if saver.store.stats().buffered else "written", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    KEPT.append(asyncio.ensure_future(say_ending()))
    await asyncio.sleep(0)  # (say_ending waits from now on)
asyncio.run(main())
print("exited", flush=True)
"""
)

_SHARED = (
    _GRAPH
    + """
saver = StatekeeperSaver.from_url({url!r}, durability="async", flush_interval=3600.0)
g = b.compile(checkpointer=saver)  # the saver is never closed
for turn in range(3):
    g.invoke({{"messages": [HumanMessage(f"hi {{turn}}")]}}, cfg)
print("buffered" if saver.store.stats().buffered else "written", flush=True)
sys.stdin.readline()
print("ending", flush=True)
"""
)


async def _messages(url: str) -> int:
    saver = await StatekeeperSaver.afrom_url(url)
    try:
        found: Any = await saver.aget_tuple({"configurable": {"thread_id": "t1"}})
        return len(found.checkpoint["channel_values"]["messages"]) if found else 0
    finally:
        await saver.aclose()


@pytest.mark.parametrize("code", [_BOUND, _SHARED], ids=["afrom_url", "from_url"])
def test_an_unclosed_saver_keeps_every_turn_when_a_connection_frees_at_the_end(
    code: str,
) -> None:
    with exhausted_server() as pg:
        child = Child(code.format(url=pg.url()))
        child.expect("buffered")  # the turns acknowledged, not yet written
        pg.take_all()  # its connections ended, and no slot left for a new one
        child.say()
        child.expect("ending")  # its loop (or the interpreter) is ending
        pg.free_one()  # a connection can be had again
        status, _, err = child.exit()
        assert status == 0, err
        assert "lost" not in err, err
        pg.release()
        assert asyncio.run(_messages(pg.server.dsn)) == 6  # 3 turns: a question, a reply
