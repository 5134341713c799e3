"""Ctrl-C in a sync ``update``'s change function leaves the agent's updates working.

The async core runs the change functions of an agent's updates in a task of its own
(the lane's runner, which coalesces concurrent calls), and the sync face hands each
function back to its caller's thread. A ``KeyboardInterrupt`` there (or a SIGINT
landing while the caller waited) cancelled the caller's call and left the runner
waiting for ever for the function's result: every later ``update`` of that agent in
that store — from any thread — hung, and so did ``close()`` (it waits for the calls in
flight). Now the function a caller left unrun fails in the runner, as a change
function that raises does: the caller gets its ``KeyboardInterrupt``, nothing of its
change is written, and the next updates run.

(A hang is what is tested: each call that used to hang runs in a thread joined with a
generous bound, a condition, not a pause.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from statekeeper import SyncStateStore
from statekeeper.concurrency.sync import update

BOUND = 60.0  # seconds: far beyond any loaded machine's update of an in-memory agent


def _finishes(fn: Callable[[], Any]) -> list[Any]:
    """``[fn()]`` once it returns in another thread; [] if it did not within BOUND."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(BOUND)
    return out


def _bump(data: dict[str, Any]) -> None:
    data["n"] = data.get("n", 0) + 1


def test_ctrl_c_in_a_change_function_leaves_the_agents_updates_working() -> None:
    store = SyncStateStore("memory://")
    update(store, "a", _bump)

    def interrupted(data: dict[str, Any]) -> None:
        data["n"] = 100
        raise KeyboardInterrupt  # Ctrl-C while the change function runs

    with pytest.raises(KeyboardInterrupt):
        update(store, "a", interrupted)
    done = _finishes(lambda: update(store, "a", _bump).data)
    assert done == [{"n": 2}]  # (hung before: the runner waited for the interrupted call)
    assert _finishes(store.close) == [None]
