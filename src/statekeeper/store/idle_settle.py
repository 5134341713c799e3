"""Settling idle agents in the background (``StateStore(settle_after=...)``).

:func:`~.settle.settle` stores an agent's head as one whole snapshot, so that a cold
load reads one row (docs/benchmarks.md, "settle11"). Here the store calls it by itself:
once an agent *this store saved* has had no save for ``settle_after`` seconds, it is
settled by one background task on the loop of its last save.

- **Lowest priority.** One settle at a time. Before each, the task yields to the loop
  (a save waiting to run goes first), and an agent saved again meanwhile, or whose write
  lock is held (a save in flight), is not settled now — its save put it back in the
  queue. A settle does not delay another agent's save beyond its own commits.
- **Bounded.** At most :data:`MAX_QUEUED` agents wait; past it the one idle longest is
  dropped (counted in ``dropped``: it is left as its saves left it, as without a trigger).
- **Fenced saves are never settled.** An agent whose last save by this store carried a
  lease's fence is taken out of the queue: a settle is a write, and one stored by a
  holder that lost its lease since would be a write the fence did not check
  (a settle's commit takes no fence). Its next unfenced save puts it back.
- **Skipped** (counted in ``skipped``) where :func:`~.settle.settle` stores nothing: the
  head whole already, a store that does not settle, the head moved by another process,
  an engine that cannot check the head in the settle's commit (S3: an explicit settle
  raises there).
- **A closed engine** (its owner closed it under a store still open) stops the
  settles quietly: :class:`~statekeeper.errors.StoreClosed` from a settle is counted in
  ``skipped``, the queue emptied, nothing logged (as at the store's own close).
- **A failure** is logged (logger ``statekeeper.store.idle_settle``, a warning naming the
  agent and the error's type, never its state) and counted in ``failed``; the agent is
  not tried again until its next save. Nothing is raised into any caller.
- **Close** cancels what waits and the settle running, and waits for it to end (on
  another thread's loop too: handed to that loop): a settle is one commit, safe when
  cut (``settle``'s own doc: a crash before it leaves today's chain), and nothing is
  settled at close.

:meth:`IdleSettler.idle` waits until nothing is due or running: with ``settle_after=0``
a test saves, awaits ``store.idle_settled()`` and finds the agent settled, with no sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..errors import StoreClosed

__all__ = ["MAX_QUEUED", "IdleSettleStats", "IdleSettler"]

#: the most agents waiting to be settled; past it the one idle longest is dropped
MAX_QUEUED = 10_000

_log = logging.getLogger(__name__)
_now = time.monotonic


@dataclass(frozen=True, slots=True)
class IdleSettleStats:
    """Counters of one store's idle settles (``StoreStats.idle_settles``)."""

    #: settles that stored a whole row
    settled: int
    #: settles that stored nothing (whole already, moved by another process, ...)
    skipped: int
    #: settles that raised (logged; not tried again until the agent's next save)
    failed: int
    #: agents taken out of a full queue unsettled
    dropped: int
    #: agents waiting now
    pending: int


