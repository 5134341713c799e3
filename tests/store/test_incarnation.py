"""A DurableAgent never writes onto a stream deleted and re-created since it read it.

The re-created stream may reach the seq the agent object holds: the head seq alone then
looks unchanged, and a write of the agent's pending changes would land on a state no
process ever saw (its changes mixed into the new stream's data). The agent remembers
its stream's chain link at its seq; its write is refused (ConflictError; a buffered
write of ``durability="async"`` when flushed) when the stream's differs, with no read of
its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.errors import ConflictError, WriteBufferError
from statekeeper.store.namespaced import NamespacedStateStore

DURABILITIES = ["sync", "group", "async"]


async def _stale_write_is_refused(mine: StateStore, theirs: StateStore) -> None:
    agent = await mine.agent("y")
    agent.data["mine"] = 1
    await agent.save()  # seq 2
    await theirs.delete("y")
    other = await theirs.agent("y")  # re-created: seq 1
    other.data["other"] = 2
    await other.save()  # seq 2 again: the same head seq, another stream
    agent.data["fresh"] = 2
    if mine.durability == "async":  # the buffered write is refused when flushed
        await agent.save()
        with pytest.raises(WriteBufferError):
            await mine.flush()
        with pytest.raises(WriteBufferError):  # and the agent says so until refreshed
            await agent.record("note")
    else:
        with pytest.raises(ConflictError, match="re-created"):
            await agent.save()
        with pytest.raises(ConflictError):  # a custom event or a transition too
            await agent.record("note")
    assert (await theirs.load("y")).data == {"other": 2}
    # after a refresh the agent writes onto the stream that exists
    await agent.refresh()
    agent.data["fresh"] = 3
    await agent.save()
    await mine.flush()
    assert (await theirs.load("y")).data == {"other": 2, "fresh": 3}


@pytest.mark.parametrize("durability", DURABILITIES)
async def test_two_stores_on_one_sqlite_file(
    db_url: str, durability: str, open_store: Callable[..., StateStore]
) -> None:
    options: dict[str, Any] = {"durability": durability}
    if durability == "async":
        options["flush_size"] = 1
    await _stale_write_is_refused(open_store(db_url, **options), open_store(db_url))


@pytest.mark.parametrize("durability", DURABILITIES)
async def test_two_stores_on_one_memory_backend(
    durability: str, open_store: Callable[..., StateStore]
) -> None:
    backend = MemoryBackend()
    options: dict[str, Any] = {"durability": durability}
    if durability == "async":
        options["flush_size"] = 1
    await _stale_write_is_refused(open_store(backend, **options), open_store(backend))


async def test_one_store_deleting_and_recreating(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    # another agent object of the same store re-creates the stream
    store = open_store(db_url)
    await _stale_write_is_refused(store, store)


async def test_a_namespaced_store(db_url: str) -> None:
    # the agent's id is relative: the link is looked up under the stored id
    async with (
        NamespacedStateStore(db_url, namespace="t") as mine,
        NamespacedStateStore(db_url, namespace="t") as theirs,
    ):
        await _stale_write_is_refused(mine, theirs)
