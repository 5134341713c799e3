"""``statekeeper bench``: the seed's performance table, measured."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from statekeeper.bench import SEED_CLAIMS
from statekeeper.cli import app


def test_bench_json_rows(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STATEKEEPER_REDIS_URL", "STATEKEEPER_POSTGRES_URL", "STATEKEEPER_S3_URL"):
        monkeypatch.delenv(name, raising=False)
    result = runner.invoke(
        app,
        [
            "bench",
            "--agents",
            "2",
            "--saves",
            "3",
            "--s3",
            "off",
            "--json",
            "--only",
            "in-memory",
            "--only",
            "event",
            "--only",
            "local",
            "--only",
            "redis",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rows = {r["strategy"]: r for r in report["rows"]}
    assert sorted(rows) == ["Event Sourcing", "In-Memory", "Local (SQLite)", "Redis"]
    for name in ("In-Memory", "Event Sourcing", "Local (SQLite)"):
        row = rows[name]
        assert row["skipped"] is None
        assert row["saves"] == row["loads"] == 6
        assert 0 < row["save_p50"] <= row["save_p99"]
        assert 0 < row["load_p50"] <= row["load_p99"]
    assert rows["In-Memory"]["claim_ms"] == list(SEED_CLAIMS["In-Memory"])
    assert rows["In-Memory"]["verdict"]
    # no Redis URL given: reported as skipped, with the reason
    assert "STATEKEEPER_REDIS_URL" in rows["Redis"]["skipped"]


def test_bench_table_and_an_unreachable_server(runner: CliRunner) -> None:
    result = runner.invoke(
        app,
        [
            "bench",
            "--agents",
            "1",
            "--saves",
            "2",
            "--s3",
            "off",
            "--only",
            "in-memory",
            "--only",
            "redis",
            "--redis",
            "redis://127.0.0.1:1/0",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "In-Memory" in result.stdout and "seed's" in result.stdout
    assert "skipped" in result.stdout  # Redis on port 1 does not answer


def test_bench_unknown_strategy_is_an_error_listing_the_valid_ones(runner: CliRunner) -> None:
    result = runner.invoke(app, ["bench", "--only", "nope", "--s3", "off"])
    assert result.exit_code == 2
    assert "unknown strategy 'nope'" in result.output
    for name in ("in-memory", "redis", "postgresql", "event", "s3", "hybrid", "local"):
        assert name in result.output
