"""A saver the application never closes ends cleanly at interpreter exit.

A ``from_url`` saver on PostgreSQL that only read, left open, printed "Task was
destroyed but it is pending! ... AsyncConnectionPool.worker()" at exit (the pool's
workers, pending on the saver's loop, collected with it). It is now closed at exit.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .test_langgraph_migrate import SRC, _init

_CHILD = """
import sys
sys.path.insert(0, {src!r})
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from statekeeper.integrations.langgraph import StatekeeperSaver
b = StateGraph(MessagesState)
b.add_node("reply", lambda s: {{"messages": [AIMessage("hello")]}})
b.add_edge(START, "reply")
saver = StatekeeperSaver.from_url({url!r})  # never closed
g = b.compile(checkpointer=saver)
cfg = {{"configurable": {{"thread_id": "t1"}}}}
if {write!r}:
    g.invoke({{"messages": [HumanMessage("hi")]}}, cfg)
print(len(list(g.get_state_history(cfg))))
"""


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    require_postgres()
    schema = namespace(tmp_path, "sk_lgx_")
    try:
        yield _init(f"{POSTGRES_DSN}?schema={schema}")
    finally:
        drop_schema(schema)


def _child(url: str, write: bool) -> subprocess.CompletedProcess[str]:
    code = _CHILD.format(src=str(SRC), url=url, write=write)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_an_unclosed_postgres_saver_exits_without_a_word(pg_url: str) -> None:
    wrote = _child(pg_url, write=True)
    assert (wrote.returncode, wrote.stderr) == (0, "")
    assert int(wrote.stdout) > 0
    read = _child(pg_url, write=False)  # a saver that only read
    assert (read.returncode, read.stdout, read.stderr) == (0, wrote.stdout, "")
