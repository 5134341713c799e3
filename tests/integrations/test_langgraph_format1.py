"""Threads in the saver's format 2 (the history out of the thread document) and stores
written in format 1 (every checkpoint's seq and writes in the document).

The format 1 store is ``tests/data/langgraph-format1.sql``: :func:`_scenario` run by the
saver of commit b2b9a87 (before format 2) on SQLite, dumped with
``sqlite3.Connection.iterdump``; ``langgraph-format1.json`` is what that saver's ``list``
returned then (:func:`_plain`). Regenerate both (only ever with format 1 code) with
``PYTHONPATH=<old src>:. python -c "from tests.integrations.test_langgraph_format1
import generate; generate()"``.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from statekeeper.integrations.langgraph import StatekeeperSaver

from ._lg_graphs import chat_graph, map_reduce_graph, opening
from .conftest import BACKENDS, backend_url

DATA = Path(__file__).parent.parent / "data"
OLD_STORE = DATA / "langgraph-format1.sql"
OLD_LIST = DATA / "langgraph-format1.json"
THREADS = ("chat", "map")


def _plain(value: Any) -> Any:
    """A JSON form of checkpoint values for comparison (messages by type, content, id)."""
    if isinstance(value, BaseMessage):
        return {"msg": value.type, "content": value.content, "id": value.id}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def _tuple(tup: Any) -> dict[str, Any]:
    return {
        "config": tup.config["configurable"],
        "parent": None if tup.parent_config is None else tup.parent_config["configurable"],
        "checkpoint": _plain(tup.checkpoint),
        "metadata": _plain(tup.metadata),
        "writes": _plain(tup.pending_writes),
    }


def _listed(saver: Any, thread_id: str) -> list[dict[str, Any]]:
    return [_tuple(t) for t in saver.list({"configurable": {"thread_id": thread_id}})]


def _scenario(saver: Any) -> None:
    """A chat with a fork (``update_state`` on an older checkpoint), and a map-reduce
    graph whose ``Send`` subgraphs interrupt (namespaces, interrupt writes)."""
    chat = chat_graph(steps=2).compile(checkpointer=saver)
    cfg: Any = {"configurable": {"thread_id": "chat"}}
    for turn in range(4):
        message = HumanMessage(f"turn {turn} " + "x" * 300, id=f"h-{turn}")
        chat.invoke({"messages": [message], "turn": 0}, cfg)
    older = list(chat.get_state_history(cfg))[5]
    chat.update_state(older.config, {"messages": [HumanMessage("forked", id="f-1")]})
    mapped = map_reduce_graph().compile(checkpointer=saver)
    mcfg: Any = {"configurable": {"thread_id": "map"}}
    mapped.invoke({"topics": ["ducks", "geese"]}, mcfg)
    waiting = mapped.get_state(mcfg).interrupts
    mapped.invoke(Command(resume={i.id: "ok" for i in waiting}), mcfg)


def write_fixture(store_sql: Path, listing: Path) -> None:
    """Run :func:`_scenario` on a new SQLite store with the saver imported now, and
    write the store (``iterdump``) to ``store_sql`` and what ``list`` returned for each
    thread to ``listing``."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lg.db"
        saver = StatekeeperSaver.from_url(f"sqlite:///{path}")
        _scenario(saver)
        listed = {t: _listed(saver, t) for t in THREADS}
        saver.close()
        con = sqlite3.connect(path)
        store_sql.write_text("\n".join(con.iterdump()) + "\n")
        con.close()
    listing.write_text(json.dumps(listed, indent=1, sort_keys=True) + "\n")


def fixture_store(store_sql: Path, tmp_path: Path) -> str:
    """The URL of a SQLite store made from the dump ``store_sql`` (in ``tmp_path``)."""
    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.executescript(store_sql.read_text())
    con.close()
    return f"sqlite:///{path}"


def generate() -> None:
    """Write the format 1 fixture (run with format 1 code: see the module docstring)."""
    write_fixture(OLD_STORE, OLD_LIST)


@pytest.fixture
def old_store(tmp_path: Path) -> str:
    return fixture_store(OLD_STORE, tmp_path)


