"""``statekeeper stats`` and ``agents`` of a store where one agent's record is damaged:
that agent is counted (listed) as ``(damaged)``, named below the table (``damaged`` in
``--json``) and the store is not healthy; every other agent is still counted and
listed. Before: the one damaged record made the whole command fail (exit 2,
"integrity check failed"), so the store could not be summarised or listed at all."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from statekeeper import SyncStateStore

from ._subprocess import cli_in_process


def test_stats_counts_a_damaged_agent_and_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SyncStateStore(f"sqlite:///{path}") as store:
        for agent in ("a", "b", "c"):
            store.save(agent, {"n": 0}, fsm_state="idle")
            store.save(agent, {"n": 1}, fsm_state="busy")
    with sqlite3.connect(path) as db:  # flip a byte of b's last event
        db.execute(
            "UPDATE sk_events SET payload = substr(payload, 1, 20) || x'00'"
            " || substr(payload, 22) WHERE agent_id = 'b' AND seq = 2"
        )
    as_json = cli_in_process("stats", "--db", str(path), "--json")
    assert as_json.code == 0, str(as_json)
    data = json.loads(as_json.stdout)
    assert data["agents"] == 3 and data["states"] == {"busy": 2, "(damaged)": 1}
    assert data["healthy"] is False
    assert [d["agent_id"] for d in data["damaged"]] == ["b"]
    assert "checksum mismatch" in data["damaged"][0]["reason"]
    shown = cli_in_process("stats", "--db", str(path))
    assert shown.code == 0, str(shown)
    assert "1 agent(s) fail verification ('b')" in shown.stdout
    listed = cli_in_process("agents", "--db", str(path), "--json")
    assert listed.code == 0, str(listed)
    data = json.loads(listed.stdout)
    assert [(a["agent_id"], a["state"]) for a in data["agents"]] == [
        ("a", "busy"),
        ("b", None),
        ("c", "busy"),
    ]
    assert [d["agent_id"] for d in data["damaged"]] == ["b"]
    table = cli_in_process("agents", "--db", str(path))
    assert table.code == 0 and "(damaged)" in table.stdout, str(table)
