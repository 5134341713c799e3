"""Ctrl-C in the main thread while its sync call is handed to another thread running
the store's loop cancels the call, lets it end, and is raised (``Portal.call``'s
promise). Was: ``KeyboardInterrupt`` reached the caller while the call still ran on
the other thread (with Python's handler: the handed future was cancelled, done at
once, the task not yet); with an application's handler that raises, the call was not
cancelled at all and the interrupted save landed after the ``KeyboardInterrupt``."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from types import FrameType

import pytest

from statekeeper import SyncStateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.records import AppendRequest, AppendResult

#: a bound on waiting for what must happen: only a failure waits this long
_BOUND = 30.0
#: how often the held append sends SIGINT again while the caller has not seen one (a
#: signal landing just before its target blocks in a lock's wait is handled only once
#: the wait ends)
_AGAIN = 0.05

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="a SIGINT reaches the main thread only",
)


class Handed(MemoryBackend):
    """Agent ``busy``'s append keeps its caller's thread running the loop until
    ``release``; agent ``held``'s (handed to that thread) sends SIGINT to the main
    thread while ``unseen()``, until cancelled or ``release``."""

    def __init__(self, unseen: Callable[[], bool]) -> None:
        super().__init__()
        self.unseen = unseen
        self.main = threading.main_thread().ident or 0
        self.release = threading.Event()
        self.running = threading.Event()
        self.out = threading.Event()
        self.inside = False

    async def append(self, request: AppendRequest) -> AppendResult:
        if request.agent_id == "busy":
            self.running.set()
            while not self.release.is_set():
                await asyncio.to_thread(self.release.wait, _AGAIN)
        if request.agent_id == "held":
            self.inside = True
            try:
                while not self.release.is_set():
                    if self.unseen():
                        signal.pthread_kill(self.main, signal.SIGINT)  # Ctrl-C
                    await asyncio.to_thread(self.release.wait, _AGAIN)
            finally:
                self.inside = False
                self.out.set()
        return await super().append(request)


def _interrupted_handed_save(backend: Handed) -> dict[str, object]:
    """The main thread saves ``held`` while another thread runs the loop (``busy``)."""
    store = SyncStateStore(backend)
    seen: dict[str, object] = {}
    other = threading.Thread(target=store.save, args=("busy", {"n": 1}))
    other.start()
    watchdog = threading.Timer(_BOUND, backend.release.set)  # (a broken run fails)
    try:
        assert backend.running.wait(_BOUND)  # the other thread runs the loop
        watchdog.start()
        store.save("held", {"n": 1})
    except KeyboardInterrupt:
        seen["interrupted"] = True
        seen["still running"] = backend.inside
    finally:
        watchdog.cancel()
        backend.release.set()
        other.join(_BOUND)
    seen["landed"] = store.get("held") is not None  # (nothing after the interrupt)
    assert store.get("busy") is not None
    store.close()
    return seen


def test_ctrl_c_cancels_a_handed_call_and_raises_once_it_has_ended() -> None:
    """Python's own SIGINT handler (the store's :class:`Sigint` within the call)."""

    def unseen() -> bool:  # until the call's Sigint counted one (a second: at once)
        handler = signal.getsignal(signal.SIGINT)
        return getattr(getattr(handler, "__self__", None), "count", 1) == 0

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    seen = _interrupted_handed_save(Handed(unseen))
    assert seen == {"interrupted": True, "still running": False, "landed": False}


def test_an_application_handler_raising_cancels_a_handed_call_and_waits() -> None:
    """An application's handler that raises ``KeyboardInterrupt`` (once) in the wait."""
    fired: list[int] = []

    def once(signum: int, frame: FrameType | None) -> None:
        if not fired:
            fired.append(signum)
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, once)
    try:
        seen = _interrupted_handed_save(Handed(lambda: not fired))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen == {"interrupted": True, "still running": False, "landed": False}
