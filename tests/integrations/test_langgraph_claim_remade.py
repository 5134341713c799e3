"""A run is not refused as "busy" by a claim of a thread since deleted and made again.

A saver refused a run because another run held the thread: the holder's claim is in
the saver's cached document. When it was refused again, the head was read to tell a
claim released since (in a commit this saver never read: the claim is retried on a
fresh read) from a current one — by its seq alone. A thread deleted by another process
and made again up to that same seq, with no claim on it, passed for the cached one:
every run was refused with ``ThreadBusyError`` ("held by another run ... retry when
that run has finished") for a thread nobody held, until the deleted claim's lease
lapsed (``run_lease``: an hour here). Now the head is compared at its identity (its
tag, ``_checked_head``): the remade thread is claimed.
"""

from __future__ import annotations

import asyncio

import pytest

from statekeeper import StateStore
from statekeeper.integrations.langgraph import StatekeeperSaver, ThreadBusyError, runs
from statekeeper.integrations.langgraph import mapping as m
from statekeeper.integrations.langgraph.loop import BoundLoop

from .conftest import bare_checkpoint, config, new_thread, off_context


async def _saver(url: str, cached: bool) -> StatekeeperSaver:
    """A saver as ``afrom_url`` makes one, its store's record cache on or off."""
    if cached:
        return await StatekeeperSaver.afrom_url(url, run_lease=3600)
    store = StateStore(url, cache_size=0)
    loop = BoundLoop(asyncio.get_running_loop())
    return StatekeeperSaver(store, run_lease=3600, _portal=loop, _owns_store=True)


@pytest.mark.parametrize("cached", [True, False], ids=["cached", "uncached"])
async def test_a_thread_made_again_without_a_claim_is_not_busy(fs_url: str, cached: bool) -> None:
    holder = await StatekeeperSaver.afrom_url(fs_url, run_lease=3600)
    mine = await _saver(fs_url, cached)
    other = StatekeeperSaver.from_url(fs_url)  # another process
    thread = new_thread()
    base = m.agent_id(mine.prefix, thread)
    held = runs.Run(thread, object(), addressed=False)
    refused = runs.Run(thread, object(), addressed=False)
    claimed = runs.Run(thread, object(), addressed=False)
    try:
        for step in range(3):
            await holder.aput(
                config(thread), bare_checkpoint(), {"source": "loop", "step": step}, {}
            )
        await holder._claim(held)
        with pytest.raises(ThreadBusyError):  # the holder's claim, now in its cache
            await mine._claim(refused)
        seq = await mine.store.head(base)
        acked: list[str] = []

        def remake() -> None:  # deleted and written again up to the same seq, unclaimed
            other.delete_thread(thread)
            cfg = other.put(config(thread), bare_checkpoint(), {"source": "input", "step": -1}, {})
            acked.append(cfg["configurable"]["checkpoint_id"])
            n = 0
            while other._portal.call(other.store.head(base)) < seq:
                other.put_writes(cfg, [("messages", n)], f"task-{n}")
                n += 1
            assert other._portal.call(other.store.head(base)) == seq

        await off_context(remake)
        await mine._claim(claimed)  # nobody holds the thread made again
        found = await asyncio.to_thread(lambda: list(other.list(config(thread))))
        assert [t.checkpoint["id"] for t in found] == acked  # (its checkpoint kept)
        stored = await mine.store.get(base)
        assert stored is not None and stored.data["run"]["id"] == claimed.token
        await mine._release(claimed)
    finally:
        other.close()
        await mine.aclose()
        await holder.aclose()