def test_a_format_1_store_reads_as_it_was_written(old_store: str) -> None:
    expected = json.loads(OLD_LIST.read_text())
    with StatekeeperSaver.from_url(old_store) as saver:
        for thread_id in THREADS:
            assert _listed(saver, thread_id) == expected[thread_id]
            for item in expected[thread_id]:  # each by id: the format 1 index
                tup = saver.get_tuple({"configurable": dict(item["config"])})
                assert tup is not None and _tuple(tup) == item
        latest = saver.get_tuple({"configurable": {"thread_id": "chat"}})
        assert latest is not None and _tuple(latest) == expected["chat"][0]


def test_a_format_1_thread_goes_on_in_format_2(old_store: str) -> None:
    """New checkpoints on an old thread are added the new way; old and new read back,
    the old ones unchanged, and prune and copy work on the mixed thread."""
    expected = json.loads(OLD_LIST.read_text())
    cfg: Any = {"configurable": {"thread_id": "chat"}}
    with StatekeeperSaver.from_url(old_store) as saver:
        chat = chat_graph(steps=2).compile(checkpointer=saver)
        chat.invoke({"messages": [HumanMessage("later", id="h-later")], "turn": 0}, cfg)
        listed = _listed(saver, "chat")
        added = len(listed) - len(expected["chat"])
        assert added == 4 and listed[added:] == expected["chat"]
        for item in listed:
            tup = saver.get_tuple({"configurable": dict(item["config"])})
            assert tup is not None and _tuple(tup) == item
        assert any(item["writes"] for item in listed[:added])  # the new ones' writes
        doc = saver._portal.call(saver.store.load("lg/chat#0")).data
        nsd = doc["ns"][""]
        new_ids = {item["config"]["checkpoint_id"] for item in listed[:added]}
        assert not new_ids & set(nsd["idx"])  # the old index stays as it was
        # the document keeps only the latest checkpoint's writes, and those LangGraph
        # stored after the next checkpoint (it stores a step's writes and the next
        # checkpoint concurrently; :func:`test_writes_stored_after_the_next_checkpoint_
        # stay_with_theirs` forces that): each read back with its own checkpoint
        for cid in set(nsd["w"]) & new_ids:
            item = next(i for i in listed if i["config"]["checkpoint_id"] == cid)
            assert set(nsd["w"][cid]) <= {w[0] for w in item["writes"]}
        saver.copy_thread("chat", "copied")
        assert [t["checkpoint"] for t in _listed(saver, "copied")] == [
            t["checkpoint"] for t in listed
        ]
        saver.prune(["chat"])
        assert _listed(saver, "chat") == listed[:1]


