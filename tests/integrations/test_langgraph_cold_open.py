"""A new saver's first read of a thread (issue 12: a cold ``get_tuple`` of the latest
checkpoint at SqliteSaver's cost): the thread's stream found in one store read, what a
store checks on its first use checked by it, and what it reads equal to what the saver
that wrote the thread reads — in this process and in a new one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

import statekeeper
from statekeeper.errors import RollbackDetected
from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import new_thread
from .test_langgraph_write_cost import _counting


def _chat(saver: StatekeeperSaver, thread: str, turns: int) -> None:
    def reply(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"reply {n} " + "x" * 200, id=f"ai-{n}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    graph = builder.compile(checkpointer=saver)
    cfg: Any = {"configurable": {"thread_id": thread}}
    for turn in range(turns):  # the human messages get their ids from add_messages
        graph.invoke({"messages": [HumanMessage(f"hi {turn} " + "y" * 200)]}, cfg)


def _latest(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _summary(found: Any) -> dict[str, Any]:
    """What a read returned, as JSON (comparable across processes)."""
    cp = found.checkpoint
    return {
        "config": found.config,
        "parent": found.parent_config,
        "id": cp["id"],
        "versions": cp["channel_versions"],
        "seen": cp["versions_seen"],
        "metadata": found.metadata,
        "messages": [[type(m).__name__, m.id, m.content] for m in cp["channel_values"]["messages"]],
        "writes": [list(w) for w in found.pending_writes or []],
    }


def test_a_new_savers_read_of_a_thread_is_one_store_read(tmp_path: Path) -> None:
    """A thread never compacted is found by reading its base generation: one store
    read, no listing of the thread's generations first (a cold read was a listing and a
    read). A thread that is not there is that read and the listing."""
    url = f"sqlite:///{tmp_path}/one.db"
    thread = new_thread()
    with StatekeeperSaver.from_url(url) as saver:
        _chat(saver, thread, 3)
    with StatekeeperSaver.from_url(url) as saver:
        counts = _counting(saver, "list_agents", "get", "load", "head")
        found = saver.get_tuple(_latest(thread))
        assert found is not None and len(found.checkpoint["channel_values"]["messages"]) == 6
        assert counts == {"get": 1}
        counts.clear()
        assert saver.get_tuple(_latest(new_thread())) is None
        assert counts == {"get": 1, "list_agents": 1}


def test_a_thread_a_rollback_removed_is_refused_not_read_as_absent(tmp_path: Path) -> None:
    """The file put back to a copy taken before the thread was written (its witness
    kept): a new saver's read of the thread raises ``RollbackDetected``, as a read of
    any thread of that store does; it read as absent (``None``, an empty history),
    since finding a thread only listed the store's agents, which checks no witness."""
    db = tmp_path / "rb.db"
    url = f"sqlite:///{db}"
    thread = new_thread()
    with StatekeeperSaver.from_url(url) as saver:
        _chat(saver, new_thread(), 1)
    copies = {s: tmp_path / f"copy{s}" for s in ("", "-wal", "-shm")}
    for suffix, copy in copies.items():
        if Path(f"{db}{suffix}").exists():
            shutil.copy(f"{db}{suffix}", copy)
    with StatekeeperSaver.from_url(url) as saver:
        _chat(saver, thread, 1)
    for suffix, copy in copies.items():
        target = Path(f"{db}{suffix}")
        if copy.exists():
            shutil.copy(copy, target)
        elif target.exists():
            target.unlink()
    with StatekeeperSaver.from_url(url) as saver, pytest.raises(RollbackDetected):
        saver.get_tuple(_latest(thread))
    with StatekeeperSaver.from_url(url) as saver, pytest.raises(RollbackDetected):
        list(saver.list({"configurable": {"thread_id": thread}}))


def test_a_compacted_thread_reads_the_same_cold(tmp_path: Path) -> None:
    """A pruned thread lives in a newer generation (its base one deleted): a new
    saver finds it by the listing and reads what the saver that pruned it reads."""
    url = f"sqlite:///{tmp_path}/pruned.db"
    thread = new_thread()
    with StatekeeperSaver.from_url(url) as saver:
        _chat(saver, thread, 3)
        saver.prune([thread], strategy="keep_latest")
        warm = saver.get_tuple(_latest(thread))
        assert warm is not None
    with StatekeeperSaver.from_url(url) as saver:
        cold = saver.get_tuple(_latest(thread))
        assert cold is not None
        assert _summary(cold) == _summary(warm)
        assert len(list(saver.list({"configurable": {"thread_id": thread}}))) == 1


_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[3])
from tests.integrations.test_langgraph_cold_open import _latest, _summary
from statekeeper.integrations.langgraph import StatekeeperSaver
with StatekeeperSaver.from_url(sys.argv[1]) as saver:
    found = saver.get_tuple(_latest(sys.argv[2]))
    print(json.dumps(_summary(found)))
