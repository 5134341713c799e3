"""An agent holding typed values (Decimal, bytes, datetime, set, UUID…) can be shown
(trialtime): ``show``, ``show --json``, ``history --json`` and ``diff`` stopped with
"internal error: Object of type Decimal is not JSON serializable". They print each
typed value in the tagged form the store keeps and ``export`` writes, and a dict that
holds its own ``"$t"`` key escaped, so what is printed reads back as what is stored."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app
from statekeeper.codec.types import from_plain

DATA: dict[str, Any] = {
    "price": Decimal("1.10"),
    "blob": b"\x00\xff",
    "at": datetime(2025, 1, 31, 12, tzinfo=UTC),
    "day": date(2025, 1, 31),
    "id": uuid.UUID(int=5),
    "tags": {"a"},
    "own": {"$t": "bytes", "v": "AA=="},  # a user's dict, not a tagged value
    "n": 1,
}


def _store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'typed.db'}"
    store = SyncStateStore(url)
    try:
        store.save("a", DATA)
        store.save("a", {**DATA, "price": Decimal("1.20"), "n": 1.0})
    finally:
        store.close()
    return url


def test_show_json_prints_the_stored_values(runner: CliRunner, tmp_path: Path) -> None:
    url = _store(tmp_path)
    result = runner.invoke(app, ["show", "a", "--db", url, "--json", "--at", "1"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)["data"]
    assert shown["price"] == {"$t": "decimal", "v": "1.10"}
    assert shown["own"] == {"$t": "dict", "v": {"$t": "bytes", "v": "AA=="}}
    assert from_plain(shown, None) == DATA  # read back: the values stored


def test_history_json_diff_and_show_print(runner: CliRunner, tmp_path: Path) -> None:
    url = _store(tmp_path)
    history = runner.invoke(app, ["history", "a", "--db", url, "--json"])
    assert history.exit_code == 0, history.output
    events = [json.loads(line) for line in history.stdout.splitlines()]
    changed = {op["path"]: op.get("value") for op in events[1]["ops"]}
    assert changed == {"/price": {"$t": "decimal", "v": "1.20"}, "/n": 1.0}
    diff = runner.invoke(app, ["diff", "a", "--from", "1", "--to", "2", "--db", url])
    assert diff.exit_code == 0, diff.output
    assert '-      "v": "1.10"' in diff.stdout and '+      "v": "1.20"' in diff.stdout
    assert '-    "n": 1,' in diff.stdout and '+    "n": 1.0,' in diff.stdout
    shown = runner.invoke(app, ["show", "a", "--db", url])
    assert shown.exit_code == 0, shown.output
    assert "decimal" in shown.stdout and "1.20" in shown.stdout
