"""Helpers of more than one feed test module."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from statekeeper import StateStore
from statekeeper.governance.backup import BackupKey, backup


async def current(store: StateStore) -> list[tuple[Any, ...]]:
    """``(agent_id, fsm_state, seq)`` of every agent, as loaded now."""
    rows = []
    for info in await store.list_agents():
        state = await store.load(info.agent_id)
        rows.append((info.agent_id, state.fsm_state, state.seq))
    return rows


async def backup_of(tmp_path: Path, prefix: str, saves: int) -> tuple[Path, BackupKey]:
    """A backup (its file, its key) of a store of ``prefix``a0 and ``prefix``a1, written
    alternately ``saves`` times in all."""
    key = BackupKey(os.urandom(32))
    path = tmp_path / f"{prefix.strip('/') or 'full'}.skb"
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}") as source:
        for n in range(saves):
            await source.save(f"{prefix}a{n % 2}", {"n": n})
        await backup(source, path, key)
    return path, key