"""


def test_a_cold_read_in_a_new_process_equals_the_warm_one(tmp_path: Path) -> None:
    """What the saver that wrote a chat reads of its latest checkpoint is what a new
    process reads of it: the same checkpoint, metadata, parent and pending writes, and
    the same messages with the same ids (those add_messages gave them included)."""
    url = f"sqlite:///{tmp_path}/restart.db"
    thread = new_thread()
    with StatekeeperSaver.from_url(url) as saver:
        _chat(saver, thread, 4)
        warm = saver.get_tuple(_latest(thread))
        assert warm is not None
        again = saver.get_tuple(_latest(thread))
    with StatekeeperSaver.from_url(url) as saver:
        cold = saver.get_tuple(_latest(thread))
    src = str(Path(statekeeper.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, url, thread, str(Path(__file__).parents[2])],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    expected = json.loads(json.dumps(_summary(warm)))
    assert json.loads(child.stdout) == expected
    assert json.loads(json.dumps(_summary(cold))) == expected
    assert json.loads(json.dumps(_summary(again))) == expected
    ids = [m[1] for m in expected["messages"]]
    assert len(ids) == 8 and None not in ids and len(set(ids)) == 8


def test_a_cold_read_hands_the_saver_the_stores_document_unserialised(tmp_path: Path) -> None:
    """A new saver's read of a thread takes the store's folded document itself (the
    saver changes documents copy-on-write only): the store serialises no copy of it
    (it wrote the document's JSON out on every cold read), and a later write by another
    saver, folded into the store's record, leaves the document the first saver holds
    as it was."""
    url = f"sqlite:///{tmp_path}/shared.db"
    thread = new_thread()
    with StatekeeperSaver.from_url(url) as saver:
        _chat(saver, thread, 2)
    with StatekeeperSaver.from_url(url) as reader, StatekeeperSaver.from_url(url) as writer:
        before = _summary(reader.get_tuple(_latest(thread)))
        st = reader._streams[thread]
        record = reader.store._reads.cache.peek(st.agent_id)
        assert record is not None and record.blob is None and record.data is st.doc
        held = json.dumps(st.doc, sort_keys=True)
        _chat(writer, thread, 1)
        after = _summary(reader.get_tuple(_latest(thread)))
        assert after == _summary(writer.get_tuple(_latest(thread)))
        assert len(after["messages"]) == len(before["messages"]) + 2
        assert json.dumps(st.doc, sort_keys=True) == held  # the old document untouched


def test_a_new_savers_first_read_starts_no_thread_and_checks_the_witness_in_one_query(
    tmp_path: Path,
) -> None:
    """The store's first-use witness check on a new saver's first read reads the
    witness file on the event loop (it started the loop's executor thread for a few
    hundred bytes) and checks each mark with one query when its record is there (its
    head was read first)."""
    url = f"sqlite:///{tmp_path}/threads.db"
    thread = new_thread()
    with StatekeeperSaver.from_url(url) as saver:
        _chat(saver, thread, 1)
    with StatekeeperSaver.from_url(url) as saver:
        calls: list[str] = []
        backend = saver.store.backend
        for name in ("head", "read"):
            method = getattr(backend, name)

            def counted(*a: Any, _name: str = name, _method: Any = method, **k: Any) -> Any:
                calls.append(_name)
                return _method(*a, **k)

            setattr(backend, name, counted)
        running = {t.ident for t in threading.enumerate()}
        assert saver.get_tuple(_latest(thread)) is not None
        assert {t.ident for t in threading.enumerate()} - running == set()
        assert calls == ["read"]  # the witness's mark of the thread: its record only


def test_a_saver_that_only_reads_starts_no_loop_thread_until_it_writes(tmp_path: Path) -> None:
    """The saver's loop thread (timers, async callers, background flushes) is started
    by the first work it has to do, not by opening the saver: reads alone never start
    it; a graph run (its claim's renewal timer) does, and closing stops it."""
    url = f"sqlite:///{tmp_path}/lazy.db"
    thread = new_thread()
    with StatekeeperSaver.from_url(url) as saver:
        _chat(saver, thread, 1)
    with StatekeeperSaver.from_url(url) as saver:
        loop_thread = saver._portal._thread  # type: ignore[union-attr]
        assert saver.get_tuple(_latest(new_thread())) is None
        assert saver.get_tuple(_latest(thread)) is not None
        assert len(list(saver.list({"configurable": {"thread_id": thread}}))) > 0
        assert not loop_thread.is_alive()
        _chat(saver, thread, 1)
        assert loop_thread.is_alive()
    assert not loop_thread.is_alive()


def test_opening_a_saver_on_an_existing_file_and_reading_starts_no_thread(
    tmp_path: Path,
) -> None:
    """A new saver on a store file that is there (the goals benchmark's "cold"): its
    SQLite backend checks the file's schema on the opening thread, and its writer
    thread is started by the first write handed to it, not by the open (the opening
    thread waited for the writer thread to start and do it). Opening, reading a thread
    that is not there and the chat's latest checkpoint, and closing start no thread;
    a write made later starts it, and the write is read back by the next saver."""
    url = f"sqlite:///{tmp_path}/cold.db"
    thread = new_thread()
    with StatekeeperSaver.from_url(url) as saver:
        _chat(saver, thread, 2)
    before = {t.ident for t in threading.enumerate()}
    with StatekeeperSaver.from_url(url) as saver:
        assert saver.get_tuple(_latest(new_thread())) is None
        found = saver.get_tuple(_latest(thread))
        assert found is not None and len(found.checkpoint["channel_values"]["messages"]) == 4
        assert {t.ident for t in threading.enumerate()} - before == set()
    assert {t.ident for t in threading.enumerate()} - before == set()
    with StatekeeperSaver.from_url(url) as saver:
        _chat(saver, thread, 1)  # writes: the writer's connection opened at the start
    with StatekeeperSaver.from_url(url) as saver:
        found = saver.get_tuple(_latest(thread))
        assert found is not None and len(found.checkpoint["channel_values"]["messages"]) == 6
