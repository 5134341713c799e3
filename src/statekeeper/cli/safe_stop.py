"""Ctrl-C and SIGTERM for a command that drives an event loop from sync code.

``langgraph import`` / ``export`` copy through the LangGraph savers' sync API: the
statekeeper saver runs its event loop on the calling (main) thread for each call. A
``KeyboardInterrupt`` (Ctrl-C) or ``SystemExit`` (SIGTERM, see ``app._terminated_as_exit``)
raised by a signal handler lands between any two bytecodes: inside the loop's code
or a task's step it kills that task half-way and leaves the others pending, and the
saver's close then fails on a loop in that state — pages of tracebacks ("Task was
destroyed but it is pending!", "coroutine ... was never awaited") instead of the one
line other commands print (they run on ``asyncio.run``, which turns Ctrl-C into a
cancellation of its task).

Within :func:`stopped_at_safe_points` the signal is raised at once only where the main
thread runs the command's own sync code (the CLI's and the copy's, with no frame of
asyncio, of the statekeeper library below them, or of a thread primitive); anywhere
else it is noted, and raised at the next safe point: a call of :func:`check` (the copy's
progress, once per checkpoint copied and per thread verified), a poll every ``_POLL``
seconds finding the main thread in such code, or the end of the block.
Later signals of the same stop are ignored (the clean-up runs once).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["check", "stopped_at_safe_points"]

#: seconds between two looks for a safe point while a signal waits
_POLL = 0.02

#: modules (first name parts) whose code a signal must not interrupt
_UNSAFE_TOP = frozenset({"asyncio", "selectors", "threading", "concurrent", "queue"})
#: the statekeeper modules that are the command's own sync code
_SAFE_OWN = (
    "statekeeper.cli",
    "statekeeper.integrations.langgraph.migrate",
    "statekeeper.integrations.langgraph.peers",
)


class _Stop:
    def __init__(self) -> None:
        self.signum: int | None = None  # the signal waiting for a safe point
        self.raised = False


_active: _Stop | None = None


def _exception(signum: int) -> BaseException:
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    return SystemExit(128 + signum)


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", ""))


def _safe(frame: FrameType | None) -> bool:
    """Whether the main thread, stopped at ``frame``, runs the command's own code: that
    frame is the command's (not a library's: an exception raised in a callback of a C
    extension may come out as another, as a serializer's ``TypeError``), and no frame
    below it is of the event loop, a thread primitive or the statekeeper library."""
    if frame is None or not _module(frame).startswith(_SAFE_OWN):
        return False
    while frame is not None:
        module = _module(frame)
        if module.split(".")[0] in _UNSAFE_TOP:
            return False
        if module.startswith("statekeeper.") and not module.startswith(_SAFE_OWN):
            return False
        frame = frame.f_back
    return True


def _raise(stop: _Stop) -> None:
    signum = stop.signum
    assert signum is not None
    stop.signum = None
    stop.raised = True
    signal.setitimer(signal.ITIMER_REAL, 0)
    raise _exception(signum)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    stop = _active
    if stop is None or stop.raised:
        return  # this stop is under way: its clean-up runs once
    if stop.signum is None:
        stop.signum = signum
    if _safe(frame):
        _raise(stop)
    signal.setitimer(signal.ITIMER_REAL, _POLL)


def _on_poll(signum: int, frame: FrameType | None) -> None:
    stop = _active
    if stop is None or stop.raised or stop.signum is None:
        return
    if _safe(frame):
        _raise(stop)
    signal.setitimer(signal.ITIMER_REAL, _POLL)


def check() -> None:
    """A safe point: raise the stop a signal asked for meanwhile, if any."""
    stop = _active
    if stop is not None and stop.signum is not None and not stop.raised:
        _raise(stop)


@contextlib.contextmanager
def stopped_at_safe_points() -> Iterator[None]:
    """Within: SIGINT and SIGTERM stop the command at a safe point (see the module)."""
    global _active
    if threading.current_thread() is not threading.main_thread() or _active is not None:
        yield  # (signals reach the main thread only)
        return
    stop = _Stop()
    previous: dict[int, Any] = {
        s: signal.signal(s, h)
        for s, h in (
            (signal.SIGINT, _on_signal),
            (signal.SIGTERM, _on_signal),
            (signal.SIGALRM, _on_poll),
        )
    }
    _active = stop
    try:
        yield
        check()  # the work ended before a safe point came: stop now, as asked
    finally:
        _active = None
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, h in previous.items():
            signal.signal(s, h)
