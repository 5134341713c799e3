"""A step's checkpoint is committed by the call LangGraph waits on (issue 12).

LangGraph saves a step's pending writes and the checkpoint after the step from two of
its background threads, and waits only for the checkpoint before the next step. The
saver stores both in one commit (``writes_wait``); that commit must be made by the
``put`` call — which runs the saver's loop on its own thread whenever no other call
runs it — not by the ``put_writes`` call, which would make the step wait for another
thread to be scheduled; and ``put_writes`` still returns only once its writes are
durable.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from pathlib import Path
from typing import Any

from statekeeper.integrations.langgraph import StatekeeperSaver

from ._lg_graphs import counter_graph
from .conftest import new_thread

#: long enough that no write is committed by its own timeout on a loaded machine: every
#: held write is taken by the run's next write (a checkpoint, the run's release)
GUARD = 120.0


#: the saver call (``put``, ``put_writes``) whose task is running: a sync call runs its
#: coroutine as a task of the saver's loop, which copies the caller's context
_CALL: contextvars.ContextVar[str] = contextvars.ContextVar("saver_call", default="other")


def test_a_steps_commit_is_made_by_the_call_to_put(tmp_path: Path) -> None:
    # A commit is attributed to the call whose task makes it (a context variable the
    # call's task inherits), not to the thread it runs on: the threads take turns
    # running the loop, and a put made while the put_writes thread runs it (the first
    # step's held write waits on the loop) is run there — still by the put's task,
    # which LangGraph waits on. (Attributed by thread, that commit counted as the
    # put_writes thread's, and the test failed ~4% of runs on a loaded machine.)
    saver = StatekeeperSaver.from_url(
        f"sqlite:///{tmp_path}/lg.db", writes_wait=GUARD, run_lease=3600
    )
    committed_in: list[str] = []  # the call each commit was made by
    durable: list[bool] = []  # each put_writes' writes were stored when it returned
    try:
        commit = saver._commit

        async def recorded(thread_id: str, batch: list[Any]) -> None:
            # (a batch whose plans were all settled meanwhile commits nothing)
            if any(not p.future.done() for p in batch):
                committed_in.append(_CALL.get())
            await commit(thread_id, batch)

        saver._commit = recorded  # type: ignore[method-assign]

        def traced(name: str, method: Any) -> Any:
            @functools.wraps(method)
            def call(*args: Any, **kwargs: Any) -> Any:
                token = _CALL.set(name)
                try:
                    result = method(*args, **kwargs)
                finally:
                    _CALL.reset(token)
                if name == "put_writes":
                    config, writes, task_id = args[:3]
                    tuple_ = saver.get_tuple(config)
                    assert tuple_ is not None
                    stored = {(t, ch) for t, ch, _ in tuple_.pending_writes or ()}
                    durable.append(all((task_id, ch) in stored for ch, _ in writes))
                return result

            return call

        saver.put = traced("put", saver.put)  # type: ignore[method-assign]
        saver.put_writes = traced("put_writes", saver.put_writes)  # type: ignore[method-assign]
        graph = counter_graph(8).compile(checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": new_thread()}}
        assert graph.invoke({"n": 0}, cfg, durability="sync") == {"n": 8}
        assert graph.get_state(cfg).values == {"n": 8}
        assert durable and all(durable), durable
        # every step's writes ride on its checkpoint's commit, made by the put; the
        # first step's may come before the run's claim (riding on its input
        # checkpoint) is stored, and wait on the loop as before
        assert committed_in.count("put") >= 5, committed_in
        assert committed_in.count("put_writes") <= 1, committed_in
    finally:
        saver.close()


def test_a_held_write_whose_commit_failed_is_still_stored_by_its_caller(
    tmp_path: Path,
) -> None:
    """The commit that took a step's held writes fails before it stores anything (its
    stream could not be opened): the checkpoint's ``put`` raises, and ``put_writes``
    still returns with its writes durable (its caller commits them) — it neither hangs
    nor loses them."""
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db", writes_wait=0.05)
    failed: list[bool] = []
    commit = saver._commit

    async def failing(thread_id: str, batch: list[Any]) -> None:
        # the first commit taking a step's writes with its checkpoint
        if not failed and len({p.event_type for p in batch}) > 1:
            failed.append(True)
            raise OSError("the stream could not be opened")
        await commit(thread_id, batch)

    saver._commit = failing  # type: ignore[method-assign]
    try:
        graph = counter_graph(5).compile(checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": new_thread()}}
        outcome: list[BaseException | None] = []

        def run() -> None:
            try:
                graph.invoke({"n": 0}, cfg, durability="sync")
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(GUARD)
        assert failed and len(outcome) == 1, outcome
        assert isinstance(outcome[0], OSError)
        latest = saver.get_tuple(cfg)
        assert latest is not None
        # the writes of the step whose checkpoint failed, stored on the checkpoint
        # before it (LangGraph resumes from there with them)
        stored = [(ch, v) for _, ch, v in latest.pending_writes or ()]
        n = latest.checkpoint["channel_values"].get("n", 0)
        assert "n" in {ch for ch, _ in stored}, (n, stored)
    finally:
        saver.close()


def test_a_parked_write_waits_on_a_plain_lock(tmp_path: Path) -> None:
    """A parked write's caller waits for its commit on a lock the commit releases (C
    calls), not on a ``threading.Event`` (a ``Condition`` in Python: ~25 Python calls
    made, waited on and set per write, ~40k instructions of a small graph's step).
    Every write still returns durable, the run's state is the graph's."""
    saver = StatekeeperSaver.from_url(
        f"sqlite:///{tmp_path}/lg.db", writes_wait=GUARD, run_lease=3600
    )
    parked: list[Any] = []
    park = saver._park

    def recorded(*args: Any) -> Any:
        mine = park(*args)
        parked.append(mine)
        return mine

    saver._park = recorded  # type: ignore[method-assign, assignment]
    try:
        graph = counter_graph(8).compile(checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": new_thread()}}
        assert graph.invoke({"n": 0}, cfg, durability="sync") == {"n": 8}
        assert graph.get_state(cfg).values == {"n": 8}
        assert len(parked) >= 5, parked
        lock_type = type(threading.Lock())
        assert [type(p.parked) for p in parked] == [lock_type] * len(parked)
        # settled: released by its commit, and taken by its waiter on its way out
        assert all(p.future.done() and p.future.exception() is None for p in parked)
        writes = saver.get_tuple(cfg)
        assert writes is not None
    finally:
        saver.close()
