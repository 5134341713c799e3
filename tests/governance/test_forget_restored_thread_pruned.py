"""A LangGraph thread restored into another store and pruned there is shredded whole by
its source's ``forget``.

A restore gives the target's key family the copy's data key
(:func:`statekeeper.codec.keyscope.adopt`), so the source's ``forget`` makes the
target's copy unreadable too. But a ``prune`` in the target moves the thread into a
new generation (a new agent id), whose records were sealed with a key of the target's
own family: the source's forget, which follows the thread's lineage but destroyed only
keys of its own store and keys its records' fingerprints name, left that key live —
the "forgotten" thread's kept checkpoints (its whole state) still loaded in the target.
The forget now also destroys, in every store holding a copy of the agent (a key its
records name), the keys of the ids that continue it there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from statekeeper import StateStore
from statekeeper.codec.datakeys import MemoryKeyVault, SqliteKeyVault
from statekeeper.governance.backup import BackupKey, restore
from statekeeper.integrations.langgraph import StatekeeperSaver

from ._pruned_threads import backed_up_threads, chat, forgotten_in_the_copy, pruned, ring


@pytest.mark.parametrize(
    ("vault_kind", "reopened"), [("memory", False), ("sqlite", False), ("sqlite", True)]
)
async def test_a_prune_in_the_target_after_a_restore_is_shredded_by_the_sources_forget(
    tmp_path: Path, vault_kind: str, reopened: bool
) -> None:
    vault = MemoryKeyVault() if vault_kind == "memory" else SqliteKeyVault(tmp_path / "v.db")
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "a.skb"
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    t1 = await backed_up_threads(a_url, vault, file, bkey)
    async with StateStore(b_url, keyring=ring(vault)) as b, StatekeeperSaver(b) as saver:
        assert (await restore(b, [file], bkey)).agents == 2
        if not reopened:
            await chat(saver, "t1", 1)  # written on in the target, then pruned there
    # (reopened: the prune is the first write of a process, its key family not read yet)
    async with StateStore(b_url, keyring=ring(vault)) as b, StatekeeperSaver(b) as saver:
        t1_b = await pruned(b, saver, 2 if reopened else 0)
        assert t1_b != t1  # a new generation, its records sealed in B
    await forgotten_in_the_copy(a_url, b_url, vault, t1, t1_b)
