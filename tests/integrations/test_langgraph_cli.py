"""``statekeeper langgraph prune``: retention from the command line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from statekeeper.cli import app
from statekeeper.cli.langgraph import parse_duration
from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import Api, Chain, config


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("STATEKEEPER_URL", raising=False)
    return CliRunner(env={"COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb"})


async def _populate(url: str) -> tuple[str, str]:
    with StatekeeperSaver.from_url(url) as saver:
        a, b = Chain(Api(saver, "sync")), Chain(Api(saver, "sync"))
        for i in range(5):
            await a.step({"i": i})
        await b.step({"i": 0})
        return a.thread_id, b.thread_id


async def test_prune_keep_last(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/lg.db"
    a, b = await _populate(url)
    dry = runner.invoke(
        app, ["langgraph", "prune", "--db", url, "--keep-last", "2", "--dry-run", "--json"]
    )
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output)["checkpoints_deleted"] == 3
    done = runner.invoke(app, ["--db", url, "langgraph", "prune", "--keep-last", "2"])
    assert done.exit_code == 0, done.output
    assert "removed 3 checkpoint(s)" in done.output
    with StatekeeperSaver.from_url(url) as saver:
        assert len(list(saver.list(config(a)))) == 2
        assert len(list(saver.list(config(b)))) == 1


async def test_prune_ttl_one_thread(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/lg.db"
    a, b = await _populate(url)
    await asyncio.sleep(1.1)
    out = runner.invoke(
        app, ["langgraph", "prune", "--db", url, "--ttl", "1s", "--thread", a, "--json"]
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["threads_deleted"] == 1
    with StatekeeperSaver.from_url(url) as saver:
        assert saver.get_tuple(config(a)) is None
        assert saver.get_tuple(config(b)) is not None


def test_prune_usage_errors(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/missing.db"
    assert (
        runner.invoke(app, ["langgraph", "prune", "--db", url, "--keep-last", "1"]).exit_code == 2
    )
    assert runner.invoke(app, ["langgraph", "prune", "--db", url]).exit_code == 2
    bad = runner.invoke(app, ["langgraph", "prune", "--db", url, "--ttl", "soon"])
    assert bad.exit_code == 2


def test_parse_duration() -> None:
    assert parse_duration("90") == 90
    assert parse_duration("15m") == 900
    assert parse_duration("1.5h") == 5400
    assert parse_duration("30d") == 30 * 86400
    assert parse_duration("2w") == 14 * 86400
    with pytest.raises(typer.BadParameter):
        parse_duration("3 fortnights")
