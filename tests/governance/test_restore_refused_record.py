"""A restore whose record the target cannot store (over the engine's size limit: a
state a PostgreSQL or SQLite store holds, restored into Redis or a SQLite file with a
lower limit) fails with :class:`~statekeeper.errors.StateTooLarge`, and leaves no
agent cut short. An agent is written in pieces (cut at its idempotency keys, each an
append of its own), so the refusal of a later piece left the earlier ones: an agent
that listed, loaded and verified as whole, older than the backup, which a second
``restore(skip_existing=True)`` then kept as the target's own and reported success
(before). Now the restore deletes the agents it left short before raising; a second
run fails the same way."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import StateTooLarge
from statekeeper.governance.backup import BackupKey, backup, restore

LIMIT = 1_000_000


async def _source(path: Path, file: Path, key: BackupKey) -> int:
    # a namespaced store is backed up as rows: restored by appends, piece by piece
    async with StateStore(f"sqlite:///{path}", namespace="n") as source:
        agent = await source.agent("steps")
        for i in range(4):
            agent.data[f"s{i}"] = i
            await agent.save(idempotency_key=f"step-{i}")
        agent.data["big"] = "b" * (LIMIT + LIMIT // 2)  # over the target's limit
        await agent.save()
        agent.data["after"] = 1
        await agent.save(idempotency_key="step-after")
        await source.save("small", {"x": 1})
        await backup(source, file, key)
        return agent.seq


async def test_a_record_the_target_refuses_leaves_no_agent_cut_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = BackupKey(os.urandom(32))
    file = tmp_path / "full.skb"
    head = await _source(tmp_path / "src.db", file, key)
    connect = SQLiteBackend._connect

    def limited(self: SQLiteBackend) -> sqlite3.Connection:
        conn = connect(self)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LIMIT)
        return conn

    monkeypatch.setattr(SQLiteBackend, "_connect", limited)  # the target's only
    async with StateStore(f"sqlite:///{tmp_path / 'dst.db'}") as target:
        with pytest.raises(StateTooLarge, match="SQLITE_LIMIT_LENGTH"):
            await restore(target, [file], key)
        # not the first pieces of n/steps (seqs 1-4, each under its key): an agent
        # that would list and verify as whole, 4 of its 6 events
        assert await target.backend.head("n/steps") == 0
        # a second run refuses the same record: never "skipped, the target's own"
        with pytest.raises(StateTooLarge):
            await restore(target, [file], key, skip_existing=True)
        assert await target.backend.head("n/steps") == 0
    monkeypatch.undo()
    async with StateStore(f"sqlite:///{tmp_path / 'dst.db'}") as target:
        done = await restore(target, [file], key, skip_existing=True)  # limit back
        assert (await target.load("n/steps")).seq == head
        assert done.agents >= 1
