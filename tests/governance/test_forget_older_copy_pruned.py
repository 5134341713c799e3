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

import importlib
import os
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from statekeeper import StateStore
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.errors import AgentForgotten
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.shredding import forget
from statekeeper.integrations.langgraph import StatekeeperSaver

from .test_forget_restored_thread_pruned import SECRET, _chat, _config, _generations, _ring

restore_module = importlib.import_module("statekeeper.governance.backup.restore")


async def test_a_prune_in_an_older_restored_copy_is_shredded_by_the_sources_forget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = SqliteKeyVault(tmp_path / "v.db")
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "a.skb"
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    async with StateStore(a_url, keyring=_ring(vault)) as a, StatekeeperSaver(a) as saver:
        await _chat(saver, "t1", 3)
        await _chat(saver, "t2", 3)
        (t1,) = await _generations(a, "t1")
        await backup(a, file, bkey)

    async def older(*_: object) -> int:  # a restore made before the key adoption
        return 0

    async with StateStore(b_url, keyring=_ring(vault)) as b:
        with monkeypatch.context() as patched:
            patched.setattr(restore_module, "adopt_copied_keys", older)
            assert (await restore(b, [file], bkey)).agents == 2
    async with StateStore(b_url, keyring=_ring(vault)) as b, StatekeeperSaver(b) as saver:
        await saver.aprune(["t1", "t2"])
        (t1_b,) = await _generations(b, "t1")
        assert t1_b != t1
        got = await saver.aget_tuple(_config("t1"))
        assert got is not None and got.checkpoint["channel_values"]["ssn"] == f"{SECRET} turn 2"
    async with StateStore(a_url, keyring=_ring(vault)) as a:
        assert (await forget(a, t1)).destroyed
    async with (
        StateStore(b_url, keyring=_ring(vault), cache_size=0) as b,
        StatekeeperSaver(b) as saver,
    ):
        with pytest.raises(AgentForgotten):  # was: the thread's newest state, readable
            await b.load(t1_b)
        with pytest.raises(AgentForgotten):
            await saver.aget_tuple(_config("t1"))
        got = await saver.aget_tuple(_config("t2"))  # not forgotten: readable in the copy
        assert got is not None and got.checkpoint["channel_values"]["ssn"] == f"{SECRET} turn 2"
