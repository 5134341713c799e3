"""Whether a pass of the event loop made now would run anything (:func:`nothing_waits`):
asked by the SQLite engine before it commits a write on the loop without letting the
loop run (the lean append, a lone append, a batch committed on the loop); and the
timers a pass would still have to run (:func:`live_timers`): asked by the LangGraph
saver's loop before it starts its background thread for them."""

from __future__ import annotations

import asyncio
import heapq
import selectors
from typing import Any

__all__ = ["live_timers", "nothing_waits"]


def nothing_waits(loop: asyncio.AbstractEventLoop) -> bool:
    """True when a pass of ``loop`` made now would run nothing: no timer due and no I/O
    ready (one poll of the loop's selector with no wait, as the pass's own poll; level-
    triggered, so what it sees is seen again by the loop's next poll). False when it
    cannot tell: a loop without asyncio's selector and timer heap (the proactor, uvloop)
    gets the pass. Cancelled timers first in the heap are dropped as the pass drops
    them (:func:`_dropped_cancelled`). The loop's own self-pipe is not I/O to wait
    for: when the poll finds something, :func:`_woken_only` reads the pipe's wake-ups
    as the pass would and looks again."""
    selector = getattr(loop, "_selector", None)
    timers = getattr(loop, "_scheduled", None)
    if selector is None or timers is None:
        return False
    if (
        timers
        and timers[0].when() <= loop.time() + getattr(loop, "_clock_resolution", 0.0)
        and (not timers[0]._cancelled or not _dropped_cancelled(loop, timers))
    ):
        return False
    if selector.__class__ is selectors.EpollSelector:
        # (its epoll object polled for one event: what select(0) finds, without its
        # Python, its list of keys, nor a buffer for 1,023 events)
        if not selector._selector.poll(0, 1):  # type: ignore[attr-defined]
            return True
    elif not selector.select(0):
        return True
    return _woken_only(loop, selector)


def _dropped_cancelled(loop: Any, timers: list[Any]) -> bool:
    """(A cancelled timer first in the heap, its time passed.) Drop the cancelled timers
    first in the heap (:func:`live_timers`); True when no timer due is left. A
    cancelled timer stays in the heap until a pass: one stepped without passes
    (``SharedLoop._step``) counted as due for every poll here and declined every
    write's lean path until a pass came (the LangGraph saver's held writes: the
    timeout of their ``asyncio.wait``, cancelled when the checkpoint takes them;
    docs/benchmarks.md, "wakebyte")."""
    left = live_timers(loop)
    if left is None:
        return False
    return not left or left[0].when() > loop.time() + loop._clock_resolution


def live_timers(loop: asyncio.AbstractEventLoop) -> list[Any] | None:
    """(Holding ``loop``: run by no other thread meanwhile.) The loop's timer heap once
    the cancelled timers first in it are dropped, as a pass of the loop drops them
    (``_run_once``): empty when only cancelled timers were left, else its first timer
    is live. None when the loop has no such heap and count (the proactor, uvloop): it
    cannot tell."""
    timers: list[Any] | None = getattr(loop, "_scheduled", None)
    if timers is None or getattr(loop, "_timer_cancelled_count", None) is None:
        return None
    while timers and timers[0]._cancelled:
        handle = heapq.heappop(timers)
        handle._scheduled = False
        # (decremented in place, as asyncio does: a cancel counted meanwhile — by a
        # signal handler — is kept)
        loop._timer_cancelled_count -= 1  # type: ignore[attr-defined]
    return timers


def _woken_only(loop: Any, selector: selectors.BaseSelector) -> bool:
    """(The poll found something ready.) True when it was only the loop's self-pipe,
    now read, and nothing is ready after reading it.

    ``call_soon_threadsafe`` (another thread handing work to the loop) schedules its
    callback, then writes a byte into the self-pipe to wake a loop waiting in its poll.
    A loop stepped without a poll (``SharedLoop._step`` of the LangGraph saver) runs
    that callback but never reads the byte: every later poll here found the pipe
    readable and reported I/O ready — each write declined the lean path until
    something ran a full pass (docs/benchmarks.md, "wakebyte"). Read here as the
    pass reads it (``_read_from_self``: a signal number it carries schedules that
    signal's handler): a wake-up is only read once the callback it announces is on the
    loop's ready queue (written after it), so the callback is not lost, and is seen
    here (ready: False) when it has not run yet."""
    ssock = getattr(loop, "_ssock", None)
    read = getattr(loop, "_read_from_self", None)
    ready = getattr(loop, "_ready", None)
    if ssock is None or read is None or ready is None:
        return False
    pipe = ssock.fileno()
    found = selector.select(0)
    if any(key.fd != pipe for key, _ in found):
        return False  # other I/O is ready: the pass runs it
    if found:
        read()
    return not ready
