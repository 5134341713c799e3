"""``statekeeper projections``: a failed projection shows in status (exit 1); a
rebuild of a trimmed feed says so; an interrupted rebuild resumes."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConfigurationError
from statekeeper.feed import ProjectionRunner
from statekeeper.feed.builtins import AgentStates
from statekeeper.records import FeedEvent

from ..cli._proc import sk
from ..cli._subprocess import cli_in_process, one_error_line


class _BrokenStates(AgentStates):
    def apply(self, db: sqlite3.Connection, change: FeedEvent) -> None:
        if change.seq == 2:
            raise RuntimeError("state column is full")
        super().apply(db, change)


async def _store(path: Path) -> None:
    async with StateStore(f"sqlite:///{path}") as store:
        for i in range(3):
            await store.save("ops/a", {"i": i}, fsm_state=f"s{i}")


def test_a_failed_projection_shows_in_status_and_recovers(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    asyncio.run(_store(db))

    async def fail_once() -> None:
        async with (
            StateStore(f"sqlite:///{db}") as store,
            ProjectionRunner(store, tmp_path / "s.projections.db", [_BrokenStates()]) as r,
        ):
            assert len(await r.run()) == 1

    asyncio.run(fail_once())
    status = sk("projections", "status", "--db", str(db), "--json")
    assert status.returncode == 1, status.stderr
    rows = {r["name"]: r for r in json.loads(status.stdout)}
    assert rows["agent_states"]["state"] == "failed"
    assert rows["agent_states"]["position"] == 0
    assert "RuntimeError: state column is full" in rows["agent_states"]["error"]
    assert rows["agent_states"]["error_position"] == 2
    table = sk("projections", "status", "--db", str(db), columns=200)
    assert "failed" in table.stdout and "state column is full" in table.stdout
    # the built-in handler (the fixed code) resumes at the failed event
    ran = sk("projections", "run", "agent_states", "--db", str(db))
    assert ran.returncode == 0, ran.stderr
    assert "agent_states: 3 events applied" in ran.stdout
    again = sk("projections", "status", "--db", str(db), "--json")
    assert again.returncode == 0
    assert {r["name"]: r for r in json.loads(again.stdout)}["agent_states"]["error"] is None


def test_rebuild_of_a_trimmed_feed_is_refused_with_the_way_out(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    asyncio.run(_store(db))

    async def trim() -> None:
        async with StateStore(f"sqlite:///{db}") as store:
            await store.trim_feed(2)

    asyncio.run(trim())
    run = sk("projections", "rebuild", "transitions", "--db", str(db))
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "trimmed through position 2" in run.stderr
    assert "--since-floor" in run.stderr and "backup" in run.stderr
    floor = sk("projections", "rebuild", "transitions", "--db", str(db), "--since-floor")
    assert floor.returncode == 0, floor.stderr
    seeded = sk("projections", "rebuild", "agent_states", "--db", str(db), "--json")
    assert seeded.returncode == 0, seeded.stderr
    assert json.loads(seeded.stdout)["seeded_agents"] > 0
    unknown = sk("projections", "rebuild", "nope", "--db", str(db))
    assert unknown.returncode == 2 and "no projection named 'nope'" in unknown.stderr


def test_rebuild_prints_what_it_applied(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    asyncio.run(_store(db))
    first = sk("projections", "run", "--db", str(db))
    assert first.returncode == 0, first.stderr
    rebuilt = sk("projections", "rebuild", "transitions", "--db", str(db), "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout) == {
        "projection": "transitions",
        "applied": 3,
        "seeded_agents": 0,  # (from the feed alone)
    }
    with sqlite3.connect(tmp_path / "s.projections.db") as rm:
        assert sorted(rm.execute("SELECT * FROM transitions").fetchall()) == [
            ("s0", "s1", 1),
            ("s1", "s2", 1),
        ]


def test_a_read_model_path_holding_something_else_is_refused_untouched(tmp_path: Path) -> None:
    """``--read-model`` names a file of read models: the store itself, another
    application's database or a text file are refused (exit 2) and left as they were;
    opening one would add the projections' tables to it and switch it to WAL."""
    db = tmp_path / "s.db"
    asyncio.run(_store(db))
    app = tmp_path / "app.db"
    conn = sqlite3.connect(app)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.commit()
    conn.close()
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    before = {p: p.read_bytes() for p in (db, app, notes)}
    for target, what in ((app, "another application's"), (notes, "not a SQLite"), (db, "store")):
        for command in (["run"], ["status"], ["rebuild", "agent_states"]):
            # refusals in this process (faster; the run below is a real process)
            run = cli_in_process(
                "projections", *command, "--db", str(db), "--read-model", str(target)
            )
            assert run.code == 2, str(run)
            assert f"refusing to write read models into {target}" in one_error_line(run)
            assert what in one_error_line(run)
    assert {p: p.read_bytes() for p in before} == before
    made = [p.name for p in tmp_path.iterdir() if not p.name.startswith("s.db")]
    assert sorted(made) == ["app.db", "notes.txt"]
    # its own file, made by a first run, is reopened
    own = tmp_path / "models.db"
    for _ in range(2):
        ran = sk("projections", "run", "--db", str(db), "--read-model", str(own))
        assert ran.returncode == 0, ran.stderr


async def test_the_runner_names_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n" * 100)
    async with StateStore("memory://") as store:
        with pytest.raises(ConfigurationError, match=r"cannot keep read models in .*notes\.txt"):
            await ProjectionRunner(store, notes).open()
