"""A run's claim stored by a write whose outcome the saver never learnt is released.

Fork protection stores a run's claim in the thread's document: in a commit of its own
at the run's start (``_SaverClaims._claim``), or riding on the run's first write (a
``durability="sync"`` run's input checkpoint, see ``runs.first_write_precedes_nodes``).
The run was marked as holding the thread only once that write answered. An append
that lands but whose reply is lost (``BackendError(maybe_applied=True)``) left the run
unmarked: the run then failed, its end (``_release``) saw no claim and returned, and
the stored claim refused every other process the thread (``ThreadBusyError``) until
``run_lease`` ran out (an hour here). Now a run whose claim was sent in a write that
did not answer is released with a read of the thread's document (on that failure path
only: a run whose write answered reads nothing more, test_langgraph_runs.py and
test_sqlite_one_statement_append.py count). The same for a riding write the store
answered "duplicate" (its key found after events the saver never read) whose read of
the thread then failed: the put failed, though its checkpoint was stored; it now
succeeds and the run's end releases the claim it may have carried.

The store's append is wrapped (the lost reply made deterministic: no timing); "another
process" is a second saver on the same store, with its own cache and runs.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from statekeeper.errors import BackendError
from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m
from statekeeper.records import AppendResult

from .conftest import bare_checkpoint, config, new_thread, reply_graph
from .test_langgraph_ride_committed import _riding_run, _stored_claim


def _lose_first_reply(saver: StatekeeperSaver, thread: str, refuse: int = 0) -> list[str]:
    """Wrap the store's append: the thread's first append lands, then its reply is
    lost (``BackendError(maybe_applied=True)``); the ``refuse`` appends after it are
    refused, nothing written (``BackendError``: the connection still down). Returns
    the event types of the appends that failed."""
    store = saver.store
    original = store.append
    agent = m.agent_id(saver.prefix, thread)
    failed: list[str] = []

    async def reply_lost(agent_id: str, event_type: str, *args: Any, **kwargs: Any) -> Any:
        if agent_id != agent or len(failed) > refuse:
            return await original(agent_id, event_type, *args, **kwargs)
        if failed:
            failed.append(event_type)
            raise BackendError("connection lost: nothing sent")
        result = await original(agent_id, event_type, *args, **kwargs)
        failed.append(event_type)
        raise BackendError(
            f"connection lost after the commit of seq {result.last_seq} was sent",
            maybe_applied=True,
        )

    store.append = reply_lost  # type: ignore[method-assign]
    return failed


async def _other_process_writes(saver: StatekeeperSaver, thread: str) -> None:
    """Another process writes the thread (refused while a live claim holds it)."""
    other = StatekeeperSaver(saver.store, _portal=saver._portal, run_lease=3600)
    await other.aput(config(thread), bare_checkpoint(), {"source": "update", "step": 0}, {})


async def _invoke(graph: Any, mode: str, durability: str, thread: str) -> None:
    cfg = {"configurable": {"thread_id": thread}}
    given = {"messages": [HumanMessage("hi", id="h1")]}
    if mode == "sync":
        await asyncio.to_thread(graph.invoke, given, cfg, durability=durability)
    else:
        await graph.ainvoke(given, cfg, durability=durability)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    "durability, failed_writes",
    [("sync", [m.EV_CHECKPOINT, m.EV_WRITES]), ("async", [m.EV_RUN])],
    ids=["riding", "own-commit"],
)
async def test_a_failed_run_whose_claim_write_lost_its_reply_releases_the_claim(
    url: str, mode: str, durability: str, failed_writes: list[str]
) -> None:
    """riding: the claim rides on the input checkpoint, whose reply is lost, and the
    step's writes after it are refused (nothing written: no later write of the run
    finds the claim), the run fails; own-commit: the claim's commit at the run's start
    loses its reply, the run fails to start (the new thread's stream dropped)."""
    saver = await StatekeeperSaver.afrom_url(url, run_lease=3600)
    try:
        thread = new_thread()
        graph = reply_graph().compile(checkpointer=saver)
        failed = _lose_first_reply(saver, thread, refuse=len(failed_writes) - 1)
        try:
            with pytest.raises(BackendError, match="after the commit"):
                await _invoke(graph, mode, durability, thread)
        finally:
            del saver.store.append
        assert failed == failed_writes  # the write carrying the claim landed, unanswered
        # the run has ended: its claim is cleared, another process writes the thread at
        # once (before: ThreadBusyError until the hour of run_lease ran out)
        if durability == "async":
            # own-commit: the claim was all the new thread held, and it goes with the
            # stream, as for a run that ends having stored nothing (``_drop_bare``,
            # test_langgraph_failed_start.py). Was: the stream left, its claim cleared
            assert await saver.store.head(m.agent_id(saver.prefix, thread)) == 0
        else:
            assert await _stored_claim(saver, thread) is None
        await _other_process_writes(saver, thread)
    finally:
        await saver.aclose()


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_riding_put_writes_whose_reply_is_lost_leaves_no_claim_after_the_run(
    url: str, mode: str
) -> None:
    """The claim riding on a ``put_writes`` (the sync face hands it to the saver's loop)."""
    saver = await StatekeeperSaver.afrom_url(url, run_lease=3600)
    try:
        thread = new_thread()
        run, conf = await _riding_run(saver, thread)
        conf["configurable"]["checkpoint_id"] = "1"
        failed = _lose_first_reply(saver, thread)
        try:
            with pytest.raises(BackendError):
                if mode == "sync":
                    await asyncio.to_thread(saver.put_writes, conf, [("x", 1)], "task-1")
                else:
                    await saver.aput_writes(conf, [("x", 1)], "task-1")
        finally:
            del saver.store.append
        assert failed == [m.EV_WRITES]
        assert (await _stored_claim(saver, thread))["id"] == run.token  # (it landed)
        await saver._release(run)  # the run ends (it failed)
        assert await _stored_claim(saver, thread) is None
        await _other_process_writes(saver, thread)
    finally:
        await saver.aclose()


async def test_a_duplicate_answer_whose_read_fails_stores_the_put_and_releases_its_claim(
    url: str,
) -> None:
    saver = await StatekeeperSaver.afrom_url(url, run_lease=3600)
    try:
        thread = new_thread()
        run, conf = await _riding_run(saver, thread)
        store = saver.store
        original = store.append
        reads_fail: list[str] = []

        async def landed_after_another_write(agent_id: str, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("idempotency_key") is None:
                return await original(agent_id, *args, **kwargs)
            seq = kwargs["expected_seq"]
            # an event of another writer, then the attempt's: the store's retry finds
            # its key at seq + 2 (the saver reads the document to learn what it holds)
            other_ns = {"op": "add", "path": "/ns/other", "value": m.new_ns()}
            await original(agent_id, m.EV_WRITES, None, ops=[other_ns], expected_seq=seq)
            landed = await original(agent_id, *args, **{**kwargs, "expected_seq": seq + 1})
            reads_fail.append(agent_id)  # and that read fails
            return AppendResult(agent_id, landed.first_seq, landed.last_seq, duplicate=True)

        store_reads = {"get": store.get, "_get_shared": store._get_shared}

        def failing_once(name: str) -> Any:
            async def read(agent_id: str, *args: Any, **kwargs: Any) -> Any:
                if reads_fail:
                    reads_fail.clear()
                    raise BackendError("connection lost while reading")
                return await store_reads[name](agent_id, *args, **kwargs)

            return read

        store.append = landed_after_another_write  # type: ignore[method-assign]
        for name in store_reads:
            setattr(store, name, failing_once(name))

        try:
            # stored (its key found): the put succeeds (before: BackendError)
            put = await saver.aput(conf, bare_checkpoint(), {"source": "input", "step": -1}, {})
        finally:
            del store.append
            for name in store_reads:
                delattr(store, name)
        assert not reads_fail  # (the read was made, and failed)
        assert (await _stored_claim(saver, thread))["id"] == run.token
        await saver._release(run)  # the run ends
        assert await _stored_claim(saver, thread) is None
        await _other_process_writes(saver, thread)
        assert await saver.aget_tuple(put) is not None
    finally:
        await saver.aclose()
