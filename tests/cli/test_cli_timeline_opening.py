"""``history --timeline`` of events that start past seq 1 — a stream retention
compacted, or ``--after N`` — left out the stay the agent was in when they start: a
compacted agent in ``tool_call`` from 00:30:20 (its base's state, entered before the
base) showed its first row at 00:32:20, ``processing``, with nothing before it, as if
the agent had been in no state until then (trial of commit 0143e545). That stay is the
first row now, from the time the state was entered, its seq shown as ``≤N``."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from statekeeper import StateStore
from statekeeper.cli import app
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..conftest import FakeClock

ROW = re.compile(r"^\s*(≤?\d+)\s+(\d\d:\d\d:\d\d)\.\d{3}\s+(\w+)", re.M)
PATH = ["idle", "processing", "tool_call", "processing", "completed", "idle"]
T0 = 1_796_083_200.0  # 2026-12-01 00:00:00 UTC


def _at(hours: int) -> str:
    """T0 + ``hours`` as the CLI prints it (local time)."""
    return datetime.fromtimestamp(T0 + hours * 3600).astimezone().strftime("%H:%M:%S")


def _store(path: Path) -> str:
    """``k/a``: created idle at T0, then moves at T0+1h, +2h, +3h, +4h, +5h, each
    followed a minute later by a data-only save; ``keep_last=4`` keeps seqs 8..11."""
    url = f"sqlite:///{path}"
    clock = FakeClock(start=T0)

    async def fill() -> None:
        async with StateStore(url, clock=clock) as store:
            await store.save("k/a", {"n": 0}, fsm_state="idle")
            for i in range(1, 6):
                clock.advance(3600 if i == 1 else 3540)  # move i at T0 + i hours
                await store.save("k/a", {"n": i}, fsm_state=PATH[i])
                clock.advance(60)
                await store.save("k/a", {"n": i, "saved": True})
            report = await apply_retention(store, RetentionPolicy.parse("k keep_last=4"))
            assert [a.events_removed for a in report.actions] == [7]

    asyncio.run(fill())
    return url


def _rows(runner: CliRunner, *args: str) -> list[tuple[str, str, str]]:
    result = runner.invoke(app, ["history", "k/a", "--timeline", *args])
    assert result.exit_code == 0, result.output
    return ROW.findall(result.output)


def test_a_compacted_timeline_starts_with_the_stay_open_at_its_base(
    tmp_path: Path, runner: CliRunner
) -> None:
    url = _store(tmp_path / "store.db")
    # seq 7 (the base) is the save after the move to `processing` at 03:00 (seq 6)
    assert _rows(runner, "--db", url) == [
        ("≤7", _at(3), "processing"),  # was: missing, the strip starting at T0+4h
        ("8", _at(4), "completed"),
        ("10", _at(5), "idle"),
    ]


def test_a_timeline_after_a_seq_starts_with_the_stay_open_there(
    tmp_path: Path, runner: CliRunner
) -> None:
    url = _store(tmp_path / "store.db")
    rows = _rows(runner, "--db", url, "--after", "9")
    assert rows == [("≤9", _at(4), "completed"), ("10", _at(5), "idle")]


def test_a_timeline_in_json_loads_nothing(
    tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--json`` prints the events, not the timeline: the load of the stay open at
    the first event (only the timeline draws it) is not made. Was: one ``load`` at
    ``--after``'s seq, its result thrown away."""
    url = _store(tmp_path / "store.db")
    plain = runner.invoke(app, ["history", "k/a", "--db", url, "--after", "9", "--json"])
    assert plain.exit_code == 0, plain.output
    loads: list[object] = []
    real = StateStore.load

    async def counted(self: StateStore, *args: Any, **kwargs: Any) -> Any:
        loads.append(kwargs.get("at_seq"))
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(StateStore, "load", counted)
    args = ["history", "k/a", "--db", url, "--after", "9", "--timeline", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.output == plain.output  # (the same events)
    assert loads == []  # was: [9]
