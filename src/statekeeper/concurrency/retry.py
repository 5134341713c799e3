"""Optimistic locking made convenient: read, change, write — and on conflict, again.

Every write to a stream can carry ``expected_seq``; if another writer got there first
the write fails with :class:`~statekeeper.errors.ConflictError` and nothing is stored.
:func:`update` wraps the whole read-modify-write cycle: it reads the agent's current
data, calls *your* change function on a private copy, and writes the result expecting
the seq it read. On a conflict it waits (jittered exponential backoff), re-reads the
new state and calls your function *again* on it — so a change is always applied to the
state it was computed from, and no concurrent update is lost. After ``attempts``
conflicts it raises :class:`~statekeeper.errors.RetriesExhausted` (a
``ConflictError`` carrying the last conflict).

The change function may be called several times: keep it free of side effects (or
make them idempotent), and do not keep state between calls.

>>> import asyncio
>>> from statekeeper import StateStore
>>> async def demo():
...     async with StateStore("memory://") as store:
...         def bump(data):
...             data["n"] = data.get("n", 0) + 1
...         await asyncio.gather(*(update(store, "counter", bump) for _ in range(20)))
...         return (await store.load("counter")).data
>>> asyncio.run(demo())
{'n': 20}
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from ..errors import (
    AgentNotFound,
    ConfigurationError,
    ConflictError,
    InvalidArgument,
    RetriesExhausted,
)
from ..records import AppendResult, EventKind

if TYPE_CHECKING:
    from ..store.agent import DurableAgent
    from ..store.store import Leased, StateStore

__all__ = ["Backoff", "Updated", "retry_on_conflict", "update", "update_agent"]

T = TypeVar("T")

#: a change function: mutate ``data`` in place (return None) or return new data
ChangeFn = Callable[[dict[str, Any]], "dict[str, Any] | Awaitable[dict[str, Any] | None] | None"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter between conflicting attempts.

    Before attempt ``n + 1`` the helper sleeps a uniformly random time in
    ``[0, min(cap, base * factor ** (n - 1))]``: randomness spreads writers that
    collided so they do not collide again in lock-step; the cap bounds the wait.
    """

    base: float = 0.002
    factor: float = 2.0
    cap: float = 0.2

    def __post_init__(self) -> None:
        if self.base < 0 or self.factor < 1 or self.cap < 0:
            raise ConfigurationError("backoff needs base >= 0, factor >= 1 and cap >= 0")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        ceiling = min(self.cap, self.base * self.factor ** max(attempt - 1, 0))
        return (rng or random).uniform(0.0, ceiling)


@dataclass(frozen=True, slots=True)
class Updated:
    """What :func:`update` stored: the agent's data after the change, its seq, and
    how many attempts it took. ``result`` is None when the change left the data as it
    was (nothing was written)."""

    agent_id: str
    seq: int
    data: dict[str, Any]
    attempts: int
    result: AppendResult | None


def _check_attempts(attempts: int) -> None:
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ConfigurationError(f"attempts must be an int >= 1, not {attempts!r}")


