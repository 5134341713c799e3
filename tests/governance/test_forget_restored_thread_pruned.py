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

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper import StateStore
from statekeeper.codec.datakeys import MemoryKeyVault, SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.errors import AgentForgotten
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.shredding import forget
from statekeeper.integrations.langgraph import StatekeeperSaver

SECRET = "078-05-1120"


def _ring(vault: object) -> Keyring:
    return Keyring({"k1": bytes(range(32))}, data_keys=vault)


def _config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


async def _chat(saver: StatekeeperSaver, thread: str, turns: int) -> None:
    config = _config(thread)
    for i in range(turns):
        cp = empty_checkpoint()
        cp["channel_values"] = {"ssn": f"{SECRET} turn {i}"}
        cp["channel_versions"] = {"ssn": i + 1}
        config = await saver.aput(config, cp, {"source": "loop", "step": i}, {"ssn": i + 1})


async def _generations(store: StateStore, thread: str) -> list[str]:
    found = [a.agent_id async for a in store.iter_agents()]
    return sorted(a for a in found if f"/{thread}#" in a)


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
    async with StateStore(a_url, keyring=_ring(vault)) as a, StatekeeperSaver(a) as saver:
        await _chat(saver, "t1", 3)
        await _chat(saver, "t2", 3)
        (t1,) = await _generations(a, "t1")
        await backup(a, file, bkey)
    async with StateStore(b_url, keyring=_ring(vault)) as b, StatekeeperSaver(b) as saver:
        assert (await restore(b, [file], bkey)).agents == 2
        if not reopened:
            await _chat(saver, "t1", 1)  # written on in the target, then pruned there
    # (reopened: the prune is the first write of a process, its key family not read yet)
    async with StateStore(b_url, keyring=_ring(vault)) as b, StatekeeperSaver(b) as saver:
        await saver.aprune(["t1", "t2"])
        (t1_b,) = await _generations(b, "t1")
        assert t1_b != t1  # a new generation, its records sealed in B
        got = await saver.aget_tuple(_config("t1"))
        newest = f"{SECRET} turn {2 if reopened else 0}"
        assert got is not None and got.checkpoint["channel_values"]["ssn"] == newest
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
        # the thread not forgotten stays readable in the copy
        got = await saver.aget_tuple(_config("t2"))
        assert got is not None and got.checkpoint["channel_values"]["ssn"] == f"{SECRET} turn 2"
