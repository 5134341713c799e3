"""At 80 columns, ``show`` and ``hold list`` print a long or non-ASCII agent id
whole, folded onto more lines, never cut short with an ellipsis: the id is what the
user copies into the next command."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app

LONG = "tenant-" + "x" * 110
WIDE = "日本語のエージェント-ü-😀"


def _folded(output: str) -> str:
    return "".join(output.split())


def _first_column(output: str, next_header: str) -> str:
    """The first column of a table, its folded lines joined (cells of other columns
    left out)."""
    lines = output.splitlines()
    header = next(i for i, line in enumerate(lines) if next_header in line)
    end = lines[header].index(next_header)
    return "".join(line[:end].strip() for line in lines[header + 2 :])


def test_long_and_wide_ids_are_never_cut(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    with SyncStateStore(url) as store:
        store.save(LONG, {"n": 1})
        store.save(WIDE, {"n": 1})
    runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})
    shown = runner.invoke(app, ["show", LONG, "--db", url])
    assert shown.exit_code == 0, shown.output
    assert "…" not in shown.output and LONG in _folded(shown.output)
    for pattern in (WIDE, LONG):
        placed = runner.invoke(app, ["hold", "add", pattern, "--reason", "case", "--db", url])
        assert placed.exit_code == 0, placed.output
    listed = runner.invoke(app, ["hold", "list", "--db", url])
    assert listed.exit_code == 0, listed.output
    assert "…" not in listed.output, listed.output
    patterns = _first_column(listed.output, "reason")
    assert WIDE in patterns and LONG in patterns, listed.output
