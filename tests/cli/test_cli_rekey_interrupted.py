"""A rekey stopped by Ctrl-C says how far it got and how to finish (its old keys are
still needed until then), and the same command then resumes it to the end."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from statekeeper import Keyring, SyncStateStore

from ._proc import run_in_process, sk_in_process


def test_ctrl_c_mid_rekey_says_where_it_stopped_and_the_rerun_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (the package's ``rekey`` is the function: the module, by its full name)
    rekey_module = importlib.import_module("statekeeper.security.rekey")
    keys = tmp_path / "keys.json"
    assert sk_in_process("keys", "generate", "--key-file", str(keys)).returncode == 0
    db = tmp_path / "store.db"
    with SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys)) as store:
        for agent_id in ("alpha", "beta", "gamma", "delta"):
            store.save(agent_id, {"n": 1})
    assert sk_in_process("keys", "generate", "--key-file", str(keys)).returncode == 0
    real = rekey_module.rekey_agent

    async def ctrl_c_at_gamma(store: Any, agent_id: str, **options: Any) -> Any:
        if agent_id == "gamma":
            raise KeyboardInterrupt  # Ctrl-C, landing in the third agent (by id)
        return await real(store, agent_id, **options)

    monkeypatch.setattr(rekey_module, "rekey_agent", ctrl_c_at_gamma)
    args = ["rekey", "--db", str(db), "--key-file", str(keys)]
    code, _out, err = run_in_process(args, {"COLUMNS": "200", "NO_COLOR": "1"}, cwd=tmp_path)
    assert code == 130, err
    said = " ".join(err.split())  # (lines folded at the terminal's width)
    assert "rekey stopped after 3 agent(s) (the last: 'delta')" in said  # alpha, beta, delta
    assert f"{db}.rekey.json: run the same command again to resume" in said
    assert "Keep the old keys until it completes" in said
    monkeypatch.setattr(rekey_module, "rekey_agent", real)
    again = sk_in_process(*args, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["resumed_after"] == "delta"
    status = sk_in_process("keys", "status", "--db", str(db), "--key-file", str(keys), "--json")
    assert set(json.loads(status.stdout)["usage"]) == {"k2"}


@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_the_resumed_rekey_counts_the_whole_operation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, json_out: bool
) -> None:
    """The run that finishes a rekey stopped after 3 of 4 agents said "✓ 1 agent(s): 1
    event(s) ... re-encrypted": its own part only. It now counts the whole rekey (from
    the progress file's totals) and says how it splits; ``--json`` keeps this run's
    counts and adds ``whole_run``."""
    rekey_module = importlib.import_module("statekeeper.security.rekey")
    keys = tmp_path / "keys.json"
    assert sk_in_process("keys", "generate", "--key-file", str(keys)).returncode == 0
    db = tmp_path / "store.db"
    with SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys)) as store:
        for agent_id in ("alpha", "beta", "gamma", "delta"):
            store.save(agent_id, {"n": 1})
    assert sk_in_process("keys", "generate", "--key-file", str(keys)).returncode == 0
    real = rekey_module.rekey_agent

    async def ctrl_c_at_gamma(store: Any, agent_id: str, **options: Any) -> Any:
        if agent_id == "gamma":
            raise KeyboardInterrupt  # after alpha, beta, delta (by id)
        return await real(store, agent_id, **options)

    args = ["rekey", "--db", str(db), "--key-file", str(keys)]
    with monkeypatch.context() as patched:
        patched.setattr(rekey_module, "rekey_agent", ctrl_c_at_gamma)
        code, _out, err = run_in_process(args, {"COLUMNS": "200", "NO_COLOR": "1"}, cwd=tmp_path)
    assert code == 130, err
    again = sk_in_process(*args, *(["--json"] if json_out else []))
    assert again.returncode == 0, again.stderr
    if json_out:
        doc = json.loads(again.stdout)
        assert (doc["agents"], doc["events_reencrypted"]) == (1, 1)  # this run's
        assert doc["whole_run"] == {
            "agents": 4, "events_reencrypted": 4, "snapshots_reencrypted": 0, "already_done": 0
        }  # fmt: skip
        return
    said = " ".join(again.stdout.split())
    assert "✓ 4 agent(s): 4 event(s) and 0 snapshot(s) re-encrypted under" in said, said
    assert "(resumed after 'delta': 1 agent(s) in this run, 3 before)" in said, said
