"""The history-reading observers on a store retention compacted (``keep_last``).

Before: every one of them read each agent's history from seq 1, met
``HistoryCompacted`` on the first compacted agent and gave up — ``analyze``,
``diagram --db`` and ``metrics plot`` failed for the whole store (exit 2), and
``health`` listed every compacted agent as "could not be read" (a false breach) and
no longer saw that one was stuck. They read what retention kept: the base (the state
the agent stood in, since when) and the events after it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.observability.analysis.history import moves, transition_matrices
from statekeeper.observability.analysis.series import activity_series
from statekeeper.observability.health import HealthThresholds, health_report

from ..backends._services import fresh_url
from ..cli._proc import ENGINES, sk_in_process
from ..conftest import FakeClock

# a busy → idle → busy ... cycle, 10 s a stay; the last stay in 'busy' is long
STEPS = ["idle", "busy", "idle", "busy", "idle", "busy", "idle", "busy"]


async def _fill(url: str) -> None:
    clock = FakeClock()
    clock.now = 1_000.0
    async with StateStore(url, clock=clock, snapshot_every=3) as store:
        await store.create("a", {"n": 0}, fsm_state=STEPS[0])
        for n, state in enumerate(STEPS[1:], 1):
            clock.now += 10
            await store.save("a", {"n": n})  # a write that does not move the machine
            await store.save("a", {"n": n}, fsm_state=state)
        report = await apply_retention(store, RetentionPolicy.parse("* keep_last=4"))
        assert [(x.agent_id, x.base_seq) for x in report.actions] == [("a", 11)]


@pytest.mark.parametrize("engine", ENGINES)
async def test_moves_and_health_read_from_the_retention_base(engine: str, tmp_path: Path) -> None:
    with fresh_url(engine, tmp_path) as url:
        await _fill(url)
        await _read(url)


async def _read(url: str) -> None:
    clock = FakeClock()
    clock.now = 10_000.0
    async with StateStore(url, clock=clock) as store:
        # kept: the base at seq 11 (in 'busy' since 1050), then seqs 12 (idle, 1060),
        # 13, 14 (busy, 1070), 15
        found = [(m.source, m.target, m.at, m.dwell) async for m in moves(store)]
        assert found == [("busy", "idle", 1060.0, 10.0), ("idle", "busy", 1070.0, 10.0)]
        matrix = (await transition_matrices(store))["all"]
        assert matrix.transitions == 2
        report = await health_report(store, HealthThresholds(stuck_after=3600.0), now=10_000.0)
        assert report.unreadable == [] and report.agents == 1
        assert [(s.agent_id, s.state) for s in report.stuck] == [("a", "busy")]
        assert report.stuck[0].usual_seconds is None  # one stay in 'busy' kept: no median
        series = await activity_series(store, 10.0)
        assert sum(series.events) == 4 and sum(series.transitions) == 2
        assert series.agents_by_state["busy"][-1] == 1


async def test_analyze_diagram_and_plot_of_a_compacted_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/kept.db"
    await _fill(url)
    analyzed = sk_in_process("analyze", "--db", url, "--json")
    assert analyzed.returncode == 0, analyzed.stderr
    found = json.loads(analyzed.stdout)
    assert found["matrices"]["all"]["transitions"] == 2 and found["compacted"] == ["a"]
    said = sk_in_process("analyze", "--db", url, columns=200)
    assert "1 agent(s) read from their retention base" in said.stdout, said.stdout
    drawn = sk_in_process("diagram", "--db", url)
    assert drawn.returncode == 0, drawn.stderr
    assert "observed: 1 agent(s), 4 event(s)" in drawn.stdout
    plotted = sk_in_process("metrics", "plot", "--db", url, "--out", str(tmp_path / "p.svg"))
    assert plotted.returncode == 0, plotted.stderr
    assert "4 events, 2 transitions" in plotted.stdout
