"""The renewal of an unsure run (``test_langgraph_unsure_renewal.py``) at its edges:
it makes nothing for a thread that is gone, and it does not bring back a claim the
run's own release cleared while the renewal was waiting for the thread.

The store's answers are made deterministic as in ``test_langgraph_unsure_renewal.py``;
the clock is injected; the thread's lock, held by the test, orders the two writes (no
timing).
"""

from __future__ import annotations

import asyncio
from typing import Any

from statekeeper.integrations.langgraph import StatekeeperSaver, runs
from statekeeper.integrations.langgraph import mapping as m

from .conftest import bare_checkpoint, new_thread
from .test_langgraph_ride_committed import _riding_run, _stored_claim
from .test_langgraph_unsure_renewal import LEASE, _duplicate_whose_read_fails


async def _unsure_run(saver: StatekeeperSaver, thread: str) -> runs.Run:
    run, conf = await _riding_run(saver, thread)
    undo = _duplicate_whose_read_fails(saver)
    try:
        await saver.aput(conf, bare_checkpoint(), {"source": "input", "step": -1}, {})
    finally:
        undo()
    assert run.unsure and not run.claimed
    return run


async def test_an_unsure_renewal_of_a_deleted_thread_makes_nothing(url: str) -> None:
    now = [1000.0]
    saver = await StatekeeperSaver.afrom_url(url, run_lease=LEASE, clock=lambda: now[0])
    other = StatekeeperSaver(saver.store, _portal=saver._portal, run_lease=LEASE)
    try:
        thread = new_thread()
        run = await _unsure_run(saver, thread)
        await other.adelete_thread(thread)  # (another process deletes the thread)
        now[0] += LEASE / 3
        await saver._renew()  # reads the thread: gone, nothing written
        await saver._release(run)  # (the run's end: nothing to clear)
        assert not run.claimed
        assert await saver.store.get(m.agent_id(saver.prefix, thread)) is None
        assert await saver.aget_tuple({"configurable": {"thread_id": thread}}) is None
    finally:
        await saver.aclose()


async def test_an_unsure_renewal_waiting_for_the_thread_does_not_bring_back_its_claim(
    url: str,
) -> None:
    now = [1000.0]
    saver = await StatekeeperSaver.afrom_url(url, run_lease=LEASE, clock=lambda: now[0])
    try:
        thread = new_thread()
        run = await _unsure_run(saver, thread)
        now[0] += LEASE / 3
        drain = saver._drain
        queued = [asyncio.Event(), asyncio.Event()]
        waiting: list[object] = []

        async def draining(thread_id: str, mine: Any) -> None:  # (its plan queued)
            waiting.append(mine)
            queued[len(waiting) - 1].set()
            await drain(thread_id, mine)

        saver._drain = draining  # type: ignore[method-assign]
        try:
            async with saver._lock(thread):  # the renewal, then the release, wait for it
                renewal = asyncio.ensure_future(saver._renew())
                await queued[0].wait()
                release = asyncio.ensure_future(saver._release(run))
                await queued[1].wait()
        finally:
            del saver._drain
        await asyncio.gather(renewal, release)
        assert await _stored_claim(saver, thread) is None
        assert not run.claimed
        await saver._renew()  # (the run is gone: nothing renewed)
        assert await _stored_claim(saver, thread) is None
    finally:
        await saver.aclose()
