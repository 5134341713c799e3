"""``restore --skip-existing`` refused after a restore stopped part-way named one agent
("e.g. 'acme/agent-00003'") and ``--json`` said nothing more: now the error counts
them, names them (``RestoredPartWay.agents``: every one, with the seq held and the
backup's head), ``--json`` lists them all, and a fresh target is suggested."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
from base64 import b64encode
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import BackupError, RestoredPartWay
from statekeeper.governance.backup import BackupKey, backup, restore
from tests.keyfiles import write_key_file

WRITING = importlib.import_module("statekeeper.governance.backup.writepass")
SRC = Path(__file__).resolve().parents[2] / "src"
BIG = [f"big{i}" for i in range(6)]


async def _stopped_part_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    raw = os.urandom(32)
    key = BackupKey(raw)
    full, inc = tmp_path / "full.skb", tmp_path / "inc.skb"
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}", namespace="n") as source:
        for name in BIG:
            for i in range(4):
                await source.save(name, {"i": i})
        await source.save("small", {"x": 1})
        await backup(source, full, key)
        for name in BIG:
            await source.save(name, {"i": 9})
        await backup(source, inc, key, since=full)
    write_batch = WRITING._write_batch
    calls = [0]

    async def stopped_after_the_first_part(*args: Any, **kw: Any) -> None:
        calls[0] += 1
        if calls[0] == 2:
            raise RuntimeError("killed")  # (the process dies between two parts)
        await write_batch(*args, **kw)

    target = f"sqlite:///{tmp_path / 'dst.db'}"
    async with StateStore(target) as store:
        monkeypatch.setattr(WRITING, "_write_batch", stopped_after_the_first_part)
        with pytest.raises(RuntimeError):
            await restore(store, [full, inc], key)
        monkeypatch.undo()
    return target, full, inc, key, raw


async def test_every_agent_restored_part_way_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target, full, inc, key, _raw = await _stopped_part_way(tmp_path, monkeypatch)
    async with StateStore(target) as store:
        with pytest.raises(RestoredPartWay) as refused:
            await restore(store, [full, inc], key, skip_existing=True)
    assert isinstance(refused.value, BackupError)
    assert refused.value.agents == {f"n/{name}": (4, 5) for name in BIG}
    message = str(refused.value)
    assert message.startswith("the target store holds 6 agent(s) restored part-way")
    assert "'n/big0' up to seq 4 of the backup's 5" in message and "and 2 more" in message
    assert "fresh target" in message and "delete them" in message


def test_the_command_counts_them_and_lists_them_in_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target, full, inc, _key, raw = asyncio.run(_stopped_part_way(tmp_path, monkeypatch))
    key_file = tmp_path / "bk.key"
    write_key_file(key_file, b64encode(raw).decode() + "\n")
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "statekeeper.cli",
            "restore",
            str(full),
            str(inc),
            "--to",
            target,
            "--backup-key",
            str(key_file),
            "--skip-existing",
            "--json",
        ],
        capture_output=True,
        text=True,
        env={"COLUMNS": "300", "NO_COLOR": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)},
    )
    assert cli.returncode == 2, cli.stderr
    assert "6 agent(s) restored part-way" in cli.stderr
    doc = json.loads(cli.stdout)
    assert doc["error"] == "restored_part_way" and doc["count"] == 6
    assert doc["agents"] == [
        {"agent_id": f"n/{name}", "held_seq": 4, "backup_head": 5} for name in BIG
    ]