class IdleSettler:
    """The queue and the background task of one store's idle settles (module doc)."""

    def __init__(
        self,
        after: float,
        settle: Callable[[str], Awaitable[int | None]],
        busy: Callable[[str], bool],
        *,
        limit: int = MAX_QUEUED,
    ) -> None:
        self.after = float(after)
        self._settle = settle
        self._busy = busy
        self._limit = limit
        #: agent -> monotonic time of its last unfenced save here, oldest first
        self._last: dict[str, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._closed = False
        self.settled = self.skipped = self.failed = self.dropped = 0

    # -- the save's side (every save of the store: keep it small) ------------------------

    def saved(self, agent_id: str) -> None:
        """``agent_id`` was saved (unfenced) now: settle it once it has been idle."""
        last = self._last
        if last.pop(agent_id, None) is None and len(last) >= self._limit:
            del last[next(iter(last))]
            self.dropped += 1
        last[agent_id] = _now()
        if self._timer is None and self._task is None:
            self._arm(self.after)
        elif self._loop is not _get_loop():
            self._moved()

    def _moved(self) -> None:
        """Saved on another loop than the timer's: once that loop is closed its timer
        and task never run again — armed again on this one (an old loop still open,
        another thread's, keeps them)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self._timer = self._task = None
            self._arm(self.after)

    def fenced(self, agent_id: str) -> None:
        """``agent_id``'s last save here carried a fence: never settled from here."""
        self._last.pop(agent_id, None)

    def forget(self, agent_id: str) -> None:
        """``agent_id`` was deleted here: nothing to settle."""
        self._last.pop(agent_id, None)

    # -- the background side --------------------------------------------------------------

    def _arm(self, delay: float) -> None:
        if self._closed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # (no loop: the next save arms it)
            return
        self._loop = loop
        self._timer = loop.call_later(max(delay, 0.0), self._fire)

    def _fire(self) -> None:
        self._timer = None
        if self._closed or self._task is not None or self._loop is None:
            return
        self._task = self._loop.create_task(self._run())

    async def _run(self) -> None:
        try:
            while not self._closed:
                await asyncio.sleep(0)  # (a save waiting to run goes first)
                last = self._last
                if not last:
                    break
                agent_id, at = next(iter(last.items()))
                wait = at + self.after - _now()
                if wait > 0:
                    self._arm(wait)
                    break
                del last[agent_id]
                if self._busy(agent_id):
                    continue  # a write holds it: that save puts it back in the queue
                await self._one(agent_id)
        finally:
            self._task = None
            if self._timer is None:
                self._wake()

    async def _one(self, agent_id: str) -> None:
        try:
            seq = await self._settle(agent_id)
        except asyncio.CancelledError:
            raise
        except StoreClosed:
            # the store or its engine was closed under the settle (an engine its owner
            # closes itself, the store never closed): nothing is settled at close, nor
            # can any agent queued be — not a failure, nothing to tell
            self._last.clear()
            self.skipped += 1
            return
        except Exception as exc:
            self.failed += 1
            _log.warning(
                "idle settle of agent %r failed (%s); not tried again until its next save",
                agent_id,
                type(exc).__name__,
            )
            return
        if seq is None:
            self.skipped += 1
        else:
            self.settled += 1

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    def stats(self) -> IdleSettleStats:
        """The counters now."""
        return IdleSettleStats(
            self.settled, self.skipped, self.failed, self.dropped, len(self._last)
        )

    async def idle(self) -> None:
        """Wait until no settle is due or running: every agent queued has been settled,
        skipped or has failed (one saved again meanwhile waits for its own idle time:
        with ``settle_after`` > 0 this may take that long)."""
        while (self._last or self._task is not None) and not self._closed:
            if self._task is None and self._timer is None:
                self._arm(0.0 if not self._last else self.after)
                if self._timer is None:
                    return
            future = asyncio.get_running_loop().create_future()
            self._waiters.append(future)
            await future

    async def close(self) -> None:
        """Cancel what waits and the settle running; nothing is settled at close."""
        self._closed = True
        self._last.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task = self._task
        try:
            if task is not None and not task.done():
                if task.get_loop() is _running_loop():
                    task.cancel()
                    # (waited for, not awaited: a cancellation of close itself reaches
                    # its caller — suppressing the settle's CancelledError swallowed it)
                    await asyncio.wait({task})
                    if not task.cancelled():
                        task.result()  # (its own error, as awaiting it raised)
                else:
                    await _cancelled_there(task)
        finally:
            self._task = None
            self._wake()


async def _cancelled_there(task: asyncio.Task[None]) -> None:
    """Cancel ``task``, which runs on another loop (another thread's), and wait for it
    to end there: handed to its loop thread-safely. Was: only cancelled
    (``call_soon_threadsafe``), and close returned while the settle could still be
    committing on the other loop — the store then closed its engine under it. A loop
    closed has nothing running; one stopped (not running, not closed) runs nothing
    until it runs again: the cancel is left to it, as there is nothing to wait for
    now (waiting would never end) — also when it stops after the cancel was handed."""
    loop = task.get_loop()
    if loop.is_closed():
        return
    if not loop.is_running():
        with contextlib.suppress(RuntimeError):  # (closed meanwhile)
            loop.call_soon_threadsafe(task.cancel)
        return

    async def cancel_and_wait() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    try:
        handed = asyncio.run_coroutine_threadsafe(cancel_and_wait(), loop)
    except RuntimeError:  # (closed meanwhile: nothing runs there any more)
        return
    # that loop may stop (or close) before it runs the cancel, or while the settle
    # ends: no reply then until it runs again (if ever), so its running is looked at
    # while waiting (was: waited for ever); the cancel stays queued there
    waited = asyncio.wrap_future(handed)
    while True:
        done, _ = await asyncio.wait({waited}, timeout=_LOOK)
        if done:
            waited.result()
            return
        if loop.is_closed() or not loop.is_running():
            waited.add_done_callback(_ignored)
            return


#: seconds between looks at whether the settle's other loop still runs (close waiting)
_LOOK = 0.05


def _ignored(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()  # (read: not logged as never retrieved)


_get_loop = asyncio._get_running_loop


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
