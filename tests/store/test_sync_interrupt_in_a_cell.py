"""Ctrl-C during a sync store's call made from a thread that runs another event loop
(a notebook's cell: Jupyter runs cells inside its own loop) cancels the call, lets it
end, and is raised — as ``Portal.call`` promises, and as the store's loop thread did
before issue 11. Since issue 11 such a call is handed to the portal's background
thread and its caller waited on the handed future: the ``KeyboardInterrupt`` left that
wait at once and the call ran on unseen — a save interrupted by the user still
landed afterwards, behind its caller's back."""

from __future__ import annotations

import asyncio
import signal
import threading
from types import FrameType

import pytest

from statekeeper import SyncStateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.records import AppendRequest, AppendResult

#: a bound on waiting for what must happen: only a failure waits this long
_BOUND = 30.0
#: how often the held append sends SIGINT again: a signal landing just before its
#: target blocks in a lock's wait is only handled once the wait ends (CPython)
_AGAIN = 0.05


class Held(MemoryBackend):
    """A memory backend whose append of agent ``held`` sends SIGINT to ``target`` (the
    caller, waiting), again and again, until it is cancelled or ``release`` is set;
    ``inside`` tells whether it is there, ``out`` is set once it has left."""

    def __init__(self, target: int) -> None:
        super().__init__()
        self.target = target
        self.release = threading.Event()
        self.out = threading.Event()
        self.inside = False

    async def append(self, request: AppendRequest) -> AppendResult:
        if request.agent_id == "held":
            self.inside = True
            try:
                while not self.release.is_set():
                    signal.pthread_kill(self.target, signal.SIGINT)  # Ctrl-C
                    await asyncio.to_thread(self.release.wait, _AGAIN)
            finally:
                self.inside = False
                self.out.set()
        return await super().append(request)


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="a SIGINT reaches the main thread only",
)
def test_ctrl_c_in_a_notebook_cell_cancels_the_call_and_waits_for_its_end() -> None:
    backend = Held(threading.get_ident())
    store = SyncStateStore(backend)
    seen: dict[str, object] = {}
    fired: list[int] = []

    def once(signum: int, frame: FrameType | None) -> None:
        """Ctrl-C, once (the SIGINTs sent again after it change nothing)."""
        if not fired:
            fired.append(signum)
            raise KeyboardInterrupt

    async def cell() -> None:  # (a notebook's cell: a loop runs on this thread)
        previous = signal.signal(signal.SIGINT, once)
        try:
            store.save("held", {"n": 1})
        except KeyboardInterrupt:
            seen["interrupted"] = True
            seen["still running"] = backend.inside
        finally:
            backend.release.set()
            assert backend.out.wait(_BOUND)  # (no SIGINT sent after the handler goes)
            signal.signal(signal.SIGINT, previous)

    asyncio.run(cell())
    assert seen == {"interrupted": True, "still running": False}
    store.save("other", {"n": 1})  # (a call after the end: the store works)
    assert store.get("held") is None  # the interrupted save was not made
    store.close()
