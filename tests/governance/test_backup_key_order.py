"""A backup restored keeps every dict's key order (test_key_order.py): each seq loads
in the restored store with its keys in the order saved."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from statekeeper import StateStore
from statekeeper.governance.backup import BackupKey, backup, restore

STATES: list[dict[str, Any]] = [
    {"a": 1, "b": 2},
    {"c": 3, "b": {"y": 1, "x": 2}, "a": 1},
    {"c": 3, "b": {"x": 2, "y": 1}, "a": 1},
    {"a": 1, "c": 3, "b": {"x": 2, "y": 1}},
]


def _orders(x: Any) -> str:
    def go(v: Any) -> Any:
        if isinstance(v, dict):
            return [[k, go(w)] for k, w in v.items()]
        if isinstance(v, list):
            return [go(w) for w in v]
        return v

    return json.dumps(go(x))


async def test_a_restored_backup_keeps_key_order(tmp_path: Path) -> None:
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", snapshot_every=2) as src:
        for state in STATES:
            await src.save("a", state)
        await backup(src, file, bkey)
    async with StateStore(f"sqlite:///{tmp_path / 't.db'}") as dst:
        await restore(dst, [file], bkey)
    async with StateStore(f"sqlite:///{tmp_path / 't.db'}") as fresh:
        for seq, state in enumerate(STATES, start=1):
            assert _orders((await fresh.load("a", at_seq=seq)).data) == _orders(state), seq
