"""``statekeeper import`` into a store whose engine refuses one of the file's events as
too large (over its limit: an event a store on another engine held) exits 2 with
:class:`~statekeeper.errors.StateTooLarge`'s message, and leaves the agent absent.
The import writes an agent event by event, so before, the events before the refused
one stayed: an agent at seq 5 of the file's 7 that listed, loaded and verified as
whole. Now the agent it created is deleted again (only while its head is the one the
import wrote), as after a failed read-back, and the message says so. The target's
SQLite length limit is lowered on its connections here, so the test writes 1.5 MB."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from tests.cli._proc import sk_in_process

LIMIT = 1_000_000


async def _source(url: str) -> None:
    async with StateStore(url) as store:
        agent = await store.agent("steps")
        for i in range(3):
            agent.data[f"s{i}"] = i
            await agent.save()
        agent.data["big"] = "b" * (LIMIT + LIMIT // 2)  # over the target's limit
        await agent.save()
        agent.data["after"] = 1
        await agent.save()
        await store.save("small", {"x": 1})


async def _heads(url: str) -> dict[str, int]:
    async with StateStore(url) as store:
        return {a: await store.head(a) for a in ("steps", "small")}


def test_an_event_the_target_refuses_leaves_the_agent_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    asyncio.run(_source(source))
    out = tmp_path / "agents.jsonl"
    assert sk_in_process("export", "--db", source, "-o", str(out)).returncode == 0
    assert sk_in_process("init", target).returncode == 0
    connect = SQLiteBackend._connect

    def limited(self: SQLiteBackend) -> sqlite3.Connection:
        conn = connect(self)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LIMIT)
        return conn

    monkeypatch.setattr(SQLiteBackend, "_connect", limited)
    imported = sk_in_process("import", str(out), "--db", target)
    assert imported.returncode == 2, imported.stderr
    assert "SQLITE_LIMIT_LENGTH limit of 1,000,000 bytes" in imported.stderr
    assert "'steps' written up to seq 4 of the file's 6 was deleted again" in imported.stderr
    monkeypatch.undo()
    assert asyncio.run(_heads(target))["steps"] == 0  # not its first 4 events


def test_a_write_by_another_process_meanwhile_is_not_deleted_with_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent was deleted at the head and head event read after the refusal: an
    event another process appended between the refusal and that read (acknowledged to
    it) was deleted with the import's part. It is kept now (deleted only at the last
    event the import wrote), and the message says the agent was left."""
    from statekeeper.cli import transfer

    source, target = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    asyncio.run(_source(source))
    out = tmp_path / "agents.jsonl"
    assert sk_in_process("export", "--db", source, "-o", str(out)).returncode == 0
    assert sk_in_process("init", target).returncode == 0
    connect = SQLiteBackend._connect

    def limited(self: SQLiteBackend) -> sqlite3.Connection:
        conn = connect(self)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LIMIT)
        return conn

    write = vars(transfer)["_write"]

    async def then_another_process(store: StateStore, agent: object, *args: object) -> None:
        try:
            await write(store, agent, *args)  # type: ignore[arg-type]
        except Exception:
            if getattr(agent, "agent_id", None) == "steps":
                async with StateStore(target) as other:  # its save is acknowledged
                    await other.save("steps", {"theirs": True})
            raise

    monkeypatch.setattr(SQLiteBackend, "_connect", limited)
    monkeypatch.setattr(transfer, "_write", then_another_process)
    imported = sk_in_process("import", str(out), "--db", target)
    monkeypatch.undo()
    assert imported.returncode == 2, imported.stderr
    assert "deleting it again failed" in imported.stderr, imported.stderr

    async def theirs() -> object:
        async with StateStore(target) as store:
            return (await store.load("steps")).data.get("theirs")

    assert asyncio.run(theirs()) is True
