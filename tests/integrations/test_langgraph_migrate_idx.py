"""``langgraph import`` / ``export`` keep each pending write's index (``idx``).

A node that interrupts and, resumed, returns nothing leaves its task's writes at
indexes that do not start at 0 (the branch write at 1, the interrupt and resume at
their fixed negative ones). LangGraph's ``put_writes`` numbers the writes of a call
0, 1, … by position: a copy through it renumbered them. The copy keeps the source's
indexes, and its verification compares them (``list`` does not show them).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from statekeeper.integrations.langgraph.migrate import (
    MigrationMismatch,
    export_threads,
    import_threads,
)

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .test_langgraph_migrate import _init, _lg_saver


def _approval_graph() -> StateGraph[Any]:
    """model -> approve (interrupts; resumed with "yes" it returns nothing) -> done."""

    def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"plan for {state['messages'][-1].content}")]}

    def approve(state: MessagesState) -> dict[str, Any]:
        ok = interrupt({"question": "approve?"})
        return {} if ok == "yes" else {"messages": [AIMessage(f"refused: {ok}")]}

    def done(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("done")]}

    b = StateGraph(MessagesState)
    b.add_node("model", model)
    b.add_node("approve", approve)
    b.add_node("done", done)
    b.add_edge(START, "model")
    b.add_conditional_edges("model", lambda s: "approve", ["approve"])
    b.add_edge("approve", "done")
    b.add_edge("done", END)
    return b


def _source(path: str) -> list[str]:
    threads = ["a1", "a2"]
    with _lg_saver(path) as saver:
        g = _approval_graph().compile(checkpointer=saver)
        for thread in threads:
            cfg = {"configurable": {"thread_id": thread}}
            g.invoke({"messages": [HumanMessage(thread)]}, cfg)
            g.invoke(Command(resume="yes"), cfg)
    return threads


def _rows(url: str) -> set[tuple[str, str, str, str, int, str]]:
    """Every pending write's (thread, ns, checkpoint, task, idx, channel)."""
    if url.startswith("postgresql://"):
        import psycopg

        from statekeeper.integrations.langgraph.peers import _pg_conninfo

        conninfo, schema = _pg_conninfo(url)
        with psycopg.connect(conninfo, options=f"-c search_path={schema}") as conn:
            got = conn.execute(
                "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel "
                "FROM checkpoint_writes"
            ).fetchall()
    else:
        with sqlite3.connect(url) as conn:
            got = conn.execute(
                "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel FROM writes"
            ).fetchall()
    return {(str(a), str(b), str(c), str(d), int(e), str(f)) for a, b, c, d, e, f in got}


def _gapped(rows: set[tuple[str, str, str, str, int, str]]) -> bool:
    """A task whose regular writes do not start at index 0 (what the copy renumbered)."""
    regular: dict[tuple[str, str, str, str], list[int]] = {}
    for thread, ns, cid, task, idx, _ in rows:
        if idx >= 0:
            regular.setdefault((thread, ns, cid, task), []).append(idx)
    return any(min(v) > 0 for v in regular.values())


def test_import_then_export_keeps_the_write_indexes(tmp_path: Path) -> None:
    source = str(tmp_path / "lg.sqlite")
    threads = _source(source)
    before = _rows(source)
    assert _gapped(before)  # the source has writes at 1 with none at 0
    target = _init(f"sqlite:///{tmp_path / 'sk.db'}")
    assert import_threads(source, target).threads_verified == len(threads)
    back = str(tmp_path / "back.sqlite")
    assert export_threads(target, back).threads_verified == len(threads)
    assert _rows(back) == before
    # the exported database resumes as the source does
    with _lg_saver(back) as saver:
        g = _approval_graph().compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "a1"}}
        out = g.invoke({"messages": [HumanMessage("again")]}, cfg)
        assert out["__interrupt__"]


def test_a_postgres_saver_source_keeps_its_write_indexes(tmp_path: Path) -> None:
    require_postgres()
    schema = namespace(tmp_path, "lg_idx_")
    pg = f"{POSTGRES_DSN}?schema={schema}"
    try:
        threads = _source(pg)
        before = _rows(pg)
        assert _gapped(before)
        target = _init(f"sqlite:///{tmp_path / 'sk.db'}")
        assert import_threads(pg, target).threads_verified == len(threads)
        back = str(tmp_path / "back.sqlite")
        assert export_threads(target, back).threads_verified == len(threads)
        assert _rows(back) == before
    finally:
        drop_schema(schema)


def test_the_verification_compares_write_indexes(tmp_path: Path) -> None:
    """A copy whose indexes differ from the source's is reported (by the next run,
    which finds every checkpoint present and verifies)."""
    source = str(tmp_path / "lg.sqlite")
    _source(source)
    target = _init(f"sqlite:///{tmp_path / 'sk.db'}")
    import_threads(source, target)
    back = str(tmp_path / "back.sqlite")
    export_threads(target, back)
    with sqlite3.connect(back) as conn:  # renumber a write of the copy, as before
        changed = conn.execute(
            "UPDATE writes SET idx = 0 WHERE idx = 1 AND NOT EXISTS (SELECT 1 FROM writes w "
            "WHERE w.thread_id = writes.thread_id AND w.checkpoint_ns = writes.checkpoint_ns "
            "AND w.checkpoint_id = writes.checkpoint_id AND w.task_id = writes.task_id "
            "AND w.idx = 0)"
        )
        assert changed.rowcount > 0
    with pytest.raises(MigrationMismatch, match="indexes"):
        export_threads(target, back)