async def update(
    store: StateStore,
    agent_id: str,
    fn: ChangeFn,
    *,
    attempts: int = 10,
    backoff: Backoff | None = None,
    lease: Leased | None = None,
    create: bool = True,
    event_type: str = EventKind.PATCH,
    info: dict[str, Any] | None = None,
    actor: str | None = None,
) -> Updated:
    """Apply ``fn`` to the agent's data with optimistic locking, retrying on conflict.

    ``fn(data)`` receives a private copy of the current data; it mutates it in place
    (returning None) or returns the new data; it may be a coroutine function. The new
    data is written with ``expected_seq`` = the seq it was read at (and fenced with
    ``lease`` when given). On :class:`~statekeeper.errors.ConflictError` the helper
    backs off, re-reads and calls ``fn`` again, at most ``attempts`` times in all.

    With ``create`` (the default) a missing agent starts from ``{}``; otherwise
    :class:`~statekeeper.errors.AgentNotFound` is raised. Raises
    :class:`~statekeeper.errors.RetriesExhausted` when every attempt conflicted;
    :class:`~statekeeper.errors.LeaseLost` (not retried) when ``lease`` was taken over.
    """
    _check_update(agent_id, fn, info)
    _check_attempts(attempts)
    backoff = backoff or Backoff()
    last: ConflictError | None = None
    for attempt in range(1, attempts + 1):
        current = await store.get(agent_id)
        if current is None and not create:
            raise AgentNotFound(agent_id)
        seq = current.seq if current is not None else 0
        original = current.data if current is not None else {}
        working = orjson.loads(orjson.dumps(original))
        out = fn(working)
        if inspect.isawaitable(out):
            out = await out
        new = working if out is None else out
        if not isinstance(new, dict):
            raise InvalidArgument(
                "fn", f"fn (the change function) must return a dict or None, not {new!r:.60}"
            )
        if current is not None and new == original:
            return Updated(agent_id, seq, new, attempt, None)
        try:
            result = await store.save(
                agent_id,
                new,
                expected_seq=seq,
                lease=lease,
                event_type=event_type,
                info=info,
                actor=actor,
            )
        except ConflictError as exc:
            last = exc
            if attempt < attempts:
                await asyncio.sleep(backoff.delay(attempt))
            continue
        return Updated(agent_id, result.last_seq, new, attempt, result)
    assert last is not None
    raise RetriesExhausted(agent_id, attempts, last)


def _check_update(agent_id: str, fn: object, info: object) -> None:
    """The arguments of :func:`update` that the store does not see before ``fn`` runs."""
    from ..arguments import check_agent_id, check_mapping

    check_agent_id(agent_id)
    if not callable(fn):
        raise InvalidArgument("fn", f"fn must be callable, not {type(fn).__name__}")
    check_mapping(info, "info", optional=True)


async def update_agent(
    agent: DurableAgent,
    fn: Callable[[DurableAgent], Awaitable[Any] | Any],
    *,
    attempts: int = 10,
    backoff: Backoff | None = None,
) -> int:
    """Read-modify-write on a :class:`~statekeeper.store.DurableAgent`.

    ``fn(agent)`` changes ``agent.data`` and/or fires transitions; pending data changes
    are then saved. On a conflict the agent is refreshed from storage (unsaved changes
    dropped, a transition that failed to write already reverted) and ``fn`` runs again.
    Returns the agent's seq after the write (it is fenced by ``agent.lease`` if bound).
    """
    _check_attempts(attempts)
    backoff = backoff or Backoff()
    last: ConflictError | None = None
    for attempt in range(1, attempts + 1):
        try:
            out = fn(agent)
            if inspect.isawaitable(out):
                await out
            await agent.save()
            return agent.seq
        except ConflictError as exc:
            last = exc
            await agent.refresh()
            if attempt < attempts:
                await asyncio.sleep(backoff.delay(attempt))
    assert last is not None
    raise RetriesExhausted(agent.agent_id, attempts, last)


async def retry_on_conflict(
    op: Callable[[], Awaitable[T]],
    *,
    attempts: int = 10,
    backoff: Backoff | None = None,
    agent_id: str = "",
) -> T:
    """Run ``op()`` until it does not raise :class:`~statekeeper.errors.ConflictError`.

    ``op`` must re-read whatever it depends on each time it is called. Raises
    :class:`~statekeeper.errors.RetriesExhausted` after ``attempts`` conflicts.
    """
    _check_attempts(attempts)
    backoff = backoff or Backoff()
    last: ConflictError | None = None
    for attempt in range(1, attempts + 1):
        try:
            return await op()
        except ConflictError as exc:
            if isinstance(exc, RetriesExhausted):
                raise
            last = exc
            if attempt < attempts:
                await asyncio.sleep(backoff.delay(attempt))
    assert last is not None
    raise RetriesExhausted(agent_id or last.agent_id, attempts, last)
