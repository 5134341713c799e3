"""An incremental backup written to its parent's own path (``backup --to F
--incremental F``, or the parent named through a symlink) replaced the parent with
itself and reported success: the only copy of the full backup was gone, and the
incremental alone restores nothing. It is now refused before anything is read or
written; a new file for it is fine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import BackupError
from statekeeper.governance.backup import BackupKey, backup, restore


@pytest.mark.parametrize("spelling", ["same", "dotted", "symlink"])
async def test_an_incremental_backup_never_replaces_its_parent(
    tmp_path: Path, spelling: str
) -> None:
    key = BackupKey(os.urandom(32))
    full = tmp_path / "full.skb"
    async with StateStore(f"sqlite:///{tmp_path / 'a.db'}") as store:
        await store.save("x", {"n": 1})
        await backup(store, full, key)
        before = full.read_bytes()
        await store.save("x", {"n": 2})
        parent: Path = full
        if spelling == "dotted":
            parent = tmp_path / "." / "full.skb"
        elif spelling == "symlink":
            parent = tmp_path / "latest.skb"
            parent.symlink_to(full)
        with pytest.raises(BackupError, match="over its parent"):
            await backup(store, full, key, since=parent)
        assert full.read_bytes() == before  # (was: replaced by the incremental)
        # a new file is fine, and the chain restores
        await backup(store, tmp_path / "inc.skb", key, since=parent)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}") as target:
        await restore(target, [full, tmp_path / "inc.skb"], key)
        assert (await target.load("x")).data == {"n": 2}
