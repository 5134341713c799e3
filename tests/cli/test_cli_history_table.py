"""``history``'s table at 80 columns keeps every cell whole: a long tool or event name
folds onto more lines instead of squeezing the seq column out of the table or
cutting the other cells short with an ellipsis."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from statekeeper import StateTransition, SyncStateStore
from statekeeper.cli import app

HEADERS = ("seq", "time", "event / type", "from → to", "tool")


def _cells(output: str) -> list[list[str]]:
    """The table's rows, each cell read back across the lines it folded onto."""
    lines = output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["seq"])
    starts = [lines[header].index(name) for name in HEADERS]
    starts[0] = 0  # (seq is right-aligned under its header)
    rows: list[list[str]] = []
    for line in lines[header + 2 :]:
        if not line.strip():
            continue
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], len(line)], strict=True)]
        if cells[0]:
            rows.append(cells)
        else:  # a continuation line: folded parts of the row above
            rows[-1] = [
                f"{old} {new}".strip() if new and old.endswith("→") else old + new
                for old, new in zip(rows[-1], cells, strict=True)
            ]
    return rows


def test_a_long_tool_name_loses_no_cell_at_80_columns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tools.db'}"
    tool = "search_the_company_knowledge_base_for_recent_invoices_v2"
    with SyncStateStore(url) as store:
        agent = store.agent("worker")
        agent.transition(StateTransition.START_PROCESSING)
        agent.transition(StateTransition.CALL_TOOL, {"tool": tool})
    runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})
    result = runner.invoke(app, ["history", "worker", "--db", url])
    assert result.exit_code == 0, result.output
    assert "…" not in result.output, result.output  # nothing cut short
    rows = _cells(result.output)
    assert [(r[0], r[2], r[3], r[4]) for r in rows] == [
        ("1", "created", "→ idle", ""),
        ("2", "start_processing", "idle → processing", ""),
        ("3", "call_tool", "processing → tool_call", tool),
    ], result.output
    assert len(rows[0][1]) == len("2026-12-05 07:30:43.889")  # the whole time
