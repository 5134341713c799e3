"""LangGraph threads in a source store, copied by a backup and restore into another and
pruned there; the source's ``forget`` of a thread, checked in the copy
(tests/governance/test_forget_*pruned*.py); and a restore made by a version before the
key adoption (:func:`older_restore`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring
from statekeeper.errors import AgentForgotten
from statekeeper.governance.backup import BackupKey, backup
from statekeeper.governance.shredding import forget
from statekeeper.integrations.langgraph import StatekeeperSaver

__all__ = [
    "SECRET",
    "backed_up_threads",
    "chat",
    "config",
    "forgotten_in_the_copy",
    "generations",
    "pruned",
    "ring",
]

SECRET = "078-05-1120"


def ring(vault: object) -> Keyring:
    return Keyring({"k1": bytes(range(32))}, data_keys=vault)


def config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


async def chat(saver: StatekeeperSaver, thread: str, turns: int) -> None:
    given = config(thread)
    for i in range(turns):
        cp = empty_checkpoint()
        cp["channel_values"] = {"ssn": f"{SECRET} turn {i}"}
        cp["channel_versions"] = {"ssn": i + 1}
        given = await saver.aput(given, cp, {"source": "loop", "step": i}, {"ssn": i + 1})


async def generations(store: StateStore, thread: str) -> list[str]:
    found = [a.agent_id async for a in store.iter_agents()]
    return sorted(a for a in found if f"/{thread}#" in a)


async def backed_up_threads(
    url: str,
    vault: object,
    file: Path,
    bkey: BackupKey,
    then: Callable[[StatekeeperSaver], Awaitable[None]] | None = None,
) -> str:
    """Threads ``t1`` and ``t2`` (3 turns each) written to ``url`` and backed up to
    ``file``, then ``then(saver)``: ``t1``'s generation in that store."""
    async with StateStore(url, keyring=ring(vault)) as store, StatekeeperSaver(store) as saver:
        await chat(saver, "t1", 3)
        await chat(saver, "t2", 3)
        await backup(store, file, bkey)
        if then is not None:
            await then(saver)
        (t1,) = await generations(store, "t1")
    return t1


async def pruned(store: StateStore, saver: StatekeeperSaver, turn: int) -> str:
    """Both threads pruned in the copy: ``t1``'s new generation there (its newest
    checkpoint the turn ``turn``)."""
    await saver.aprune(["t1", "t2"])
    (t1,) = await generations(store, "t1")
    got = await saver.aget_tuple(config("t1"))
    assert got is not None and got.checkpoint["channel_values"]["ssn"] == f"{SECRET} turn {turn}"
    return t1


async def forgotten_in_the_copy(
    source: str, copy: str, vault: object, forgotten: str, generation: str
) -> None:
    """The source forgets ``forgotten`` (``t1``'s generation there): the copy's
    ``generation`` of the thread is shredded with it, ``t2`` still readable."""
    async with StateStore(source, keyring=ring(vault)) as a:
        assert (await forget(a, forgotten)).destroyed
    async with (
        StateStore(copy, keyring=ring(vault), cache_size=0) as b,
        StatekeeperSaver(b) as saver,
    ):
        with pytest.raises(AgentForgotten):  # was: the thread's newest state, readable
            await b.load(generation)
        with pytest.raises(AgentForgotten):
            await saver.aget_tuple(config("t1"))
        got = await saver.aget_tuple(config("t2"))  # not forgotten: readable in the copy
        assert got is not None and got.checkpoint["channel_values"]["ssn"] == f"{SECRET} turn 2"
