"""Ctrl-C during a sync call, delivered at a safe point (:class:`Sigint`).

:class:`~.shared_loop.SharedLoop` runs the loop of a sync face (the store's, the
LangGraph saver's) on the calling thread, so the
default SIGINT handler raised ``KeyboardInterrupt`` at whatever line of statekeeper's
code (or asyncio's) ran then: a write stopped half-way, a loop left marked as run.
Within :class:`Sigint` a first SIGINT cancels the call instead, as
:class:`asyncio.Runner` does for its main task: the
cancellation reaches the call at its next ``await``, where the store's code is
cancel-safe, and ``KeyboardInterrupt`` is raised once the call has ended. A second
SIGINT raises at once (the user insists; :class:`~.shared_loop.SharedLoop` then still
releases the loop). Only on the main thread with Python's default handler: an
application's own handler is left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType

__all__ = ["MAIN_THREAD", "Sigint"]

#: the main thread's ident: the only thread Python runs signal handlers on
MAIN_THREAD = threading.main_thread().ident

#: ``signal.signal`` without its wrapper, which maps what it returns to the ``Handlers``
#: enum: for a handler that is a function that lookup raises and catches a
#: ``ValueError`` formatted with the function's repr, twice a call (~62 k
#: instructions, half of a main-thread saver call's cost on the loop:
#: docs/benchmarks.md, "lgput"). Only SIGINT and Python functions (or the default
#: handler) pass here, which need no mapping.
_set_handler: Callable[..., object] = getattr(sys.modules.get("_signal"), "signal", signal.signal)


def _nothing() -> None:
    pass


class Sigint:
    """Within: SIGINT cancels what :meth:`aim` names, and ``KeyboardInterrupt`` is
    raised on leaving."""

    __slots__ = ("_cancel", "_loop", "_prev", "_woke", "count")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._cancel: Callable[[], object] | None = None
        self._prev: object = None
        #: the wakeup fd set while within (the loop's self-pipe), else None
        self._woke: int | None = None
        self.count = 0

    def __enter__(self) -> Sigint:
        if threading.get_ident() != MAIN_THREAD:
            return self
        try:
            prev = _set_handler(signal.SIGINT, self._on_sigint)
        except ValueError:  # (not the main interpreter)
            return self
        if prev is signal.default_int_handler:
            self._prev = prev
            self._wake_loop()
        else:  # the application's own handler (or SIG_IGN): left in place
            _set_handler(signal.SIGINT, prev)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._prev is not None:
            if self._woke is not None:
                signal.set_wakeup_fd(-1)
                self._woke = None
            _set_handler(signal.SIGINT, signal.default_int_handler)
            self._prev = None
        if self.count and not isinstance(exc, KeyboardInterrupt):
            raise KeyboardInterrupt

    def _wake_loop(self) -> None:
        """Have a SIGINT wake the loop should it wait in its selector: a signal that
        came just before the poll began (after the interpreter last looked for one)
        ran its handler only once the poll returned — never, with nothing else to wake
        it (a save waiting for ever; seen 1 run in ~4 of the sync store's Ctrl-C test).
        As ``loop.add_signal_handler`` does: the signal number is written into the
        loop's self-pipe, whose reader ignores a signal with no loop handler. Not when
        the application set a wakeup fd of its own."""
        sock = getattr(self._loop, "_csock", None)  # (a selector loop's self-pipe)
        if sock is None:
            return
        with contextlib.suppress(ValueError, OSError):
            previous = signal.set_wakeup_fd(sock.fileno(), warn_on_full_buffer=False)
            if previous == -1:
                self._woke = sock.fileno()
            else:  # the application's own: put back
                signal.set_wakeup_fd(previous)

    def aim(self, cancel: Callable[[], object]) -> None:
        """What a SIGINT cancels (the call's task or future); at once if one came."""
        self._cancel = cancel
        if self.count:
            cancel()

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt
        if self._cancel is not None:
            self._cancel()
        # wake the loop should it wait in its selector (as asyncio.Runner does)
        with contextlib.suppress(RuntimeError):  # the loop was closed
            self._loop.call_soon_threadsafe(_nothing)
