"""``restore --skip-existing`` after an interrupted restore. A full backup and its
incremental restore an agent in two parts (the full's events, then the
incremental's); a restore stopped between them leaves the agent at the full's head.
Skipping it as "already held" would leave it older than the backup with a report of
success. (Before: skipped silently, the agent stayed at the full backup's head.) Now
the run is refused, naming the agent, before anything is written."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import BackupError
from statekeeper.governance.backup import BackupKey, backup, restore

WRITING = importlib.import_module("statekeeper.governance.backup.writepass")


async def test_skip_existing_refuses_an_agent_held_older_than_the_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = BackupKey(os.urandom(32))
    full, inc = tmp_path / "full.skb", tmp_path / "inc.skb"
    # a store opened in a namespace is backed up as rows: an incremental holds the
    # events written since, restored as a second part of the agent
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}", namespace="n") as source:
        for i in range(10):
            await source.save("big", {"i": i})
        await source.save("small", {"x": 1})
        await backup(source, full, key)
        for i in range(10, 15):
            await source.save("big", {"i": i})
        await backup(source, inc, key, since=full)
    write_batch = WRITING._write_batch
    parts: list[list[str]] = []

    async def stopped_after_the_first_part(*args: Any, **kw: Any) -> None:
        parts.append(sorted(write[0] for write in args[1]))
        if len(parts) == 2:
            raise RuntimeError("killed")  # (the process dies between two parts)
        await write_batch(*args, **kw)

    target = f"sqlite:///{tmp_path / 'dst.db'}"
    async with StateStore(target) as store:
        monkeypatch.setattr(WRITING, "_write_batch", stopped_after_the_first_part)
        with pytest.raises(RuntimeError):
            await restore(store, [full, inc], key)
        monkeypatch.undo()
        # the full backup's parts (one batch), then the incremental's: killed before it
        assert parts == [["n/big", "n/small"], ["n/big"]]
        assert await store.backend.head("n/big") == 10  # the full backup's part only
        assert await store.backend.head("n/small") == 1  # whole: it has one part
        with pytest.raises(
            BackupError, match=r"'n/big' up to seq 10 of the backup's 15"
        ) as refused:
            await restore(store, [full, inc], key, skip_existing=True)
        assert "delete" in str(refused.value)
        assert await store.backend.head("n/big") == 10  # nothing written
        await store.delete("n/big")
        done = await restore(store, [full, inc], key, skip_existing=True)
        assert (done.agents, done.skipped) == (1, 1)  # n/small held whole: skipped
        assert (await store.load("n/big")).data == {"i": 14}
        # an agent the target holds as the backup does (or newer) is still skipped
        again = await restore(store, [full, inc], key, skip_existing=True)
        assert (again.agents, again.skipped) == (0, 2)
