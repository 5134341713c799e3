"""A state holding typed values (Decimal, bytes, datetime, UUID, sets, a dict of the
caller's with a ``"$t"`` key) is printed and served as the JSON an export writes: each
typed value as its tagged form (trialdata). ``show``, ``show --json``,
``history --json`` and ``diff`` stopped with "internal error: TypeError: Object of type
Decimal is not JSON serializable" (exit 70), the inspector's ``/agent/state.json``
answered 500, and its pages showed bytes as a list of numbers and a datetime or UUID
as a plain string — as another value than the one stored."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app

#: what the tests of the inspector store too (tests/inspector/test_typed_values.py)
STATE = {
    "price": Decimal("1.10"),
    "blob": b"\x00\xff",
    "at": datetime(2025, 1, 1, tzinfo=UTC),
    "id": uuid.UUID(int=1),
    "tags": {"a"},
    "looks_typed": {"$t": "bytes", "v": "AA=="},
    "n": 1,
}
#: STATE as an export file holds it
TAGGED = {
    "price": {"$t": "decimal", "v": "1.10"},
    "blob": {"$t": "bytes", "v": "AP8="},
    "at": {"$t": "datetime", "v": "2025-01-01T00:00:00+00:00"},
    "id": {"$t": "uuid", "v": "00000000-0000-0000-0000-000000000001"},
    "tags": {"$t": "set", "v": ["a"]},
    "looks_typed": {"$t": "dict", "v": {"$t": "bytes", "v": "AA=="}},
    "n": 1,
}


def typed_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'typed.db'}"
    with SyncStateStore(url) as store:
        store.save("typed", STATE)
        store.save("typed", {**STATE, "n": 2.0, "price": Decimal("1.1")})
    return url


def test_show_and_history_print_typed_values_tagged(runner: CliRunner, tmp_path: Path) -> None:
    url = typed_store(tmp_path)
    result = runner.invoke(app, ["show", "typed", "--db", url, "--json", "--at", "1"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["data"] == TAGGED
    result = runner.invoke(app, ["show", "typed", "--db", url])
    assert result.exit_code == 0, result.output
    assert '"decimal"' in result.stdout and '"AP8="' in result.stdout
    result = runner.invoke(app, ["history", "typed", "--db", url, "--json"])
    assert result.exit_code == 0, result.output
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert first["ops"] == [{"op": "replace", "path": "", "value": TAGGED}]
    assert {"op": "replace", "path": "/price", "value": {"$t": "decimal", "v": "1.1"}} in (
        second["ops"]
    )


def test_diff_names_typed_values(runner: CliRunner, tmp_path: Path) -> None:
    url = typed_store(tmp_path)
    result = runner.invoke(app, ["diff", "typed", "--db", url])
    assert result.exit_code == 0, result.output
    assert '-      "v": "1.10"' in result.stdout and '+      "v": "1.1"' in result.stdout
    result = runner.invoke(app, ["diff", "typed", "--db", url, "--json"])
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    assert out["from"]["data"] == TAGGED and not out["same"]
    assert {"op": "replace", "path": "/data/n", "value": 2.0} in out["ops"]
