"""The source's ``forget`` of a thread reaches a copy's pruned generation when the
source pruned the thread itself before this version.

A prune now seals the new generation with the old one's key
(:func:`statekeeper.codec.keyscope.continue_key`); one made before gave it a key of its
own. Source A pruned its thread so (its generation ``g1`` under a key of its own) after
a backup of ``g0``; B, restored from that backup, pruned its copy (``g1'``, sealed with
``g0``'s key, A's). A's ``forget`` of the thread destroyed B's copy of ``g0`` (its key
is one of A's own keys of ``g0``) but left ``g1'``: it matched the keys A's records of
the forgotten agent name (``g1``'s) and A's own keys of ``g1'`` itself (none), not A's
keys of the other generations — B's pruned thread still loaded. A forget now matches
against A's own keys of every generation of the lineage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from statekeeper import StateStore
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.governance.backup import BackupKey, restore
from statekeeper.integrations.langgraph import StatekeeperSaver

from ._pruned_threads import backed_up_threads, forgotten_in_the_copy, pruned, ring


async def test_a_copys_pruned_thread_is_shredded_when_the_source_pruned_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = SqliteKeyVault(tmp_path / "v.db")
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "a.skb"
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"

    async def pruned_before(saver: StatekeeperSaver) -> None:
        with monkeypatch.context() as patched:  # a prune made before this version
            patched.setattr(Keyring, "continue_in", lambda *_: False)
            await saver.aprune(["t1"])

    t1_a = await backed_up_threads(a_url, vault, file, bkey, pruned_before)
    async with StateStore(b_url, keyring=ring(vault)) as b, StatekeeperSaver(b) as saver:
        assert (await restore(b, [file], bkey)).agents == 2
        t1_b = await pruned(b, saver, 2)
    await forgotten_in_the_copy(a_url, b_url, vault, t1_a, t1_b)
