"""A riding run's claim counts as stored from the write that carried it.

A run whose claim rides on its first write (see ``runs.first_write_precedes_nodes``)
holds the thread once that write is stored; the saver learnt so from its cached
document after the write (``_SaverClaims._rode``). Between the commit and that look
the saver's loop runs other tasks (the commit's snapshot, the thread's lock handed
on), and a read of another thread may evict the entry (or a read of this one replace
it): the claim was then not seen, the run never marked as holding the thread — its
claim never renewed and never released (the thread stayed refused to other processes
until the lease lapsed). And a sync ``put_writes`` looked (and scheduled the renewal)
from the caller's thread, off the saver's loop. Now the look is made on the loop, on
the document the write committed. Hooks hold the commit's snapshot step: no timing.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from statekeeper.integrations.langgraph import StatekeeperSaver, runs
from statekeeper.integrations.langgraph import mapping as m

from .conftest import bare_checkpoint, config, new_thread


class _Runtime:
    """What a LangGraph run passes in ``configurable["__pregel_runtime"]``."""

    def __init__(self, control: object) -> None:
        self.control = control


async def _riding_run(saver: StatekeeperSaver, thread: str) -> tuple[runs.Run, dict[str, Any]]:
    """A riding run that has read its (new) thread, and the config of its calls."""
    control = object()
    run = runs.Run(thread, control, addressed=False)
    run.rides = True
    conf = config(thread)
    conf["configurable"]["__pregel_runtime"] = _Runtime(control)
    assert await saver._check_and_get(run, conf) is None  # (a new thread)
    return run, conf


async def _stored_claim(saver: StatekeeperSaver, thread: str) -> Any:
    snap = await saver.store.get(m.agent_id(saver.prefix, thread))
    assert snap is not None
    return snap.data.get("run")


async def test_a_riding_claim_whose_entry_is_evicted_after_its_write_is_released(
    url: str,
) -> None:
    saver = await StatekeeperSaver.afrom_url(url, cache_size=1, run_lease=3600)
    try:
        thread, other = new_thread(), new_thread()
        run, conf = await _riding_run(saver, thread)
        entered, release = asyncio.Event(), asyncio.Event()
        original = saver._snapshot_if_due

        async def held(st: Any) -> None:
            if st.thread_id == thread and not entered.is_set():
                entered.set()
                await release.wait()
            await original(st)

        saver._snapshot_if_due = held  # type: ignore[method-assign]
        put = asyncio.create_task(
            saver.aput(conf, bare_checkpoint(), {"source": "input", "step": -1}, {})
        )
        await entered.wait()  # the run's first write, with its claim, is committed
        await saver.aput(config(other), bare_checkpoint(), {"source": "loop", "step": 0}, {})
        release.set()  # (the thread's entry evicted: cache_size=1)
        await put
        assert run.claimed
        assert (await _stored_claim(saver, thread))["id"] == run.token
        await saver._release(run)
        assert await _stored_claim(saver, thread) is None
    finally:
        await saver.aclose()


async def test_a_sync_riding_write_takes_its_claim_on_the_saver_loop(url: str) -> None:
    saver = await StatekeeperSaver.afrom_url(url, run_lease=3600)
    try:
        thread = new_thread()
        run, conf = await _riding_run(saver, thread)
        loop_thread = threading.get_ident()
        scheduled: list[int] = []
        original = saver._portal.later

        def later(delay: float, callback: Any) -> asyncio.TimerHandle:
            scheduled.append(threading.get_ident())
            return original(delay, callback)

        saver._portal.later = later  # type: ignore[method-assign]
        conf["configurable"]["checkpoint_id"] = "1"
        await asyncio.to_thread(saver.put_writes, conf, [("x", 1)], "task-1")
        assert run.claimed
        assert scheduled == [loop_thread]  # the renewal's timer set on the loop
        await saver._release(run)
        assert await _stored_claim(saver, thread) is None
    finally:
        await saver.aclose()
