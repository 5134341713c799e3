"""The incarnation check of a DurableAgent where the store's cache does not hold the
agent's record (cache off, or evicted by other agents): the chain link at the agent's
seq was peeked from that cache only, so it was unknown there, and the write was
checked on the seq alone: a stale agent wrote onto a stream deleted and re-created to
the same seq. The link now comes with the state the agent adopts (its load, its own
writes), with no read of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConflictError

from .test_incarnation import DURABILITIES, _stale_write_is_refused


@pytest.mark.parametrize("durability", [d for d in DURABILITIES if d != "async"])
async def test_with_the_cache_off(
    db_url: str, durability: str, open_store: Callable[..., StateStore]
) -> None:
    options: dict[str, Any] = {"durability": durability, "cache_size": 0}
    await _stale_write_is_refused(open_store(db_url, **options), open_store(db_url))


async def test_with_the_cache_off_and_a_write_buffer(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    """durability="async" without a cache: the buffered write reads the stored head
    (nothing cached to build on), so the stale agent's write is refused at once."""
    mine = open_store(db_url, durability="async", flush_size=1, cache_size=0)
    theirs = open_store(db_url)
    agent = await mine.agent("y")
    agent.data["mine"] = 1
    await agent.save()
    await mine.flush()
    await theirs.delete("y")
    again = await theirs.agent("y")
    again.data["other"] = 2
    await again.save()  # seq 2 again: another stream
    agent.data["fresh"] = 2
    with pytest.raises(ConflictError, match="re-created"):
        await agent.save()
    await mine.flush()
    assert (await theirs.load("y")).data == {"other": 2}
    await agent.refresh()  # then it writes onto the stream that exists
    agent.data["fresh"] = 3
    await agent.save()
    await mine.flush()
    assert (await theirs.load("y")).data == {"other": 2, "fresh": 3}


async def test_with_the_record_evicted_from_the_cache(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    mine = open_store(db_url, cache_size=2)
    theirs = open_store(db_url)
    agent = await mine.agent("y")
    agent.data["mine"] = 1
    await agent.save()  # seq 2
    for i in range(4):  # other agents of this store push y's record out of its cache
        await mine.save(f"other-{i}", {"i": i})
    await theirs.delete("y")
    again = await theirs.agent("y")
    again.data["other"] = 2
    await again.save()  # seq 2 again: another stream
    agent.data["fresh"] = 2
    with pytest.raises(ConflictError, match="re-created"):
        await agent.save()
    assert (await theirs.load("y")).data == {"other": 2}
