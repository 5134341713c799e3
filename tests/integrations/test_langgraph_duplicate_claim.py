"""A riding run's claim stored by a write the store reports as a duplicate is taken.

A run whose claim rides on its first write (see ``runs.first_write_precedes_nodes``)
holds the thread once that write is stored (``_SaverClaims._rode``, on the document
the commit left). An append whose first attempt landed but was not acknowledged (a
lost commit reply: the backend's retry finds the checkpoint's idempotency key) comes
back ``duplicate=True``. The saver then dropped its document as stale and handed the
run the document as it was *before* the write: the claim the write stored was not in
it, the run never marked as holding the thread, its claim never renewed nor released
(the thread refused to other processes until the lease lapsed). The hook reports the
append the way the store's retry does: deterministic, no timing.

That fix took the document the write made when its key was found right after the
cached seq (this very compare-and-append, landed). A key found at another seq (an
event the saver never read came before it) left the document unknown: the run was
again never marked as holding the thread, and once it ended another process was
refused the thread (for the hour of ``run_lease`` here). Now that rare answer reads
the thread's document (the common path reads nothing: test_langgraph_runs.py, head reads;
test_sqlite_one_statement_append.py, statements).
"""

from __future__ import annotations

from typing import Any

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m
from statekeeper.records import AppendResult

from .conftest import bare_checkpoint, config, new_thread
from .test_langgraph_ride_committed import _riding_run, _stored_claim


async def test_a_riding_claim_whose_append_came_back_duplicate_is_held_and_released(
    url: str,
) -> None:
    saver = await StatekeeperSaver.afrom_url(url, run_lease=3600)
    try:
        thread = new_thread()
        run, conf = await _riding_run(saver, thread)
        store = saver.store
        original = store.append

        async def landed_unacknowledged(agent_id: str, *args: Any, **kwargs: Any) -> Any:
            result = await original(agent_id, *args, **kwargs)
            if kwargs.get("idempotency_key") is None:
                return result
            # (what the store answers when its retry finds the first attempt's key)
            return AppendResult(agent_id, result.first_seq, result.last_seq, duplicate=True)

        store.append = landed_unacknowledged  # type: ignore[method-assign]
        try:
            config = await saver.aput(conf, bare_checkpoint(), {"source": "input", "step": -1}, {})
        finally:
            del store.append
        assert (await _stored_claim(saver, thread))["id"] == run.token
        assert run.claimed
        await saver._release(run)
        assert await _stored_claim(saver, thread) is None
        got = await saver.aget_tuple(config)
        assert got is not None
    finally:
        await saver.aclose()


async def test_a_riding_claim_whose_key_is_found_past_the_cached_seq_is_held_and_released(
    url: str,
) -> None:
    saver = await StatekeeperSaver.afrom_url(url, run_lease=3600)
    # another process: its own cache and runs, the same store
    other = StatekeeperSaver(saver.store, _portal=saver._portal, run_lease=3600)
    try:
        thread = new_thread()
        run, conf = await _riding_run(saver, thread)
        store = saver.store
        original = store.append

        async def landed_after_another_write(agent_id: str, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("idempotency_key") is None:
                return await original(agent_id, *args, **kwargs)
            seq = kwargs["expected_seq"]
            # an event of another writer (a namespace of its own), then the attempt's:
            # the store's retry finds its key at seq + 2, not right after the cached seq
            other_ns = {"op": "add", "path": "/ns/other", "value": m.new_ns()}
            await original(agent_id, m.EV_WRITES, None, ops=[other_ns], expected_seq=seq)
            landed = await original(agent_id, *args, **{**kwargs, "expected_seq": seq + 1})
            assert landed.first_seq == seq + 2
            return AppendResult(agent_id, landed.first_seq, landed.last_seq, duplicate=True)

        store.append = landed_after_another_write  # type: ignore[method-assign]
        try:
            put = await saver.aput(conf, bare_checkpoint(), {"source": "input", "step": -1}, {})
        finally:
            del store.append
        assert (await _stored_claim(saver, thread))["id"] == run.token
        assert run.claimed
        await saver._release(run)  # the run ends
        assert await _stored_claim(saver, thread) is None
        # another process may write the thread now (before: ThreadBusyError)
        await other.aput(config(thread), bare_checkpoint(), {"source": "update", "step": 0}, {})
        assert await saver.aget_tuple(put) is not None
    finally:
        await saver.aclose()
