"""``statekeeper verify`` of a whole store checks its agents a page at a time: the
witness file is read and its marks sorted once a page, not once an agent (once an agent
cost O(agents x marks): ~13 ms an agent at 1,000 marks, hours at 10^6 agents). The
counts are compared for N and 2N agents, no timing; and the findings stay each agent's,
in the order a verify of each agent alone gives."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app
from statekeeper.security.highwater import HighWater
from statekeeper.store import verification


def _store(path: Path, agents: int) -> str:
    url = f"sqlite:///{path}"
    with SyncStateStore(url) as store:
        for i in range(agents):
            store.create(f"a{i:03d}", {"n": 0})
            store.save(f"a{i:03d}", {"n": 1})
    assert Path(f"{path}.sk-witness").exists()
    return url


def _counted(monkeypatch: pytest.MonkeyPatch, runner: CliRunner, url: str) -> dict[str, int]:
    counts = {"load": 0, "marks": 0}
    load, marks = HighWater.load, HighWater.marks

    def counted_load(self: HighWater) -> None:
        counts["load"] += 1
        load(self)

    def counted_marks(self: HighWater, *args: object) -> list[dict[str, object]]:
        counts["marks"] += 1
        return marks(self, *args)  # type: ignore[arg-type]

    with monkeypatch.context() as patched:
        patched.setattr(HighWater, "load", counted_load)
        patched.setattr(HighWater, "marks", counted_marks)
        result = runner.invoke(app, ["verify", "--db", url, "--json"])
    assert result.exit_code == 0, result.output
    return counts


def test_verify_reads_the_witness_once_a_page_not_once_an_agent(
    monkeypatch: pytest.MonkeyPatch, runner: CliRunner, tmp_path: Path
) -> None:
    few = _counted(monkeypatch, runner, _store(tmp_path / "few.db", 8))
    more = _counted(monkeypatch, runner, _store(tmp_path / "more.db", 16))
    assert few["load"] >= 1 and few["marks"] >= 1  # the witness is checked
    assert more == few  # both within one page: nothing grows with the agents


def test_verify_by_pages_reports_each_agents_findings_in_agent_order(
    monkeypatch: pytest.MonkeyPatch, runner: CliRunner, tmp_path: Path
) -> None:
    path = tmp_path / "store.db"
    url = _store(path, 5)
    with sqlite3.connect(path) as conn:  # a001 and a003 rolled back (head row lowered)
        conn.execute("UPDATE sk_agents SET head_seq = 1 WHERE agent_id IN ('a001', 'a003')")
    conn.close()

    def found(page: int) -> list[tuple[str, int | None, str]]:
        with monkeypatch.context() as patched:
            patched.setattr(verification, "VERIFY_PAGE", page)
            result = runner.invoke(app, ["verify", "--db", url, "--json"])
        assert result.exit_code == 1, result.output
        problems = json.loads(result.stdout)["problems"]
        return [(p["agent_id"], p["seq"], p["reason"]) for p in problems]

    alone = found(1)  # each agent verified alone: what verify did before pages
    assert [agent for agent, _, _ in alone] == sorted(agent for agent, _, _ in alone)
    assert {agent for agent, _, _ in alone} == {"a001", "a003"}
    assert any("acknowledged" in reason for _, _, reason in alone)  # the witness's
    assert found(2) == alone
    assert found(256) == alone
