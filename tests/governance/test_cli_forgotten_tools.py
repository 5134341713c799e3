"""A crypto-shredded agent (``forget``) in the store-wide tools (issue 15): ``tail``,
``analyze``, ``health`` and ``import`` pass over it and name it as forgotten, as
``export``, ``stats`` and ``verify`` do, instead of failing the whole command."""

from __future__ import annotations

import json
from pathlib import Path

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.governance.shredding import forget
from statekeeper.observability.analysis.consistency import consistency_score
from statekeeper.observability.analysis.history import state_distribution, transition_matrices
from statekeeper.observability.analysis.recovery import measure_recovery, measure_snapshot_cost
from tests.keyfiles import write_key_file

from ..cli._subprocess import cli_in_process


def _key_file(folder: Path) -> Path:
    path = folder / "keys.json"
    write_key_file(path, {"active": "k1", "keys": {"k1": generate_key()}, "data_keys": "vault.db"})
    return path


async def _store_with_a_forgotten_agent(folder: Path) -> tuple[Path, Path]:
    keys = _key_file(folder)
    db = folder / "s.db"
    async with StateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys)) as store:
        for agent in ("acme/gone", "acme/kept"):
            await store.create(agent, {"n": 0}, fsm_state="idle")
            for n, (src, dst) in enumerate([("idle", "busy"), ("busy", "idle")], start=1):
                await store.append(
                    agent,
                    "transition",
                    {"event": "go", "from": src, "to": dst},
                    ops=[{"op": "replace", "path": "/n", "value": n}],
                    fsm_state=dst,
                )
    return db, keys


async def test_the_store_wide_tools_pass_over_a_forgotten_agent(tmp_path: Path) -> None:
    db, keys = await _store_with_a_forgotten_agent(tmp_path)
    common = ["--db", str(db), "--key-file", str(keys)]
    exported = cli_in_process("export", "-o", str(tmp_path / "before.jsonl"), *common)
    assert exported.code == 0, str(exported)
    async with StateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys)) as store:
        await forget(store, "acme/gone")
    tailed = cli_in_process("tail", "--json", *common)
    assert tailed.code == 0, str(tailed)
    assert {json.loads(line)["agent_id"] for line in tailed.stdout.splitlines()} == {"acme/kept"}
    assert "left out 1 forgotten agent(s)" in tailed.stderr and "acme/gone" in tailed.stderr
    alone = cli_in_process("tail", "acme/gone", *common)  # one agent: refused, as by show
    assert alone.code == 2 and "forgotten" in alone.stderr
    analyzed = cli_in_process("analyze", "--json", "--consistency", "--rto", "60", *common)
    assert analyzed.code == 0, str(analyzed)
    result = json.loads(analyzed.stdout)
    assert result["forgotten"] == ["acme/gone"]
    assert result["states"]["agents"] == {"idle": 1}
    assert result["matrices"]["all"]["counts"] != []
    assert result["consistency"]["agents"] == 1
    assert result["consistency"]["forgotten"] == ["acme/gone"]
    shown = cli_in_process("analyze", *common)
    assert shown.code == 0 and "left out 1 forgotten agent(s)" in shown.stdout
    health = cli_in_process("health", "--json", *common)
    assert health.code == 0, str(health)  # a forgotten agent is no breach
    assert json.loads(health.stdout)["forgotten"] == ["acme/gone"]
    witnessed = cli_in_process("witness", "export", str(tmp_path / "w.json"), "--json", *common)
    assert witnessed.code == 0, str(witnessed)
    assert json.loads(witnessed.stdout)["agents"] == 1
    assert json.loads(witnessed.stdout)["forgotten"] == ["acme/gone"]
    checked = cli_in_process("witness", "check", str(tmp_path / "w.json"), *common)
    assert checked.code == 0, str(checked)
    # an export taken before the forget, imported where the vault keeps the tombstone
    target = tmp_path / "t.db"
    assert cli_in_process("init", f"sqlite:///{target}").code == 0
    imported = cli_in_process(
        "import", str(tmp_path / "before.jsonl"), "--json", "--db", str(target),
        "--key-file", str(keys),
    )  # fmt: skip
    assert imported.code == 0, str(imported)
    out = json.loads(imported.stdout)
    assert out["agents"] == 1 and out["forgotten"] == ["acme/gone"]
    again = cli_in_process("import", str(tmp_path / "before.jsonl"), "--skip-existing", *common)
    assert again.code == 0, str(again)
    assert "skipped 2 existing agent(s)" in again.stdout


async def test_the_analysis_functions_name_the_forgotten_agents(tmp_path: Path) -> None:
    db, keys = await _store_with_a_forgotten_agent(tmp_path)
    url = f"sqlite:///{db}"
    async with StateStore(url, keyring=Keyring.from_file(keys)) as store:
        await forget(store, "acme/gone")
        gone: list[str] = []
        matrices = await transition_matrices(store, forgotten=gone)
        assert gone == ["acme/gone"] and matrices["all"].states == ("busy", "idle")
        gone.clear()
        assert await state_distribution(store, forgotten=gone) == {"idle": 1}
        assert gone == ["acme/gone"]
        assert (await consistency_score(store)).score == 1.0
        assert await measure_snapshot_cost(store) > 0
    report = await measure_recovery(url, keyring=Keyring.from_file(keys), objective=60)
    assert [s.agent_id for s in report.samples] == ["acme/kept"]
    assert [p[0] for p in report.predicted] == ["acme/kept"]
