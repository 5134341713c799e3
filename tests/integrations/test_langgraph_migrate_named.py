"""``langgraph import`` / ``export`` with ``--thread`` naming a thread the source does
not hold (a mistyped id): the command names it and fails (``ThreadNotFound``, exit 1,
as ``langgraph prune --thread`` does), with nothing copied — not even the threads
named with it. Before, it reported "copied 0 checkpoint(s) … in 0 thread(s)" and
"verified" with exit code 0, and copied the other named threads."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app
from statekeeper.integrations.langgraph import StatekeeperSaver, ThreadNotFound
from statekeeper.integrations.langgraph.migrate import export_threads, import_threads


def chat() -> StateGraph[Any]:
    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("hello", id=f"ai-{len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder


def test_a_named_thread_the_source_lacks_fails_the_move(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("STATEKEEPER_URL", "STATEKEEPER_KEY_FILE", "STATEKEEPER_KEYS"):
        monkeypatch.delenv(name, raising=False)
    peer = tmp_path / "langgraph.sqlite"
    url = f"sqlite:///{tmp_path}/agents.db"
    SyncStateStore(url).close()
    conn = sqlite3.connect(peer, check_same_thread=False)
    try:
        graph = chat().compile(checkpointer=SqliteSaver(conn))
        graph.invoke(
            {"messages": [HumanMessage("hi", id="h")]}, {"configurable": {"thread_id": "t1"}}
        )
    finally:
        conn.close()

    runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})
    result = runner.invoke(
        app, ["langgraph", "import", str(peer), url, "--thread", "t1", "--thread", "t-typo"]
    )
    assert result.exit_code == 1, result.output
    assert "'t-typo' not found" in result.output and "nothing was copied" in result.output
    with StatekeeperSaver.from_url(url) as saver:
        assert list(saver.list(None)) == []  # t1 was not copied either

    with pytest.raises(ThreadNotFound) as info:
        import_threads(str(peer), url, thread_ids=["t-typo"], dry_run=True)
    assert info.value.thread_id == "t-typo"

    assert import_threads(str(peer), url).threads_verified == 1
    with pytest.raises(ThreadNotFound):
        export_threads(url, str(tmp_path / "back.sqlite"), thread_ids=["t1", "t-typo"])
    result = runner.invoke(
        app, ["langgraph", "export", url, str(tmp_path / "back.sqlite"), "--thread", "t-typo"]
    )
    assert result.exit_code == 1, result.output
    assert "'t-typo' not found" in result.output


def test_an_export_that_names_a_missing_thread_creates_no_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The missing thread is found before the target is opened: a new SQLite file is
    not left behind set up empty (it was created, then the check failed), and a file
    that was there is not touched."""
    for name in ("STATEKEEPER_URL", "STATEKEEPER_KEY_FILE", "STATEKEEPER_KEYS"):
        monkeypatch.delenv(name, raising=False)
    url = f"sqlite:///{tmp_path}/agents.db"
    with StatekeeperSaver.from_url(url) as saver:
        chat().compile(checkpointer=saver).invoke(
            {"messages": [HumanMessage("hi", id="h")]}, {"configurable": {"thread_id": "t1"}}
        )
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ThreadNotFound):
        export_threads(url, str(out / "new.sqlite"), thread_ids=["t1", "t-typo"])
    assert sorted(p.name for p in out.iterdir()) == []

    runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})
    target = out / "cli.sqlite"
    result = runner.invoke(app, ["langgraph", "export", url, str(target), "--thread", "t-typo"])
    assert result.exit_code == 1, result.output
    assert "'t-typo' not found" in result.output
    assert sorted(p.name for p in out.iterdir()) == []

    kept = out / "kept.sqlite"
    kept.write_bytes(b"")  # an empty file the user made: an export target to set up
    before = kept.stat()
    result = runner.invoke(app, ["langgraph", "export", url, str(kept), "--thread", "t-typo"])
    assert result.exit_code == 1, result.output
    after = kept.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert sorted(p.name for p in out.iterdir()) == ["kept.sqlite"]
