"""A time typed on the command line means one thing or is refused naming it
(trialtime): ``20250131`` (ISO 8601's basic date) was read as epoch seconds — a moment
in August 1970, so ``show --at-time`` said the agent did not exist yet and ``audit
--since`` listed everything — and a naive local time in a DST gap or fold was taken
as one of its readings silently."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app

# 2025-01-31T12:00:00Z
NOON = 1_738_324_800.0


@pytest.fixture
def paris(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 't.db'}"
    store = SyncStateStore(url, clock=lambda: NOON)
    try:
        store.save("a", {"n": 1})
    finally:
        store.close()
    return url


def _show(runner: CliRunner, url: str, at: str) -> tuple[int, str]:
    result = runner.invoke(app, ["show", "a", "--db", url, "--at-time", at, "--json"])
    return result.exit_code, result.output


@pytest.mark.usefixtures("paris")
@pytest.mark.parametrize(
    ("typed", "words"),
    [
        ("20250201", ["ambiguous", "2025-02-01", "epoch seconds", "1970-08-23"]),
        ("2025-03-30 02:30", ["never happened", "clocks went forward"]),
        ("2025-10-26T02:30", ["happened twice", "+02:00", "+01:00"]),
    ],
)
def test_a_time_with_two_readings_or_none_is_refused(
    runner: CliRunner, tmp_path: Path, typed: str, words: list[str]
) -> None:
    url = _store(tmp_path)
    code, output = _show(runner, url, typed)
    assert code == 2, output
    flat = " ".join(output.split())
    assert typed in flat or repr(typed) in flat
    for word in words:
        assert word in flat, (word, flat)


@pytest.mark.usefixtures("paris")
@pytest.mark.parametrize(
    "typed",
    [
        "2025-02-01",
        "2025-02-01T00:00:00+01:00",
        "2025-01-31T23:00:00Z",
        "1738364400",
        "20250201T00",
    ],
)
def test_one_reading_is_taken(runner: CliRunner, tmp_path: Path, typed: str) -> None:
    url = _store(tmp_path)
    code, output = _show(runner, url, typed)
    assert code == 0, output
    assert json.loads(output)["seq"] == 1


@pytest.mark.usefixtures("paris")
def test_audit_since_refuses_the_ambiguous_value(runner: CliRunner, tmp_path: Path) -> None:
    url = _store(tmp_path)
    result = runner.invoke(app, ["audit", "--db", url, "--since", "20250131"])
    assert result.exit_code == 2, result.output
    assert "ambiguous" in " ".join(result.output.split())
