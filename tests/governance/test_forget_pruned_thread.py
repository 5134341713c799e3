"""Forgetting a LangGraph thread after ``prune`` destroys the key of every generation
the thread had, so a backup taken before the prune cannot bring its plaintext back.

``prune`` moves a thread into a new generation stream (a new agent id, a new data key)
and deletes the old stream, but keeps the old generation's data key: a backup taken
before the prune still needs it. Forgetting the thread destroyed only the live
generation's key, so the old one stayed live and that backup restored the thread's
plaintext. The prune now records the lineage in the key vault, and ``forget`` follows
it: every generation's key goes, and a thread never forgotten restores readable.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from statekeeper import StateStore
from statekeeper.codec.datakeys import MemoryKeyVault, SqliteKeyVault
from statekeeper.errors import AgentForgotten, AgentNotFound
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.backup.restore import iter_entries
from statekeeper.governance.shredding import forget
from statekeeper.integrations.langgraph import StatekeeperSaver

from ._pruned_threads import SECRET, chat, generations, ring


def _live(vault: MemoryKeyVault | SqliteKeyVault, agent_id: str) -> bool:
    return any(entry.wrapped is not None for entry in vault.entries(agent_id))


@pytest.mark.parametrize("vault_kind", ["memory", "sqlite"])
@pytest.mark.parametrize("forgotten", ["live", "pruned"])
async def test_forget_after_prune_destroys_every_generations_key(
    tmp_path: Path, vault_kind: str, forgotten: str
) -> None:
    vault = MemoryKeyVault() if vault_kind == "memory" else SqliteKeyVault(tmp_path / "v.db")
    async with (
        StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=ring(vault)) as store,
        StatekeeperSaver(store) as saver,  # (its loop's thread stopped at the end)
    ):
        await chat(saver, "t1", 3)
        (old,) = await generations(store, "t1")
        await saver.aprune(["t1"])
        (new,) = await generations(store, "t1")
        assert new != old and _live(vault, old)  # the prune destroys nothing
        # the live generation (its stream), or the pruned one (only its key is left)
        result = await forget(store, new if forgotten == "live" else old)
        assert result.destroyed
        assert not _live(vault, new)
        assert not _live(vault, old), "the pruned generation's key is still live"


async def test_a_backup_before_prune_restores_a_forgotten_thread_unreadable(
    tmp_path: Path,
) -> None:
    vault = MemoryKeyVault()
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "before-prune.skb"
    async with (
        StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=ring(vault)) as store,
        StatekeeperSaver(store) as saver,  # (its loop's thread stopped at the end)
    ):
        await chat(saver, "t1", 3)
        await chat(saver, "t2", 3)
        (t1_old,) = await generations(store, "t1")
        (t2_old,) = await generations(store, "t2")
        await backup(store, file, bkey)
        await saver.aprune(["t1", "t2"])
        (t1_new,) = await generations(store, "t1")
        await forget(store, t1_new)
    assert SECRET.encode() not in file.read_bytes()
    async with (
        StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=ring(vault)) as dst,
        StatekeeperSaver(dst) as saver,
    ):
        result = await restore(dst, [file], bkey)
        assert t1_old in result.forgotten  # the forgotten thread's old generation
        with pytest.raises(AgentNotFound):  # restore put none of its records back
            await dst.load(t1_old)
        # the thread never forgotten restores readable, as before the prune
        got = await saver.aget_tuple({"configurable": {"thread_id": "t2", "checkpoint_ns": ""}})
        assert got is not None
        assert got.checkpoint["channel_values"]["ssn"] == f"{SECRET} turn 2"
        assert t2_old in [a.agent_id async for a in dst.iter_agents()]
    # even the old generation's raw records, put back by hand, do not open
    entry = next(e for e in iter_entries(file, bkey) if e[0] == t1_old)
    seq, kind, ts, payload, checksum = entry[4][0]
    async with StateStore("memory://", keyring=ring(vault)) as other:
        with pytest.raises(AgentForgotten):
            other.codec.open(t1_old, seq, kind, ts, payload, checksum)


async def test_a_namespaced_store_links_the_stored_ids(tmp_path: Path) -> None:
    """The vault holds stored ids: a saver over a store opened in a namespace links
    ``acme/lg/t1#…``, not the ids relative to the namespace."""
    vault = MemoryKeyVault()
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with (
        StateStore(url, keyring=ring(vault), namespace="acme") as store,
        StatekeeperSaver(store) as saver,
    ):
        await chat(saver, "t1", 3)
        (old,) = await generations(store, "t1")
        await saver.aprune(["t1"])
        (new,) = await generations(store, "t1")
        assert (await forget(store, new)).destroyed
    assert not _live(vault, f"acme/{new}")
    assert not _live(vault, f"acme/{old}"), "the pruned generation's key is still live"
