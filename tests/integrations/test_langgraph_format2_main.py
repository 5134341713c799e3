"""A store written by the saver before the codec's built-in dictionary and the short
checkpoint keys (``tests/data/langgraph-format2-main.sql``: the scenario of
:mod:`.test_langgraph_format1` run by the saver of main ``ae16fb6`` on SQLite, dumped with
``iterdump``; ``langgraph-format2-main.json`` is what that saver's ``list`` returned):
plain zstd records and ``lg.cp.<32 hex>`` keys. Today's saver reads every checkpoint of
it as it was written (each by id on a cold saver: the key index), and goes on writing
on it. Regenerate both (only ever with that code) with ``PYTHONPATH=<old src>:. python -c
"from tests.integrations.test_langgraph_format2_main import generate; generate()"``.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from statekeeper.integrations.langgraph import StatekeeperSaver

from ._lg_graphs import chat_graph
from .test_langgraph_format1 import THREADS, _listed, _tuple, fixture_store, write_fixture

DATA = Path(__file__).parent.parent / "data"
OLD_STORE = DATA / "langgraph-format2-main.sql"
OLD_LIST = DATA / "langgraph-format2-main.json"


def generate() -> None:
    """Write the fixture (run with main ``ae16fb6``'s code: see the module docstring)."""
    write_fixture(OLD_STORE, OLD_LIST)


@pytest.fixture
def old_store(tmp_path: Path) -> str:
    return fixture_store(OLD_STORE, tmp_path)


def _compressions(url: str) -> set[int]:
    con = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        return {row[0][1] & 0x0C for row in con.execute("SELECT payload FROM sk_events")}
    finally:
        con.close()


def test_a_main_store_reads_as_it_was_written(old_store: str) -> None:
    expected = json.loads(OLD_LIST.read_text())
    assert _compressions(old_store) == {0, 4}  # plain and plain-zstd records only
    for thread_id in THREADS:
        with StatekeeperSaver.from_url(old_store) as saver:
            assert _listed(saver, thread_id) == expected[thread_id]
        for item in expected[thread_id]:  # each by id on a cold saver: the key index
            with StatekeeperSaver.from_url(old_store) as cold:
                tup = cold.get_tuple({"configurable": dict(item["config"])})
                assert tup is not None and _tuple(tup) == item


def test_a_main_thread_goes_on(old_store: str) -> None:
    """New checkpoints on an old thread (dictionary-compressed, short keys); old and
    new read back by id on a cold saver, the old ones unchanged; prune and copy work."""
    expected = json.loads(OLD_LIST.read_text())
    cfg: Any = {"configurable": {"thread_id": "chat"}}
    with StatekeeperSaver.from_url(old_store) as saver:
        chat = chat_graph(steps=2).compile(checkpointer=saver)
        chat.invoke({"messages": [HumanMessage("later", id="h-later")], "turn": 0}, cfg)
        listed = _listed(saver, "chat")
    added = len(listed) - len(expected["chat"])
    assert added == 4 and listed[added:] == expected["chat"]
    assert _compressions(old_store) == {0, 4, 8}
    with StatekeeperSaver.from_url(old_store) as cold:
        for item in listed:
            tup = cold.get_tuple({"configurable": dict(item["config"])})
            assert tup is not None and _tuple(tup) == item
        cold.copy_thread("chat", "copied")
        assert [t["checkpoint"] for t in _listed(cold, "copied")] == [
            t["checkpoint"] for t in listed
        ]
        cold.prune(["chat"])
        assert _listed(cold, "chat") == listed[:1]
