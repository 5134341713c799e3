"""A sync call handed to the thread running a :class:`~.shared_loop.SharedLoop`
(:class:`Handed`), cancelled by its caller's Ctrl-C and waited for to its end.

``run_coroutine_threadsafe``'s future, cancelled by the caller, was done at once while
its task still ran on the other thread: ``KeyboardInterrupt`` reached the caller while
the call ran on, and a save interrupted landed after it. Here the caller cancels the
task, and the future is done only once the task has ended."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from .interrupts import Sigint

__all__ = ["Handed"]

T = TypeVar("T")


class Handed(Generic[T]):
    """``coro`` run as a task of ``loop`` (by whichever thread runs it); :attr:`future`
    gets its outcome once the task has ended (cancelled: cancelled)."""

    __slots__ = ("_coro", "_loop", "_task", "future")

    def __init__(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> None:
        self._loop = loop
        self._coro = coro  # (handed to the loop by :meth:`wait`, inside its interrupt guard)
        self._task: asyncio.Task[T] | None = None
        self.future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def _start(self, coro: Coroutine[Any, Any, T]) -> None:
        try:
            self._task = task = self._loop.create_task(coro)
        except BaseException as exc:  # (as run_coroutine_threadsafe: the caller gets it)
            coro.close()
            self.future.set_exception(exc)
            raise
        task.add_done_callback(self._copy)

    def _copy(self, task: asyncio.Task[T]) -> None:
        """(On the loop, the task ended.) Its outcome into :attr:`future`."""
        if task.cancelled():
            self.future.cancel()  # (pending until now: nobody else cancels it)
        elif (exc := task.exception()) is not None:
            self.future.set_exception(exc)
        else:
            self.future.set_result(task.result())

    def wait(
        self, drive: Callable[..., None], sigint: Sigint | None
    ) -> concurrent.futures.Future[T]:
        """Wait, with ``drive`` (:meth:`.shared_loop.SharedLoop._drive`: it runs the loop
        should its runner leave), until :attr:`future` is done, and return it. A Ctrl-C
        (``sigint``) cancels the task; an interrupt raised here (an application's SIGINT
        handler) cancels it, waits for its end and is raised (a second Ctrl-C: at once)."""
        future, event = self.future, threading.Event()

        def until() -> asyncio.Future[T]:
            return asyncio.wrap_future(future, loop=self._loop)

        try:
            future.add_done_callback(lambda _: event.set())
            # scheduled here, not at construction: ``call_soon_threadsafe`` releases the
            # GIL in its write to the loop's self-pipe, and the other thread may run the
            # task and its Ctrl-C reach this thread right then — an interrupt raised
            # there must cancel the task too (it did not: the save landed after it)
            self._loop.call_soon_threadsafe(self._start, self._coro)
            if sigint is not None:
                sigint.aim(self.cancel)
            drive(future.done, until, event)
        except BaseException:
            self.cancel()
            if sigint is None or sigint.count < 2:
                drive(future.done, until, event)  # (the same event: its end wakes it)
            raise
        return future

    def cancel(self) -> None:
        """(Any thread, a signal handler's too.) Cancel the task; :attr:`future` is done
        once it has ended. (Scheduled after :meth:`_start`: the task is there then.)"""
        with contextlib.suppress(RuntimeError):  # (the loop was closed)
            self._loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
        elif not self.future.done():  # never handed (interrupted before it was scheduled:
            self._coro.close()  # ``_start`` would have run first, the loop's FIFO order)
            self.future.cancel()
