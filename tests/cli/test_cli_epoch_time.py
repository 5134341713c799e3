"""An event stored at timestamp 0 (the epoch, e.g. imported from a replayed log) has a
time: 1970-01-01T00:00:00Z, not null or "-"."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app

EPOCH = "1970-01-01T00:00:00.000000+00:00"


def _store_at_epoch(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'epoch.db'}"
    store = SyncStateStore(url, clock=lambda: 0.0)
    try:
        store.save("zero", {"n": 1})
        store.save("zero", {"n": 2})
    finally:
        store.close()
    return url


def test_history_json_gives_the_epoch_not_null(runner: CliRunner, tmp_path: Path) -> None:
    url = _store_at_epoch(tmp_path)
    result = runner.invoke(app, ["history", "zero", "--db", url, "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["time"] for e in lines] == [EPOCH, EPOCH]


def test_show_json_gives_the_epoch_not_null(runner: CliRunner, tmp_path: Path) -> None:
    url = _store_at_epoch(tmp_path)
    result = runner.invoke(app, ["show", "zero", "--db", url, "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["created_at"] == EPOCH
    assert shown["updated_at"] == EPOCH


def test_history_table_gives_a_time_not_a_dash(runner: CliRunner, tmp_path: Path) -> None:
    url = _store_at_epoch(tmp_path)
    result = runner.invoke(app, ["history", "zero", "--db", url])
    assert result.exit_code == 0, result.output
    # tables show local time: the epoch's local date (1969-12-31 west of Greenwich)
    assert datetime.fromtimestamp(0).astimezone().strftime("%Y-%m-%d") in result.output


def test_stats_json_last_update_is_the_epoch(runner: CliRunner, tmp_path: Path) -> None:
    url = _store_at_epoch(tmp_path)
    result = runner.invoke(app, ["stats", "--db", url, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["last_update"] == EPOCH
