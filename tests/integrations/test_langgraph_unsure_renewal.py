"""A running run whose claim's write answered without its document is renewed.

A riding run's claim (see ``runs.first_write_precedes_nodes``) is stored by its first
write. When the store answers that write "duplicate" with its key found after events
the saver never read, and the read of the thread that follows fails, the write stands
(the put succeeds) but the run does not know it holds the thread (``Run.unsure``: its
end reads the thread to release it). The run goes on meanwhile; it was renewed only
once a later write found its claim. A node running longer than ``run_lease`` (an LLM
call, a tool) then let the claim lapse under it: another process's run took the thread
while this run still ran, and this run's next write was refused with
``ThreadBusyError`` as if it had never held it (``lost=False``, "held by another run").
Now the renewal covers an unsure claim: it reads the thread, and renews the claim (the
run then holds it) when it is stored.

The store's append and reads are wrapped (the answers made deterministic); the clock
is injected (no timing); "another process" is a second saver on the same store.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from statekeeper.errors import BackendError
from statekeeper.integrations.langgraph import StatekeeperSaver, ThreadBusyError, runs
from statekeeper.integrations.langgraph import mapping as m
from statekeeper.records import AppendResult

from .conftest import bare_checkpoint, new_thread
from .test_langgraph_ride_committed import _riding_run, _stored_claim

LEASE = 60.0


def _duplicate_whose_read_fails(saver: StatekeeperSaver) -> Any:
    """Wrap the store: the next keyed append lands after another writer's event and is
    answered "duplicate" (its key found at seq + 2), and the saver's read of the
    thread after it fails. Returns the undo."""
    store = saver.store
    original = store.append
    reads_fail: list[str] = []

    async def landed_after_another_write(agent_id: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("idempotency_key") is None or reads_fail == ["done"]:
            return await original(agent_id, *args, **kwargs)
        seq = kwargs["expected_seq"]
        other_ns = {"op": "add", "path": "/ns/other", "value": m.new_ns()}
        await original(agent_id, m.EV_WRITES, None, ops=[other_ns], expected_seq=seq)
        landed = await original(agent_id, *args, **{**kwargs, "expected_seq": seq + 1})
        reads_fail.append(agent_id)
        return AppendResult(agent_id, landed.first_seq, landed.last_seq, duplicate=True)

    store_reads = {"get": store.get, "_get_shared": store._get_shared}

    def failing_once(name: str) -> Any:
        async def read(agent_id: str, *args: Any, **kwargs: Any) -> Any:
            if reads_fail and reads_fail != ["done"]:
                reads_fail[:] = ["done"]
                raise BackendError("connection lost while reading")
            return await store_reads[name](agent_id, *args, **kwargs)

        return read

    store.append = landed_after_another_write  # type: ignore[method-assign]
    for name in store_reads:
        setattr(store, name, failing_once(name))

    def undo() -> None:
        assert reads_fail == ["done"]  # (the read was made, and failed)
        del store.append
        for name in store_reads:
            delattr(store, name)

    return undo


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_an_unsure_running_claim_is_renewed(url: str, mode: str) -> None:
    now = [1000.0]
    saver = await StatekeeperSaver.afrom_url(url, run_lease=LEASE, clock=lambda: now[0])
    other = StatekeeperSaver(saver.store, _portal=saver._portal, run_lease=LEASE)
    other._clock = lambda: now[0]
    try:
        thread = new_thread()
        run, conf = await _riding_run(saver, thread)
        undo = _duplicate_whose_read_fails(saver)
        try:
            meta = {"source": "input", "step": -1}
            if mode == "sync":
                put = await asyncio.to_thread(saver.put, conf, bare_checkpoint(), meta, {})
            else:
                put = await saver.aput(conf, bare_checkpoint(), meta, {})
        finally:
            undo()
        assert (await _stored_claim(saver, thread))["id"] == run.token  # (it landed)
        assert run.unsure and not run.claimed
        # the run's node runs for a while: its renewal is due (a timer of the saver's
        # loop, run here by hand), at a third of the lease
        assert saver._renewer is not None  # (before: none; nothing renewed the claim)
        now[0] += LEASE / 3
        await saver._renew()
        assert run.claimed  # (read: its claim is stored)
        now[0] += LEASE * 5 / 6  # past the claim as first stored, not as renewed
        # another process's run is refused: this run holds the thread (before: it took it)
        with pytest.raises(ThreadBusyError):
            await other._claim(runs.Run(thread, object(), addressed=False))
        # this run's next write goes through (before: ThreadBusyError, lost=False)
        conf["configurable"]["checkpoint_id"] = put["configurable"]["checkpoint_id"]
        await saver.aput(conf, bare_checkpoint(), {"source": "loop", "step": 0}, {})
        await saver._release(run)
        assert await _stored_claim(saver, thread) is None
    finally:
        await saver.aclose()


async def test_an_unsure_claim_not_stored_is_read_and_left_alone(url: str) -> None:
    """The renewal of an unsure run whose claim is not stored (another process's run
    took the thread) reads it and writes nothing: the run does not hold it."""
    now = [1000.0]
    saver = await StatekeeperSaver.afrom_url(url, run_lease=LEASE, clock=lambda: now[0])
    other = StatekeeperSaver(saver.store, _portal=saver._portal, run_lease=LEASE)
    other._clock = lambda: now[0]
    try:
        thread = new_thread()
        run, conf = await _riding_run(saver, thread)
        undo = _duplicate_whose_read_fails(saver)
        try:
            await saver.aput(conf, bare_checkpoint(), {"source": "input", "step": -1}, {})
        finally:
            undo()
        now[0] += 2 * LEASE  # lapsed (no renewal ran): another process's run takes it
        theirs = runs.Run(thread, object(), addressed=False)
        await other._claim(theirs)
        head = await saver.store.head(m.agent_id(saver.prefix, thread))
        await saver._renew()
        assert not run.claimed
        assert await saver.store.head(m.agent_id(saver.prefix, thread)) == head
        assert (await _stored_claim(saver, thread))["id"] == theirs.token
        await saver._release(run)  # this run's end leaves their claim alone
        assert (await _stored_claim(saver, thread))["id"] == theirs.token
        await other._release(theirs)
    finally:
        await saver.aclose()
