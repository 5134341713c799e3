"""A LangGraph thread in a copy restored by a version before the key adoption, pruned
there by this version, is shredded whole by its source's ``forget``.

Such a copy's key family holds no key of the agents it copied (their records are sealed
with the source's keys alone, :mod:`statekeeper.governance.backup.restoretarget`). A
``prune`` gives the new generation the key the store writes the old one with
(:func:`statekeeper.codec.keyscope.continue_key`) — and found none: the new generation
got a key of the copy's own, the source's ``forget`` of the thread left it live, and
the "forgotten" thread's kept checkpoints (its whole state) still loaded in the copy.
The prune now first adopts the key the old generation's records are sealed with, as a
restore does now."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from statekeeper import StateStore
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.governance.backup import BackupKey, restore
from statekeeper.integrations.langgraph import StatekeeperSaver

from ._pruned_threads import backed_up_threads, forgotten_in_the_copy, pruned, ring
from ._restore_stopped import older_restore


async def test_a_prune_in_an_older_restored_copy_is_shredded_by_the_sources_forget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = SqliteKeyVault(tmp_path / "v.db")
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "a.skb"
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    t1 = await backed_up_threads(a_url, vault, file, bkey)
    async with StateStore(b_url, keyring=ring(vault)) as b:
        with older_restore(monkeypatch):
            assert (await restore(b, [file], bkey)).agents == 2
    async with StateStore(b_url, keyring=ring(vault)) as b, StatekeeperSaver(b) as saver:
        t1_b = await pruned(b, saver, 2)
        assert t1_b != t1
    await forgotten_in_the_copy(a_url, b_url, vault, t1, t1_b)
