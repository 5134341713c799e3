"""``socket_timeout``: how long one pool checkout may wait for the server.

A frozen server (SIGSTOP) or a network that drops packets without a reset never closes
a connection, so nothing else ends a statement sent to it. A watchdog does: each
checkout is noted (its task and start time: two dict operations), and a timer that
runs only while checkouts are out looks at them every quarter of the timeout and
cancels the task of any older than the timeout; :meth:`Watchdog.fired` then tells the
checkout that the cancellation was the watchdog's (it is undone, and the checkout
raises a lost connection instead). ``asyncio.timeout`` per checkout does the same for
~7 µs of CPU each (a timer handle scheduled and cancelled, measured 7.1-9.5 µs against
0.35-0.6 µs for the notes, /tmp/trialfaults/tmocost.py at load 20); this costs the
notes.
"""

from __future__ import annotations

import asyncio
import itertools

__all__ = ["Watchdog"]


class Watchdog:
    """Cancels the task of a checkout older than ``seconds`` (see the module)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._out: dict[int, tuple[asyncio.Task[object], float]] = {}
        self._fired: set[int] = set()
        self._ids = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> int:
        """Note a checkout of the running task; returns its token for :meth:`stop`."""
        token = next(self._ids)
        loop = asyncio.get_running_loop()
        self._out[token] = (asyncio.current_task(), loop.time())  # type: ignore[assignment]
        if self._timer is None or self._loop is not loop:  # (none, or a loop that ended)
            self._loop = loop
            self._timer = loop.call_later(self.seconds / 4, self._look)
        return token

    def stop(self, token: int) -> None:
        """The checkout ended (call it before any other await)."""
        del self._out[token]
        if self._fired:
            self._fired.discard(token)

    def fired(self, token: int) -> bool:
        """Whether the watchdog cancelled this checkout's task (a CancelledError came
        out of it): the cancellation is undone, and True unless the task is being
        cancelled by someone else too."""
        if token not in self._fired:
            return False
        self._fired.discard(token)
        task = asyncio.current_task()
        return task is not None and task.uncancel() == 0

    def _look(self) -> None:
        self._timer = None
        out = self._out
        if not out:
            return
        loop = asyncio.get_running_loop()
        oldest = loop.time() - self.seconds
        for token, (task, started) in list(out.items()):
            if started <= oldest and token not in self._fired:
                self._fired.add(token)
                task.cancel()
        self._timer = loop.call_later(self.seconds / 4, self._look)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
