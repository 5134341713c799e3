"""``verify`` names each hand edit of a SQLite store's rows, also those that leave every
remaining record intact: a stream whose head row is gone while its records stay (the
agent vanishes from every listing and read) is a stream that went back in time, as the
store's automatic witness says when it holds a mark of it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from statekeeper.cli import app


def _edit(db: Path, *statements: str) -> None:
    with sqlite3.connect(db) as conn:
        for statement in statements:
            conn.execute(statement)
    conn.close()


def _verify(runner: CliRunner, url: str) -> tuple[int, list[tuple[str, int | None, str]]]:
    result = runner.invoke(app, ["verify", "--db", url, "--json"])
    report = json.loads(result.stdout)
    return result.exit_code, [(p["agent_id"], p["seq"], p["reason"]) for p in report["problems"]]


def test_verify_names_an_agent_whose_head_row_was_deleted(
    runner: CliRunner, db: Path, url: str
) -> None:
    assert Path(f"{db}.sk-witness").exists()  # the automatic witness holds alpha at seq 4
    _edit(db, "DELETE FROM sk_agents WHERE agent_id = 'alpha'")
    # the agent is gone for every read (its 4 events are still in the file)
    shown = runner.invoke(app, ["show", "alpha", "--db", url])
    assert shown.exit_code == 1 and "not found" in shown.output
    code, problems = _verify(runner, url)
    assert code == 1, problems
    # the witness says the stream went back in time; the events left behind are
    # named too (found with or without a witness: tests/store/test_verify_orphans.py)
    assert [(agent, seq) for agent, seq, _ in problems] == [("alpha", 4), ("alpha", 1)]
    assert "the agent is gone" in problems[0][2]
    assert "4 event(s), seq 1..4, stored without a head row" in problems[1][2]


def test_verify_names_a_head_moved_back_over_records_kept(
    runner: CliRunner, db: Path, url: str
) -> None:
    # the head row says seq 2 with the tag of seq 2 unknown: the head check and the
    # witness both name it; a head row lowered alone must not pass either
    _edit(db, "UPDATE sk_agents SET head_seq = 2 WHERE agent_id = 'alpha'")
    code, problems = _verify(runner, url)
    assert code == 1, problems
    assert {agent for agent, _, _ in problems} == {"alpha"}


def test_repair_does_not_call_a_store_with_a_vanished_agent_repaired(
    runner: CliRunner, db: Path, url: str
) -> None:
    _edit(db, "DELETE FROM sk_agents WHERE agent_id = 'alpha'")
    result = runner.invoke(app, ["repair", "--db", url, "--json"])
    assert result.exit_code == 3, result.output  # problems repair cannot fix
    report = json.loads(result.stdout)
    assert [(p["agent_id"], p["seq"]) for p in report["unrepairable"]] == [("alpha", 4)]
