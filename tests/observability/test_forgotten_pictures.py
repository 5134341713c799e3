"""``diagram --db`` and ``metrics plot`` of a store holding an agent crypto-shredded by
``forget``: the agent is passed over and named, as ``analyze`` and ``health`` do.
Before: both read its history, met ``AgentForgotten`` and failed for the whole store
(exit 2, "agent 'b' was forgotten")."""

from __future__ import annotations

import json
from pathlib import Path

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.governance.shredding import forget
from statekeeper.observability.analysis.series import activity_series

from ..cli._proc import sk_in_process


def _key_file(folder: Path) -> Path:
    path = folder / "keys.json"
    Keyring.write_file(path, {"k1": generate_key()}, "k1", data_keys="vault.db")
    return path


async def _fill(url: str, keys: Path) -> None:
    clock = [1_000.0]
    async with StateStore(url, keyring=Keyring.from_file(keys), clock=lambda: clock[0]) as store:
        for agent_id in ("a", "b", "c"):
            await store.create(agent_id, {"n": 0}, fsm_state="idle")
            clock[0] += 10
            await store.save(agent_id, {"n": 1}, fsm_state="processing")
        await forget(store, "b")


async def test_diagram_and_plot_pass_over_a_forgotten_agent(tmp_path: Path) -> None:
    keys = _key_file(tmp_path)
    url = f"sqlite:///{tmp_path}/s.db"
    await _fill(url, keys)
    drawn = sk_in_process("diagram", "--db", url, "--key-file", str(keys), columns=200)
    assert drawn.returncode == 0, drawn.stderr
    assert "observed: 2 agent(s), 4 event(s)" in drawn.stdout
    assert "left out 1 forgotten agent(s) (their data keys are destroyed): b" in drawn.stdout
    out = tmp_path / "p.svg"
    plotted = sk_in_process(
        "metrics", "plot", "--db", url, "--key-file", str(keys), "--out", str(out), "--json"
    )
    assert plotted.returncode == 0, plotted.stderr
    shown = json.loads(plotted.stdout)
    assert shown["forgotten"] == ["b"] and sum(shown["events"]) == 4
    async with StateStore(url, keyring=Keyring.from_file(keys)) as store:
        forgotten: list[str] = []
        series = await activity_series(store, 10.0, forgotten=forgotten)
        assert forgotten == ["b"]
        assert sum(series.events) == 4 and sum(series.transitions) == 2
