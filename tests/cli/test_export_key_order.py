"""``export`` / ``import`` keeps every dict's key order (test_key_order.py): each seq
loads in the target with its keys in the order saved, a retention compacted agent too."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ._proc import sk_in_process

STATES: list[dict[str, Any]] = [
    {"a": 1, "b": 2},
    {"c": 3, "b": {"y": 1, "x": 2}, "a": 1},
    {"c": 3, "b": {"x": 2, "y": 1}, "a": 1},
    {"c": 3, "a": 1, "b": {"x": 2, "y": 1}},
    {"a": 1, "c": 3, "b": {"x": 2, "y": 1}},
]


def _orders(x: Any) -> Any:
    if isinstance(x, dict):
        return [[k, _orders(v)] for k, v in x.items()]
    if isinstance(x, list):
        return [_orders(v) for v in x]
    return x


async def _fill(url: str, compact: bool) -> None:
    async with StateStore(url, snapshot_every=2) as store:
        for state in STATES:
            await store.save("a", state)
        if compact:
            await apply_retention(store, RetentionPolicy.parse("* keep_last=2\n"))


async def _loaded(url: str, first: int) -> None:
    async with StateStore(url) as store:
        for seq in range(first, len(STATES) + 1):
            got = (await store.load("a", at_seq=seq)).data
            assert json.dumps(_orders(got)) == json.dumps(_orders(STATES[seq - 1])), seq


@pytest.mark.parametrize("compact", [False, True])
def test_export_import_keeps_key_order(tmp_path: Path, compact: bool) -> None:
    source, target = f"sqlite:///{tmp_path / 's.db'}", f"sqlite:///{tmp_path / 't.db'}"
    asyncio.run(_fill(source, compact))
    file = tmp_path / "agents.jsonl"
    exported = sk_in_process("export", "--db", source, "-o", str(file))
    assert exported.returncode == 0, exported.stderr
    assert sk_in_process("init", target).returncode == 0
    imported = sk_in_process("import", str(file), "--db", target)
    assert imported.returncode == 0, imported.stderr
    asyncio.run(_loaded(target, len(STATES) - 2 if compact else 1))