class _LateWrites(StatekeeperSaver):
    """A saver whose ``put_writes`` on a checkpoint waits until the checkpoint after it
    is stored (LangGraph's other thread won the race), and which notes every call's
    checkpoint, task and channels."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stored_after: dict[str, threading.Event] = {}
        self.calls: list[tuple[str, str, str]] = []
        self._guard = threading.Lock()

    def _next_stored(self, cid: str) -> threading.Event:
        with self._guard:
            return self.stored_after.setdefault(cid, threading.Event())

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        out = super().put(config, checkpoint, metadata, new_versions)
        parent = config["configurable"].get("checkpoint_id")
        if parent is not None:
            self._next_stored(parent).set()
        return out

    def put_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        cid = config["configurable"]["checkpoint_id"]
        # every step with tasks is followed by a checkpoint: this wait ends
        assert self._next_stored(cid).wait(timeout=60), f"no checkpoint after {cid}"
        with self._guard:
            self.calls.extend((cid, task_id, ch) for ch, _ in writes)
        super().put_writes(config, writes, task_id, task_path)


def test_writes_stored_after_the_next_checkpoint_stay_with_theirs(old_store: str) -> None:
    """On a format 1 thread going on in format 2, every step's writes stored only once
    the next checkpoint is (the interleaving LangGraph's concurrent saves can take):
    they stay in the document, and every checkpoint reads back exactly the writes
    stored on it, by ``list`` and by id, none on another checkpoint."""
    cfg: Any = {"configurable": {"thread_id": "chat"}}
    expected = json.loads(OLD_LIST.read_text())
    with _LateWrites.from_url(old_store) as saver:
        assert isinstance(saver, _LateWrites)
        chat = chat_graph(steps=2).compile(checkpointer=saver)
        chat.invoke({"messages": [HumanMessage("later", id="h-later")], "turn": 0}, cfg)
        listed = _listed(saver, "chat")
        added = len(listed) - len(expected["chat"])
        assert added == 4 and listed[added:] == expected["chat"]
        new_ids = [item["config"]["checkpoint_id"] for item in listed[:added]]
        for item in listed:
            tup = saver.get_tuple({"configurable": dict(item["config"])})
            assert tup is not None and _tuple(tup) == item
        got = sorted(
            (i["config"]["checkpoint_id"], w[0], w[1]) for i in listed[:added] for w in i["writes"]
        )
        assert saver.calls and got == sorted(saver.calls)
        doc = saver._portal.call(saver.store.load("lg/chat#0")).data
        late = set(doc["ns"][""]["w"]) & set(new_ids[1:])
        assert late == {cid for cid, _, _ in saver.calls}  # kept: stored after the next


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_thread_document_holds_only_the_latest_checkpoint(backend: str, tmp_path: Path) -> None:
    """The document a latest read decodes has no per-checkpoint index and only the
    latest checkpoint's writes; every older checkpoint (and its writes, and the
    interrupt writes in subgraph namespaces) still reads back as InMemorySaver has it."""
    url = backend_url(backend, tmp_path)
    oracle = InMemorySaver()
    thread = f"doc-{uuid.uuid4().hex}"  # the server backends are shared
    with StatekeeperSaver.from_url(url) as saver:
        for side in (oracle, saver):
            chat = chat_graph(steps=3).compile(checkpointer=side)
            cfg: Any = {"configurable": {"thread_id": thread}}
            for turn in range(6):
                message = HumanMessage(f"t{turn}", id=f"t-{turn}")
                chat.invoke({"messages": [*opening(2), message], "turn": 0}, cfg)
            mapped = map_reduce_graph().compile(checkpointer=side)
            mcfg: Any = {"configurable": {"thread_id": thread + "-map"}}
            mapped.invoke({"topics": ["ducks", "geese"]}, mcfg)
        for tid in (thread, thread + "-map"):
            ours = _listed(saver, tid)
            theirs = _listed(oracle, tid)
            assert sorted(_no_ids(t) for t in ours) == sorted(_no_ids(t) for t in theirs)
            for item in ours:
                tup = saver.get_tuple({"configurable": dict(item["config"])})
                assert tup is not None and _tuple(tup) == item
        doc = saver._portal.call(saver.store.load(f"lg/{thread}#0")).data
        for nsd in doc["ns"].values():
            assert "idx" not in nsd
            # the latest checkpoint's writes, and at most a few that reached the store
            # after the next checkpoint (LangGraph stores them concurrently): those
            # stay (format 1 kept every checkpoint's, ~4 of 5 here)
            assert len(set(nsd["w"]) - {nsd["cp"]["h"][0]}) <= len(ours) // 4
        # a cold saver reads older checkpoints through the key index
        if backend != "memory":
            with StatekeeperSaver.from_url(url) as cold:
                for item in ours:
                    tup = cold.get_tuple({"configurable": dict(item["config"])})
                    assert tup is not None and _tuple(tup) == item


def _no_ids(item: dict[str, Any]) -> Any:
    """A listed checkpoint without what differs between two savers' runs (checkpoint
    ids and times, task ids, random message ids)."""
    out = json.loads(json.dumps(item))
    out.pop("config")
    out.pop("parent")
    cp = out["checkpoint"]
    for key in ("id", "ts", "channel_versions", "versions_seen"):
        cp.pop(key, None)
    out["metadata"] = {k: v for k, v in out["metadata"].items() if k in ("source", "step")}
    out["writes"] = sorted([w[1], json.dumps(w[2], sort_keys=True)] for w in out["writes"])
    return re.sub(r"id='[0-9a-f]+'", "id=_", json.dumps(out, sort_keys=True, default=str))
