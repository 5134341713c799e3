"""A write whose value the store cannot encode fails alone: the checkpoint committed
with it in one event is stored, as LangGraph's own savers store it.

Calls on one thread that arrive while another commits share one event (a step's
writes and the run's next checkpoint, usually). A string holding a lone surrogate
(``"\\ud83d"``, half an emoji from a JSON escape) cannot be encoded as UTF-8: the
store raised ``SerializationError`` for the whole event, so the checkpoint in it was
lost too. Seen on a real graph with ``durability="async"``: after the failed run the
thread held only its input checkpoint, and ``invoke(None)`` ran the first node again
(``InMemorySaver`` keeps the first node's checkpoint). Now a batch that fails so is
committed again a plan at a time, and only the call that carried the value fails.
"""

from __future__ import annotations

import asyncio
from typing import Any

from statekeeper.errors import SerializationError
from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import checkpoint, config, new_thread

HALF_AN_EMOJI = "half an emoji: \ud83d"


async def _together(saver: StatekeeperSaver, thread_id: str, calls: list[Any]) -> list[Any]:
    """Run ``calls`` (coroutines of the saver's own methods) so that they share one
    commit: queued while the thread's lock is held, as behind a commit in progress."""
    await saver._locks.acquire(thread_id)
    try:
        tasks = [asyncio.ensure_future(call) for call in calls]
        for _ in range(10_000):  # loop passes, until every call is queued behind the lock
            if len(saver._queued.get(thread_id) or ()) == len(calls):
                break
            await asyncio.sleep(0)
        assert len(saver._queued[thread_id]) == len(calls)
    finally:
        saver._locks.release(thread_id)
    return await asyncio.gather(*tasks, return_exceptions=True)


def test_an_unstorable_write_fails_alone(url: str) -> None:
    thread = new_thread()
    with StatekeeperSaver.from_url(url, fork_protection=False) as saver:
        first = saver.put(
            config(thread),
            checkpoint({"log": ["x"]}, {"log": 1}),
            {"source": "input", "step": -1},
            {"log": 1},
        )
        second = checkpoint({"log": ["x", "first"]}, {"log": 2})
        write, put = saver._portal.call(
            _together(
                saver,
                thread,
                [
                    saver._put_writes(first, [("log", HALF_AN_EMOJI)], "task-2", ""),
                    saver._put(first, second, {"source": "loop", "step": 0}, {"log": 2}),
                ],
            )
        )
        assert isinstance(write, SerializationError)
        assert put == config(thread, "", second["id"])  # stored
        latest = saver.get_tuple(config(thread))
        assert latest is not None
        assert latest.checkpoint["id"] == second["id"]
        assert latest.checkpoint["channel_values"] == {"log": ["x", "first"]}
        assert latest.pending_writes == []
        assert [t.checkpoint["id"] for t in saver.list(config(thread))] == [
            second["id"],
            first["configurable"]["checkpoint_id"],
        ]
