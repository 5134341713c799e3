"""Driving the transition algorithm: synchronously (``fire``, ``send_sync``,
``can_transition``: it must never yield) or awaiting what it yields (``transition``,
``send``, ``can_transition_async``), asyncio tasks taking turns on one machine."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Generator, Mapping
from typing import Any, cast

from statekeeper.errors import TransitionInProgress
from statekeeper.machine.definition import E, S
from statekeeper.machine.running import _DRY, _SYNC, _WANT, _MachineRunning
from statekeeper.machine.types import TransitionResult

__all__: list[str] = []


class _MachineDrivers(_MachineRunning[S, E]):
    """The sync and async drivers of a machine."""

    __slots__ = ()

    # ------------------------------------------------------------------- drivers

    def fire(self, event: E, metadata: Mapping[str, Any] | None = None) -> bool:
        """Fire ``event`` synchronously; True if the machine moved.

        Raises :class:`~statekeeper.errors.AsyncRequired` (state unchanged) when the
        transition would need an async guard, action, hook or callback.
        """
        gen = self._run(event, metadata, _SYNC)
        try:
            gen.send(None)
        except StopIteration as stop:
            return stop.value is not None
        gen.close()  # pragma: no cover - the core never yields in sync mode
        raise AssertionError("sync transition yielded")  # pragma: no cover

    def send_sync(
        self, event: E, metadata: Mapping[str, Any] | None = None
    ) -> TransitionResult[S, E] | None:
        """Like :meth:`fire`, but return the :class:`TransitionResult` (``None`` if refused)."""
        gen = self._run(event, metadata, _SYNC | _WANT)
        try:
            gen.send(None)
        except StopIteration as stop:
            return cast("TransitionResult[S, E] | None", stop.value)
        gen.close()  # pragma: no cover
        raise AssertionError("sync transition yielded")  # pragma: no cover

    async def transition(self, event: E, metadata: Mapping[str, Any] | None = None) -> bool:
        """Fire ``event``; True if the machine moved, False if refused (non-strict mode).

        Guards, actions, hooks and callbacks may be sync or async.
        """
        if self._busy:
            await self._wait_turn(event)
        gen = self._run(event, metadata, 0)
        try:
            awaitable = gen.send(None)
        except StopIteration as stop:
            return stop.value is not None
        return (await self._resume(gen, awaitable)) is not None

    async def send(
        self, event: E, metadata: Mapping[str, Any] | None = None
    ) -> TransitionResult[S, E] | None:
        """Like :meth:`transition`, but return the :class:`TransitionResult`.

        Returns ``None`` when the event is refused (non-strict mode).
        """
        if self._busy:
            await self._wait_turn(event)
        gen = self._run(event, metadata, _WANT)
        try:
            awaitable = gen.send(None)
        except StopIteration as stop:
            return cast("TransitionResult[S, E] | None", stop.value)
        return cast("TransitionResult[S, E] | None", await self._resume(gen, awaitable))

    def can_transition(self, event: E) -> bool:
        """True if ``event`` would fire now (sync guards evaluated; nothing runs or changes).

        Raises :class:`~statekeeper.errors.AsyncRequired` if a guard is async; use
        :meth:`can_transition_async` then.
        """
        gen = self._run(event, None, _SYNC | _DRY)
        try:
            gen.send(None)
        except StopIteration as stop:
            return bool(stop.value)
        gen.close()  # pragma: no cover
        raise AssertionError("sync check yielded")  # pragma: no cover

    async def can_transition_async(self, event: E) -> bool:
        """Like :meth:`can_transition`, awaiting async guards."""
        gen = self._run(event, None, _DRY)
        try:
            awaitable = gen.send(None)
        except StopIteration as stop:
            return bool(stop.value)
        return bool(await self._resume(gen, awaitable, owns=False))

    async def _resume(
        self, gen: Generator[Any, Any, Any], awaitable: Any, owns: bool = True
    ) -> Any:
        """Drive ``gen`` to completion, awaiting what it yields (the async driver's loop).

        ``owns``: the generator holds the machine's busy flag while it is before its
        commit; the current task is then recorded so a re-entrant call is detected.
        """
        while True:
            if owns and self._busy:
                self._owner = asyncio.current_task()
            try:
                value = await awaitable
            except BaseException as exc:  # includes cancellation: the core releases the machine
                try:
                    awaitable = gen.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    awaitable = gen.send(value)
                except StopIteration as stop:
                    return stop.value

    async def _wait_turn(self, event: E) -> None:
        task = asyncio.current_task()
        while self._busy:
            if task is not None and task is self._owner:
                raise TransitionInProgress(self._current, event)
            if self._waiters is None:
                self._waiters = deque()
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(future)
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._wake_next()  # we were handed the turn: pass it on
                raise
