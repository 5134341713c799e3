"""An intent left while its agent was intact (its owner not provably gone: another
host's, or one an earlier version wrote) does not announce a delete after the agent was
deleted by another process, with its own tombstone, and created again.

Before, the next process's settle found the intent's head event gone, took the delete
for done and appended the old delete's tombstone after the new agent's events: the
feed's last word on a live agent was "deleted", and every read model dropped it (before
owners, the first settle had dropped such an intent while the agent was intact)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.store import feed_intents
from statekeeper.store.feed_intents import PENDING

from ._intent_child import backend, keyring

ELSEWHERE = {"host": "elsewhere", "boot": "b", "pidns": "p", "pid": 7, "start": 1}


async def _left_intent(store: StateStore, agent_id: str, owner: Any, legacy: bool) -> None:
    """An intent for ``agent_id`` at its head, as a process that crashed before its
    delete left it (``legacy``: as an earlier version wrote it, no owner and no
    tombstone head)."""
    backend = store.backend
    head = await backend.head(agent_id)
    raws = await backend.read(agent_id, head - 1, head)
    stream = feed_intents.intent_stream(backend, agent_id)
    real_head = backend.head

    async def head_of(agent: str) -> Any:  # (the tombstone stream's: none, as before)
        return await real_head(agent) if agent == agent_id else None

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(feed_intents, "claim_owner", lambda: owner)
        if legacy:
            patch.setattr(backend, "head", head_of)
        await feed_intents._write_intent(
            backend, store.codec, stream, agent_id, head, raws[-1], False
        )


@pytest.mark.parametrize("engine", ["split", "tiered"])
@pytest.mark.parametrize("legacy", [False, True], ids=["other-host", "earlier-version"])
async def test_a_left_intent_announces_no_delete_of_a_recreated_agent(
    engine: str, legacy: bool, tmp_path: Path
) -> None:
    async with StateStore(backend(engine, tmp_path), keyring=keyring(tmp_path)) as store:
        for n in range(2):
            for agent_id in ("x", "b-first", "c-next"):
                await store.save(agent_id, {"n": n})
        await _left_intent(store, "x", None if legacy else ELSEWHERE, legacy)
    async with StateStore(backend(engine, tmp_path), keyring=keyring(tmp_path)) as store:
        assert await store.delete("x")  # its first delete settles: x intact, the intent left
        await store.save("x", {"fresh": True})  # created again
    async with StateStore(backend(engine, tmp_path), keyring=keyring(tmp_path)) as store:
        assert await store.delete("b-first")  # the next process settles
        last = [(c.deleted, c.seq) async for c in store.subscribe(stop_at_head=True)
                if c.agent_id == "x"][-1]  # fmt: skip
        assert last == (False, 1)  # the live agent's event (before: a tombstone, seq 2)
        assert (await store.load("x")).data == {"fresh": True}
        page = await store.backend.list_agents(after=PENDING, limit=10)
        assert not [i for i in page if i.agent_id.startswith(PENDING)]  # settled
        assert (await store.verify()).ok
