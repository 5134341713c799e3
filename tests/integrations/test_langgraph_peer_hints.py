"""``langgraph export`` into a statekeeper store is refused with a hint that fits the
command: it said "to copy out of statekeeper use `langgraph export`" — the command
that was running (the hint is for ``langgraph import`` given a statekeeper store as
its LangGraph source)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekeeper.cli import app

pytest.importorskip("langgraph.checkpoint.sqlite")


def _store(runner: CliRunner, path: Path) -> None:
    assert runner.invoke(app, ["init", str(path)]).exit_code == 0


def test_export_into_a_statekeeper_store_does_not_suggest_export(tmp_path: Path) -> None:
    runner = CliRunner()
    source, target = tmp_path / "source.db", tmp_path / "target.db"
    _store(runner, source)
    _store(runner, target)
    before = target.read_bytes()
    result = runner.invoke(app, ["langgraph", "export", str(source), str(target)])
    assert result.exit_code == 2, result.output
    assert "statekeeper store" in result.stderr
    assert "`langgraph export`" not in result.stderr, result.stderr
    assert "LangGraph" in result.stderr
    assert target.read_bytes() == before


def test_import_from_a_statekeeper_store_still_suggests_export(tmp_path: Path) -> None:
    runner = CliRunner()
    source, target = tmp_path / "source.db", tmp_path / "target.db"
    _store(runner, source)
    _store(runner, target)
    result = runner.invoke(app, ["langgraph", "import", str(source), str(target)])
    assert result.exit_code == 2, result.output
    assert "`langgraph export`" in result.stderr, result.stderr
